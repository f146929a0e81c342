package fleet

import (
	"math"
	"slices"
	"strings"
	"time"
)

// Usage is what one run cost: dollars and tokens, as the engine reported
// them. Reports are cumulative for the run.
type Usage struct {
	USD          float64 `json:"usd"`
	InputTokens  int64   `json:"inputTokens"`
	OutputTokens int64   `json:"outputTokens"`
	// CacheReadTokens and CacheWriteTokens are the prompt-cache tokens a
	// structured engine reports apart from its input (Claude's
	// cache_read_input_tokens and cache_creation_input_tokens; Codex's
	// cached_input_tokens as reads).
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
}

// MaxUSD bounds every dollar figure the API takes (a run's usage, a job's
// budget.usd, a product's ceiling and default estimate). Budgets add and
// compare dollars as int64 millionths (micros): a figure past about 9.2e12
// converted to a negative one there, so a factory reporting a huge usage
// made its product's reservations and spend negative and its ceiling
// admitted everything. A billion dollars leaves room for thousands of such
// figures in one sum.
const MaxUSD = 1e9

// ValidateUSD rejects a dollar figure that is not finite, is negative, or
// is above MaxUSD, naming field.
func ValidateUSD(field string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return Invalid(field, "must be a finite number")
	case v < 0:
		return Invalid(field, "must not be negative, got %v", v)
	case v > MaxUSD:
		return Invalid(field, "must be at most %.0f USD, got %v", float64(MaxUSD), v)
	}
	return nil
}

// Validate rejects negative, non-finite or out-of-range figures, naming
// field.usd etc.
func (u Usage) Validate(field string) error {
	prefix := field + "."
	if field == "" {
		prefix = ""
	}
	if err := ValidateUSD(prefix+"usd", u.USD); err != nil {
		return err
	}
	switch {
	case u.InputTokens < 0:
		return Invalid(prefix+"inputTokens", "must not be negative, got %d", u.InputTokens)
	case u.OutputTokens < 0:
		return Invalid(prefix+"outputTokens", "must not be negative, got %d", u.OutputTokens)
	case u.CacheReadTokens < 0:
		return Invalid(prefix+"cacheReadTokens", "must not be negative, got %d", u.CacheReadTokens)
	case u.CacheWriteTokens < 0:
		return Invalid(prefix+"cacheWriteTokens", "must not be negative, got %d", u.CacheWriteTokens)
	}
	return nil
}

// Max is the field-wise larger of u and o. Reports are cumulative, so a
// lower figure is an old report arriving late (a retry overtaken by a
// newer one), never a refund: merging by max makes any order of delivery
// end at the newest totals, and a retried report changes nothing.
func (u Usage) Max(o Usage) Usage {
	return Usage{USD: max(u.USD, o.USD), InputTokens: max(u.InputTokens, o.InputTokens), OutputTokens: max(u.OutputTokens, o.OutputTokens),
		CacheReadTokens: max(u.CacheReadTokens, o.CacheReadTokens), CacheWriteTokens: max(u.CacheWriteTokens, o.CacheWriteTokens)}
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
	EngineFacts
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
	r.EngineFacts.Merge(o.EngineFacts)
}

// ReportFor returns the job's report of the run at leaseEpoch, or nil.
func (j *Job) ReportFor(leaseEpoch int64) *RunReport {
	if j.Report == nil || j.Report.LeaseEpoch != leaseEpoch {
		return nil
	}
	return j.Report
}

// EngineFacts are what a structured engine's own output said about its
// run (API.md "Engines the factory understands"): its session, turns and
// model, when it last showed a sign of life, and how its process ended.
// Embedded, so the run's JSON carries them flat.
type EngineFacts struct {
	// Session resumes the engine's conversation on the factory that ran
	// it (Claude's session_id, Codex's thread_id).
	Session        string    `json:"engineSession,omitempty"`
	Turns          int       `json:"turns,omitempty"`
	Model          string    `json:"model,omitempty"`
	LastActivityAt time.Time `json:"lastActivityAt,omitzero"`
	Exit           *RunExit  `json:"exit,omitempty"`
}

