package cosmos

import "sync"

// OpStats is the cost of one kind of store operation since the store was
// created.
type OpStats struct {
	// Calls counts store method calls (not HTTP requests).
	Calls int64 `json:"calls"`
	// Errors counts calls that returned an error, including expected ones
	// such as ErrNotFound and ErrPrecondition.
	Errors int64 `json:"errors"`
	// Throttled counts 429 answers, retried or not.
	Throttled int64 `json:"throttled"`
	// RequestCharge is the sum of request units charged for the calls, every
	// attempt and metadata request they caused included.
	RequestCharge float64 `json:"requestCharge"`
}

// Stats is a snapshot of the store's cost per operation kind, a plain value
// that metrics can publish.
type Stats struct {
	Create      OpStats `json:"create"`
	Read        OpStats `json:"read"`
	Replace     OpStats `json:"replace"`
	Upsert      OpStats `json:"upsert"`
	Delete      OpStats `json:"delete"`
	Increment   OpStats `json:"increment"`
	Query       OpStats `json:"query"`
	ReadChanges OpStats `json:"readChanges"`
	// Admin covers EnsureContainers and CheckContainers.
	Admin OpStats `json:"admin"`
}

// Total sums every operation kind.
func (s Stats) Total() OpStats {
	var t OpStats
	for _, o := range []OpStats{s.Create, s.Read, s.Replace, s.Upsert, s.Delete, s.Increment, s.Query, s.ReadChanges, s.Admin} {
		t.Calls += o.Calls
		t.Errors += o.Errors
		t.Throttled += o.Throttled
		t.RequestCharge += o.RequestCharge
	}
	return t
}

// opKind names an operation kind; it indexes statsRecorder.
type opKind int

const (
	opCreate opKind = iota
	opRead
	opReplace
	opUpsert
	opDelete
	opIncrement
	opQuery
	opReadChanges
	opAdmin
	numOpKinds
)

var opNames = [numOpKinds]string{
	opCreate:      "create",
	opRead:        "read",
	opReplace:     "replace",
	opUpsert:      "upsert",
	opDelete:      "delete",
	opIncrement:   "increment",
	opQuery:       "query",
	opReadChanges: "read changes",
	opAdmin:       "admin",
}

func (k opKind) String() string { return opNames[k] }

type statsRecorder struct {
	mu  sync.Mutex
	ops [numOpKinds]OpStats
}

func (r *statsRecorder) record(k opKind, charge float64, throttled int, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := &r.ops[k]
	o.Calls++
	if failed {
		o.Errors++
	}
	o.Throttled += int64(throttled)
	o.RequestCharge += charge
}

func (r *statsRecorder) snapshot() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{
		Create:      r.ops[opCreate],
		Read:        r.ops[opRead],
		Replace:     r.ops[opReplace],
		Upsert:      r.ops[opUpsert],
		Delete:      r.ops[opDelete],
		Increment:   r.ops[opIncrement],
		Query:       r.ops[opQuery],
		ReadChanges: r.ops[opReadChanges],
		Admin:       r.ops[opAdmin],
	}
}
