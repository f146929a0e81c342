package kernel

import (
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Job documents are decoded and encoded on every step of every job: by
// each CAS, each change-feed batch and each read. They go through
// go-json-experiment's v1 package, encoding/json's own semantics on the v2
// engine (what encoding/json is built on under GOEXPERIMENT=jsonv2): about
// twice as fast to decode a job, with a third of the allocations.
// TestCodecIsEncodingJSON holds it to encoding/json's bytes and values.
var (
	unmarshal = jsonv1.Unmarshal
	marshal   = jsonv1.Marshal
)
