// Package stream reads the structured output of the engines the factory
// understands (Claude Code's stream-json, Codex's exec --json): one JSON
// object per line, read as it arrives, never buffered whole, lines past a
// bound skipped and counted, unknown event types ignored. A parser per
// engine turns the lines into running Facts: usage, session, model, turns,
// the final result and whether the provider's rate limit ended the run.
package stream

import (
	"bytes"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/clock"
)

// MaxLine bounds one event line. An engine's event carries a tool's
// output, which can be large; past this the line is skipped (still kept in
// the raw stream) and counted in Facts.Overlong.
const MaxLine = 1 << 20

// Outcome is what the engine's own final event said.
type Outcome string

// Outcomes.
const (
	// OutcomeNone: no final event (yet).
	OutcomeNone Outcome = ""
	// OutcomeSuccess: Claude's result with is_error false, Codex's
	// turn.completed.
	OutcomeSuccess Outcome = "success"
	// OutcomeError: Claude's result with is_error true (whatever its
	// subtype), Codex's turn.failed.
	OutcomeError Outcome = "error"
)

// Usage is what the engine reported spending, cumulative for the run.
type Usage struct {
	USD                               float64
	InputTokens, OutputTokens         int64
	CacheReadTokens, CacheWriteTokens int64
}

// Facts are what the stream has told so far.
type Facts struct {
	Usage Usage
	// Priced is set when Usage.USD is the engine's own figure (Claude's
	// total_cost_usd) rather than tokens priced by the operator's table.
	Priced  bool
	Session string
	Model   string
	Turns   int
	// LastEvent is when the last line arrived.
	LastEvent time.Time
	// Outcome is the final event's verdict; ResultAt when it arrived.
	Outcome  Outcome
	ResultAt time.Time
	// Detail is the final event's text (Claude's result or errors, Codex's
	// error message), for the failure reason.
	Detail string
	// APIErrorStatus is the HTTP status of the failed API call a Claude
	// result names (api_error_status), 0 when none.
	APIErrorStatus int
	// RateLimited says the provider's rate limit stopped the run (or, while
	// it runs, is stopping it); LimitResetsAt is when the provider said the
	// limit lifts, zero when it did not say.
	RateLimited   bool
	LimitResetsAt time.Time
	// Transient says the final error is a transport or server failure the
	// engine could not get past (Codex: the stream disconnected, the
	// connection failed, the retry limit spent on a 5xx; Claude: its
	// assistant message's error "server_error", also given when the API
	// could not be reached), which a later run may well not meet: the
	// failure is retryable.
	Transient bool
	// LimitRetries counts the engine's own retries after a 429/529 (Claude
	// system api_retry) since the API last answered: alive, but limited.
	LimitRetries int
	// Events counts the lines parsed, Overlong the lines skipped for
	// passing MaxLine, Malformed the lines that were not JSON objects.
	Events, Overlong, Malformed int
}

// Parser turns one engine's event lines into Facts. Line is called with
// each complete line (without its newline), in order, from one goroutine.
type Parser interface {
	Line(line []byte, now time.Time, f *Facts)
}

// Reader is an io.Writer fed with the engine's stdout as it arrives: it
// splits it into lines and feeds the parser, and keeps the running Facts.
// Safe to read (Facts) while written.
type Reader struct {
	p     Parser
	clock clock.Clock

	mu    sync.Mutex
	facts Facts
	lines lines
}

// NewReader returns a Reader feeding p, timing events on c.
func NewReader(p Parser, c clock.Clock) *Reader {
	return &Reader{p: p, clock: c}
}

// Write consumes b; it never fails, so a copy into it never stops the
// engine's output from reaching the log.
func (r *Reader) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines.feed(b, r.line)
	return len(b), nil
}

// line parses one complete line.
func (r *Reader) line(line []byte, overlong bool) {
	if overlong {
		r.facts.Overlong++
		return
	}
	now := r.clock.Now()
	r.facts.Events++
	r.facts.LastEvent = now
	r.p.Line(line, now, &r.facts)
}

// Close parses a last line the engine did not end with a newline.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines.end(r.line)
	return nil
}

// lines splits a byte stream into lines, bounded by MaxLine: a longer
// line is dropped whole, never buffered, and reported once it ends. The
// Reader and the Transcript both read the engine's output through it.
type lines struct {
	buf  []byte
	skip bool // in an over-long line: drop until its newline
}

// feed consumes b, calling line with each complete line (trimmed; blank
// ones left out), or with overlong for one that passed MaxLine.
func (s *lines) feed(b []byte, line func(l []byte, overlong bool)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b)
			return
		}
		s.add(b[:i])
		s.end(line)
		b = b[i+1:]
	}
}

// add appends to the current line, or drops it once it passed MaxLine.
func (s *lines) add(b []byte) {
	if s.skip {
		return
	}
	if len(s.buf)+len(b) > MaxLine {
		s.skip, s.buf = true, s.buf[:0]
		return
	}
	s.buf = append(s.buf, b...)
}

// end finishes the current line.
func (s *lines) end(line func(l []byte, overlong bool)) {
	l := bytes.TrimSpace(s.buf)
	skipped := s.skip
	s.buf, s.skip = s.buf[:0], false
	switch {
	case skipped:
		line(nil, true)
	case len(l) > 0:
		line(l, false)
	}
}

// Facts returns the facts so far.
func (r *Reader) Facts() Facts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.facts
}

var _ io.WriteCloser = (*Reader)(nil)

// rateLimitText matches what providers and CLIs write when a rate or usage
// limit stopped a request: HTTP 429 (Too Many Requests) and Anthropic's
// 529 (overloaded), and the words around them.
var rateLimitText = regexp.MustCompile(`(?i)\b(429|529)\b|rate[ _-]?limit|too many requests|overloaded|usage limit|quota exceeded`)

// RateLimitText reports whether an error text names a rate limit.
func RateLimitText(s string) bool { return rateLimitText.MatchString(s) }

// rateLimitStatus reports an HTTP status that is a rate limit: 429, or
// Anthropic's 529 overloaded.
func rateLimitStatus(code int) bool { return code == 429 || code == 529 }
