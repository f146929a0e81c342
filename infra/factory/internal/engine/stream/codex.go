package stream

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Codex parses `codex exec --json`.
//
// Shapes follow openai/codex codex-rs/exec/src/exec_events.rs (ThreadEvent,
// serde tag "type"; commit 08a1f30c):
//   - "thread.started" (ThreadStartedEvent): thread_id, the id
//     `codex exec resume` takes.
//   - "turn.started" (TurnStartedEvent).
//   - "turn.completed" (TurnCompletedEvent): usage {input_tokens,
//     cached_input_tokens, output_tokens} for that turn; summed here.
//     There is no cost field, and reasoning tokens are not reported
//     (openai/codex#5276): USD is the tokens priced by the operator's
//     table, an estimate.
//   - "turn.failed" (TurnFailedEvent): error {message}.
//   - "error" (ThreadErrorEvent): message, "an unrecoverable error emitted
//     directly by the event stream".
//   - "item.started" / "item.updated" / "item.completed": activity only.
//
// The events carry no model name.
type Codex struct {
	// Price turns tokens into dollars; the zero Price leaves USD at 0.
	Price Price
}

type codexLine struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Usage    *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Message string `json:"message"`
}

// Line implements Parser.
func (c *Codex) Line(line []byte, now time.Time, f *Facts) {
	var l codexLine
	if err := json.Unmarshal(line, &l); err != nil || l.Type == "" {
		f.Malformed++
		return
	}
	switch l.Type {
	case "thread.started":
		f.Session = l.ThreadID
	case "turn.started":
		// A new turn: the last one's result was not the final one.
		f.Outcome, f.ResultAt = OutcomeNone, time.Time{}
	case "turn.completed":
		f.Turns++
		if u := l.Usage; u != nil {
			f.Usage.InputTokens += u.InputTokens
			f.Usage.CacheReadTokens += u.CachedInputTokens
			f.Usage.OutputTokens += u.OutputTokens
			f.Usage.USD = c.Price.Cost(f.Usage)
		}
		f.Outcome, f.ResultAt, f.Detail = OutcomeSuccess, now, ""
	case "turn.failed":
		f.Turns++
		f.Outcome, f.ResultAt = OutcomeError, now
		if l.Error != nil {
			f.Detail = l.Error.Message
		}
		if RateLimitText(f.Detail) {
			f.RateLimited = true
		}
	case "error":
		f.Detail = l.Message
		if RateLimitText(l.Message) {
			f.RateLimited = true
		}
	}
}

// Price is what an engine's tokens cost, in USD per million tokens.
// Cached input tokens cost CachedInput when it is set, Input otherwise
// (Codex counts them inside input_tokens).
type Price struct {
	Input, Output, CachedInput float64
}

// Cost prices u's tokens.
func (p Price) Cost(u Usage) float64 {
	in, cached := float64(u.InputTokens), float64(u.CacheReadTokens)
	usd := in*p.Input + float64(u.OutputTokens)*p.Output
	if p.CachedInput > 0 {
		usd += cached * (p.CachedInput - p.Input)
	}
	return max(usd, 0) / 1e6
}

// ParsePrice reads "input/output" or "input/output/cachedInput" in USD per
// million tokens, e.g. 1.25/10 or 1.25/10/0.125.
func ParsePrice(s string) (Price, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Price{}, fmt.Errorf("%q is not input/output USD per million tokens, such as 1.25/10 (or 1.25/10/0.125 with a cached-input price)", s)
	}
	var v [3]float64
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return Price{}, fmt.Errorf("%q: %q is not a price (a non-negative number of USD per million tokens)", s, p)
		}
		v[i] = f
	}
	return Price{Input: v[0], Output: v[1], CachedInput: v[2]}, nil
}

// Limited reports whether the provider's rate limit ended a run that did
// not succeed: a rejected limit, a rate-limit error, or the engine's own
// retries after 429/529 with no success after them.
func (f Facts) Limited() bool {
	return f.Outcome != OutcomeSuccess && (f.RateLimited || f.LimitRetries > 0)
}
