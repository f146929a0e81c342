package kernel

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// fill sets every field reachable from v to a value that is not its zero
// (one element in each slice and map, strings with characters JSON escapes),
// so an encoding difference anywhere in the type shows.
func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 27, 8, 0, 0, 123456789, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`{"k":"<v>"}`))
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte("raw <bytes>"))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString(`a "quoted" <tag> & é` + "\n")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.25)
	case reflect.Interface:
		if v.NumMethod() == 0 {
			v.Set(reflect.ValueOf("any"))
		}
	}
}

// TestCodecIsEncodingJSON: the codec the CAS writes jobs with writes the
// bytes encoding/json writes, and reads them back to what encoding/json
// reads, for a job with every field set.
func TestCodecIsEncodingJSON(t *testing.T) {
	t.Parallel()
	var j fleet.Job
	fill(reflect.ValueOf(&j).Elem(), 0)
	want, err := json.Marshal(&j)
	require.NoError(t, err)
	got, err := marshal(&j)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	var a, b fleet.Job
	require.NoError(t, json.Unmarshal(want, &a))
	require.NoError(t, unmarshal(want, &b))
	require.Equal(t, a, b)
	require.Greater(t, len(want), 2000, "the filled job sets its fields: %s", want)
}
