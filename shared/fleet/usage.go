package fleet

import (
	"math"
)

// Usage is what one run cost: dollars and tokens, as the engine reported
// them. Reports are cumulative for the run.
type Usage struct {
	USD          float64 `json:"usd"`
	InputTokens  int64   `json:"inputTokens"`
	OutputTokens int64   `json:"outputTokens"`
}

// Validate rejects negative or non-finite figures, naming field.usd etc.
func (u Usage) Validate(field string) error {
	prefix := field + "."
	if field == "" {
		prefix = ""
	}
	switch {
	case math.IsNaN(u.USD) || math.IsInf(u.USD, 0):
		return Invalid(prefix+"usd", "must be a finite number")
	case u.USD < 0:
		return Invalid(prefix+"usd", "must not be negative, got %v", u.USD)
	case u.InputTokens < 0:
		return Invalid(prefix+"inputTokens", "must not be negative, got %d", u.InputTokens)
	case u.OutputTokens < 0:
		return Invalid(prefix+"outputTokens", "must not be negative, got %d", u.OutputTokens)
	}
	return nil
}

// Max is the field-wise larger of u and o. Reports are cumulative, so a
// lower figure is an old report arriving late (a retry overtaken by a
// newer one), never a refund: merging by max makes any order of delivery
// end at the newest totals, and a retried report changes nothing.
func (u Usage) Max(o Usage) Usage {
	return Usage{USD: max(u.USD, o.USD), InputTokens: max(u.InputTokens, o.InputTokens), OutputTokens: max(u.OutputTokens, o.OutputTokens)}
}

// DiffStat is the size of a delivered change against its base
// (git diff --shortstat).
type DiffStat struct {
	Files      int `json:"files"`
	Insertions int `json:"insertions"`
	Deletions  int `json:"deletions"`
}

// Validate rejects negative counts.
func (d DiffStat) Validate(field string) error {
	switch {
	case d.Files < 0:
		return Invalid(field+".files", "must not be negative, got %d", d.Files)
	case d.Insertions < 0:
		return Invalid(field+".insertions", "must not be negative, got %d", d.Insertions)
	case d.Deletions < 0:
		return Invalid(field+".deletions", "must not be negative, got %d", d.Deletions)
	}
	return nil
}

// RunReport is what the holder has told about the run in progress (its
// lease epoch): the engine, the usage so far, and at delivery the head it
// pushed and the diff stat. It lives on the job, so a report is fenced by
// the same compare-and-swap as every holder write, and is copied into the
// run document when the run ends.
type RunReport struct {
	LeaseEpoch int64     `json:"leaseEpoch"`
	Engine     string    `json:"engine,omitempty"`
	Usage      Usage     `json:"usage"`
	Head       string    `json:"head,omitempty"`
	Diff       *DiffStat `json:"diff,omitempty"`
}

// Merge folds a newer report of the same run into r: usage by Max, the
// other fields when set.
func (r *RunReport) Merge(o RunReport) {
	r.Usage = r.Usage.Max(o.Usage)
	if o.Engine != "" {
		r.Engine = o.Engine
	}
	if o.Head != "" {
		r.Head = o.Head
	}
	if o.Diff != nil {
		d := *o.Diff
		r.Diff = &d
	}
}

// ReportFor returns the job's report of the run at leaseEpoch, or nil.
func (j *Job) ReportFor(leaseEpoch int64) *RunReport {
	if j.Report == nil || j.Report.LeaseEpoch != leaseEpoch {
		return nil
	}
	return j.Report
}
