package kernel

import (
	"fmt"
	"reflect"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// jobHeadFields are the fields of fleet.Job that the dispatch function
// reads of each version the change feed carries: which job it is, whether
// it waits for a route, whether it was dispatched before, when it was
// created and last changed. It passes over a version its head says is not
// due, and decides a due one again on the whole job, in the stamp's CAS.
// Most versions are not due (a lifecycle's stamp, accept and stage
// changes), and a head decodes in about half the time of a whole job
// (BenchmarkDecodeJob: a shipped job of 1.5 KB, 28 -> 16 us).
var jobHeadFields = []string{"ID", "ProductID", "Stage", "TargetFactoryID", "NotBefore", "DispatchEpoch", "Dispatch", "CreatedAt", "UpdatedAt"}

// jobHeadType is a struct of jobHeadFields built from fleet.Job's own
// fields, types and tags, so it decodes them exactly as DecodeJob would;
// jobHeadIndex maps each of its fields to the job's.
var jobHeadType, jobHeadIndex = structOf(reflect.TypeFor[fleet.Job](), jobHeadFields)

// structOf is the struct of t's fields named, and each one's index in t.
func structOf(t reflect.Type, names []string) (reflect.Type, [][]int) {
	fields := make([]reflect.StructField, len(names))
	index := make([][]int, len(names))
	for i, name := range names {
		f, ok := t.FieldByName(name)
		if !ok {
			panic("kernel: " + t.String() + " has no field " + name)
		}
		fields[i] = reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag}
		index[i] = f.Index
	}
	return reflect.StructOf(fields), index
}

// DecodeJobHead decodes a job's version with only jobHeadFields set (and
// Rev): for a reader that reads no other field. A field outside them is
// not decoded, so a value there that DecodeJob would refuse is no error.
func DecodeJobHead(it store.Item) (*fleet.Job, error) {
	head := reflect.New(jobHeadType)
	if err := unmarshal(it.Body, head.Interface()); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", it.ID, err)
	}
	var j fleet.Job
	jv := reflect.ValueOf(&j).Elem()
	for i, index := range jobHeadIndex {
		jv.FieldByIndex(index).Set(head.Elem().Field(i))
	}
	j.Rev = it.Rev
	return &j, nil
}