// RunExit is how the engine's process ended.
type RunExit struct {
	// Code is the exit status; -1 when a signal ended the process.
	Code   int        `json:"code"`
	Signal string     `json:"signal,omitempty"`
	Reason ExitReason `json:"reason"`
}

// ExitReason says why an engine's process ended.
type ExitReason string

const (
	// ExitExited: the engine exited by itself.
	ExitExited ExitReason = "exited"
	// ExitSignal: a signal nobody in the fleet sent ended it (OOM, a crash).
	ExitSignal ExitReason = "signal"
	// ExitEngineIdle: the watchdog ended it after no output for the idle timeout.
	ExitEngineIdle ExitReason = "engine_idle"
	// ExitGrace: it gave its result and did not exit within the exit grace,
	// so the factory ended it; the run is judged by that result.
	ExitGrace ExitReason = "exit_grace"
	// ExitStopped: the factory stopped it (budget, cancel, fence, shutdown).
	ExitStopped ExitReason = "stopped"
)

// ExitReasons lists every exit reason.
func ExitReasons() []ExitReason {
	return []ExitReason{ExitExited, ExitSignal, ExitEngineIdle, ExitGrace, ExitStopped}
}

// Bounds of what a holder may report about its engine.
const (
	maxSessionLen = 128
	maxModelLen   = 128
	maxSignalLen  = 32
	maxTurns      = 1_000_000
)

// Validate rejects facts a holder could not have seen, naming the field.
// Session and model are plain tokens (engines use uuids and names like
// claude-sonnet-4-5 or openai/gpt-5): they reach argv on a resume.
func (e EngineFacts) Validate() error {
	if err := validateToken("engineSession", e.Session, maxSessionLen); err != nil {
		return err
	}
	if err := validateToken("model", e.Model, maxModelLen); err != nil {
		return err
	}
	if e.Turns < 0 || e.Turns > maxTurns {
		return Invalid("turns", "must be between 0 and %d, got %d", maxTurns, e.Turns)
	}
	if x := e.Exit; x != nil {
		if x.Code < -1 || x.Code > 255 {
			return Invalid("exit.code", "must be an exit status between 0 and 255, or -1 for a signal, got %d", x.Code)
		}
		if err := validateToken("exit.signal", x.Signal, maxSignalLen); err != nil {
			return err
		}
		if !slices.Contains(ExitReasons(), x.Reason) {
			return Invalid("exit.reason", "unknown exit reason %q (want %s)", x.Reason, alternatives(ExitReasons()))
		}
	}
	return nil
}

// validateToken accepts "" or a token of letters, digits and . _ - : / of
// at most n bytes, not starting with '-'.
func validateToken(field, s string, n int) error {
	switch {
	case s == "":
		return nil
	case len(s) > n:
		return Invalid(field, "is longer than %d characters", n)
	case s[0] == '-':
		return Invalid(field, "%q must not start with '-'", s)
	}
	for _, r := range s {
		if !(r < 0x80 && (isAlnum(byte(r)) || strings.ContainsRune("._-:/", r))) {
			return Invalid(field, "%q may hold only letters, digits and . _ - : / (found %q)", s, r)
		}
	}
	return nil
}

// Merge folds newer facts of the same run into e: turns and last activity
// never go back (reports may arrive out of order), the rest when set.
func (e *EngineFacts) Merge(o EngineFacts) {
	if o.Session != "" {
		e.Session = o.Session
	}
	if o.Model != "" {
		e.Model = o.Model
	}
	e.Turns = max(e.Turns, o.Turns)
	if o.LastActivityAt.After(e.LastActivityAt) {
		e.LastActivityAt = o.LastActivityAt
	}
	if o.Exit != nil {
		x := *o.Exit
		e.Exit = &x
	}
}

// Equal reports whether e and o say the same.
func (e EngineFacts) Equal(o EngineFacts) bool {
	if (e.Exit == nil) != (o.Exit == nil) || (e.Exit != nil && *e.Exit != *o.Exit) {
		return false
	}
	return e.Session == o.Session && e.Model == o.Model && e.Turns == o.Turns && e.LastActivityAt.Equal(o.LastActivityAt)
}
