package kernel

import (
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Job documents are decoded and encoded on every step of every job: by
// each CAS, each change-feed batch and each read. They go through
// go-json-experiment's v1 semantics, encoding/json's own on the v2 engine
// (what encoding/json is built on under GOEXPERIMENT=jsonv2): about twice
// as fast to decode a job, with a third of the allocations.
// TestCodecIsEncodingJSON holds it to encoding/json's bytes and values.
//
// Documents are written without HTML escaping (as an encoding/json Encoder
// with SetEscapeHTML(false)): '<', '>' and '&' take one byte, not six, so
// what a job gathers after submit is bounded in its stored bytes
// (fleet.MaxGrowthBytes). No stored bytes reach a browser as they are:
// the API decodes documents and encodes its own answers.
var unmarshal = jsonv1.Unmarshal

var storeOptions = jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(), jsontext.EscapeForHTML(false))

func marshal(v any) ([]byte, error) { return jsonv2.Marshal(v, storeOptions) }

// EncodeJob encodes j as the store keeps it, its growing fields bounded
// first (fleet.Job.BoundGrowth), so no write of it outgrows the store; CAS
// does the same through JobDocs.BeforeWrite.
func EncodeJob(j *fleet.Job) ([]byte, error) {
	j.BoundGrowth()
	return marshal(j)
}
