package stream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
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
//     cached_input_tokens, output_tokens}: the thread's total so far (exec
//     reports the last TokenCount's total_token_usage), so a resumed
//     thread counts its earlier runs again. Seen with the real codex-cli
//     0.171.0: a thread's first run reported 500 input tokens, its resumed
//     run 1,200 for the 700 it used. The run's usage is that total less
//     Before, the thread's total when the run began. There is no cost
//     field: USD is the tokens priced by the operator's table, an
//     estimate.
//   - "turn.failed" (TurnFailedEvent): error {message}.
//   - "error" (ThreadErrorEvent): message, "an unrecoverable error emitted
//     directly by the event stream".
//   - "item.started" / "item.updated" / "item.completed": activity only.
//
// The events carry no model name.
type Codex struct {
	// Price turns tokens into dollars; the zero Price leaves USD at 0.
	Price Price
	// Before is the thread's usage before this run: zero for a new
	// thread, the rollout's last total for a resumed one (CodexThreadUsage).
	Before Usage
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
			f.Usage.InputTokens = max(0, u.InputTokens-c.Before.InputTokens)
			f.Usage.CacheReadTokens = max(0, u.CachedInputTokens-c.Before.CacheReadTokens)
			f.Usage.OutputTokens = max(0, u.OutputTokens-c.Before.OutputTokens)
			f.Usage.USD = c.Price.Cost(f.Usage)
		}
		f.Outcome, f.ResultAt, f.Detail = OutcomeSuccess, now, ""
	case "turn.failed":
		f.Turns++
		f.Outcome, f.ResultAt = OutcomeError, now
		if l.Error != nil {
			f.Detail = l.Error.Message
		}
		f.RateLimited = RateLimitText(f.Detail)
		f.Transient = codexTransient(f.Detail)
	case "error":
		// The last failure decides: an error the CLI got past (codex
		// reports its reconnects as errors, "Reconnecting... 1/5 (…)")
		// does not make a later, different failure a rate limit, which
		// would spend no attempt however often the job failed.
		f.Detail = l.Message
		f.RateLimited = RateLimitText(l.Message)
		f.Transient = codexTransient(l.Message)
	}
}

// codexTransientText matches the texts codex gives a transport or server
// failure (openai/codex codex-rs/core/src/error.rs: CodexErr::Stream
// "stream disconnected before completion: …", which its own doc calls
// transient; ConnectionFailed "Connection failed: …"; ResponseStreamFailed
// "Error while reading the server response: …"; InternalServerError
// "We're currently experiencing high demand, …"; RetryLimit "exceeded retry
// limit, last status: <status>" and UnexpectedStatus "unexpected status
// <status>: …" with a 5xx status).
var codexTransientText = regexp.MustCompile(`(?i)stream disconnected before completion|\bconnection failed:|error while reading the server response|experiencing high demand|\b(last status:|unexpected status) 5[0-9][0-9]\b`)

// codexTransient reports whether a codex error text is a transport or
// server failure.
func codexTransient(msg string) bool { return codexTransientText.MatchString(msg) }

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

// CodexThreadUsage reads a Codex thread's rollout (the file `codex exec
// resume` continues, $CODEX_HOME/sessions/…/rollout-*-<thread>.jsonl) and
// returns its last token_count total: the thread's usage when its last run
// ended, which a resumed run's turn.completed counts again (Codex.Before).
// Rollout lines are {"type":"event_msg","payload":{"type":"token_count",
// "info":{"total_token_usage":{…}}}} (codex-rs protocol RolloutLine,
// EventMsg::TokenCount; as codex-cli 0.171.0 writes them). Lines too long
// to be one of those (a tool's whole output) are skipped.
func CodexThreadUsage(r io.Reader) (Usage, error) {
	var u Usage
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, long, err := br.ReadLine()
		for long && err == nil {
			line = nil
			_, long, err = br.ReadLine()
		}
		if bytes.Contains(line, []byte(`"token_count"`)) {
			var l struct {
				Type    string `json:"type"`
				Payload struct {
					Type string `json:"type"`
					Info *struct {
						Total *struct {
							InputTokens       int64 `json:"input_tokens"`
							CachedInputTokens int64 `json:"cached_input_tokens"`
							OutputTokens      int64 `json:"output_tokens"`
						} `json:"total_token_usage"`
					} `json:"info"`
				} `json:"payload"`
			}
			if json.Unmarshal(line, &l) == nil && l.Type == "event_msg" && l.Payload.Type == "token_count" &&
				l.Payload.Info != nil && l.Payload.Info.Total != nil {
				t := l.Payload.Info.Total
				u = Usage{InputTokens: t.InputTokens, CacheReadTokens: t.CachedInputTokens, OutputTokens: t.OutputTokens}
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return u, nil
		case err != nil:
			return u, fmt.Errorf("read codex rollout: %w", err)
		}
	}
}
