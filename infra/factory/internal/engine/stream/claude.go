package stream

import (
	"encoding/json"
	"strings"
	"time"
)

// Claude parses `claude -p --output-format stream-json --verbose`.
//
// Shapes follow the Claude Agent SDK for Python, which parses this very
// stream (anthropics/claude-agent-sdk-python, src/claude_agent_sdk/
// _internal/message_parser.py and types.py, commit e8bde601, 2026-08):
//   - "system" with subtype "init": session_id, model (SystemMessage data).
//   - "system" with subtype "api_retry": attempt, max_retries,
//     retry_delay_ms, error_status: not modelled by the SDK; seen from the
//     real CLI 2.1.197 with the API unreachable (shared/AGENTS.md).
//   - "assistant": message.{id, model, usage}, error (AssistantMessageError,
//     one of "rate_limit", "server_error", …): "server_error" also when
//     the API could not be reached (real CLI 2.1.197), which is Transient.
//   - "result" (ResultMessage): subtype, is_error, num_turns, session_id,
//     total_cost_usd, usage {input_tokens, output_tokens,
//     cache_creation_input_tokens, cache_read_input_tokens}, result,
//     errors, api_error_status (CLI >= 2.1.110: the HTTP status, e.g. 429,
//     529, when is_error is true with subtype "success").
//   - "rate_limit_event" (RateLimitEvent): rate_limit_info.{status
//     ("allowed" | "allowed_warning" | "rejected"), resetsAt (Unix
//     seconds)}. The wire keys inside rate_limit_info are camelCase
//     (message_parser.py reads info.get("resetsAt")), not resets_at.
//
// Any other type ("user", "stream_event", …) only counts as activity.
type Claude struct {
	// Price turns the running tokens into dollars until the result gives
	// the CLI's own cost; the zero Price leaves USD at 0 until then.
	Price Price
	// msgUsage is the last usage of each assistant message id: a message
	// split over several lines repeats its usage, so the running totals
	// take each id once.
	msgUsage map[string]claudeUsage
	running  Usage
}

type claudeUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

type claudeLine struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	Message   *struct {
		ID    string       `json:"id"`
		Model string       `json:"model"`
		Usage *claudeUsage `json:"usage"`
	} `json:"message"`
	// Error is an assistant message's AssistantMessageError; an api_retry's
	// error may be an object, so it stays raw.
	Error          json.RawMessage `json:"error"`
	IsError        bool            `json:"is_error"`
	NumTurns       int             `json:"num_turns"`
	TotalCostUSD   *float64        `json:"total_cost_usd"`
	Usage          *claudeUsage    `json:"usage"`
	Result         string          `json:"result"`
	Errors         []string        `json:"errors"`
	APIErrorStatus int             `json:"api_error_status"`
	ErrorStatus    int             `json:"error_status"`
	RateLimitInfo  *struct {
		Status   string `json:"status"`
		ResetsAt int64  `json:"resetsAt"`
	} `json:"rate_limit_info"`
}

// Line implements Parser.
func (c *Claude) Line(line []byte, now time.Time, f *Facts) {
	var l claudeLine
	if err := json.Unmarshal(line, &l); err != nil || l.Type == "" {
		f.Malformed++
		return
	}
	if l.SessionID != "" {
		f.Session = l.SessionID
	}
	switch l.Type {
	case "system":
		switch l.Subtype {
		case "init":
			if l.Model != "" {
				f.Model = l.Model
			}
		case "api_retry":
			if rateLimitStatus(l.ErrorStatus) {
				f.LimitRetries++
			}
		}
	case "assistant":
		c.assistant(l, f)
	case "rate_limit_event":
		if i := l.RateLimitInfo; i != nil && i.Status == "rejected" {
			f.RateLimited = true
			if i.ResetsAt > 0 {
				f.LimitResetsAt = time.Unix(i.ResetsAt, 0).UTC()
			}
		}
	case "result":
		c.result(l, now, f)
	}
}

func (c *Claude) assistant(l claudeLine, f *Facts) {
	errKind := jsonString(l.Error)
	if errKind == "rate_limit" {
		f.RateLimited = true
	}
	if len(l.Error) > 0 {
		// The last failed API call decides: "server_error" is how the CLI
		// classes a 5xx or an API it could not reach at all (the real CLI
		// 2.1.197, API unreachable: a result with is_error and no
		// api_error_status).
		f.Transient = errKind == "server_error"
	}
	m := l.Message
	if m == nil {
		return
	}
	if len(l.Error) == 0 && m.Model != claudeSynthetic {
		// The API answered: the retries and failures before were got
		// through, and say nothing of how the run ends.
		f.LimitRetries, f.Transient = 0, false
	}
	if m.Model != "" && m.Model != claudeSynthetic {
		// A message the CLI made up names no model that ran.
		f.Model = m.Model
	}
	if c.msgUsage == nil {
		c.msgUsage = map[string]claudeUsage{}
	}
	id := m.ID
	if _, seen := c.msgUsage[id]; !seen {
		f.Turns++
	}
	if m.Usage == nil {
		if _, seen := c.msgUsage[id]; !seen {
			c.msgUsage[id] = claudeUsage{}
		}
		return
	}
	old := c.msgUsage[id]
	c.msgUsage[id] = *m.Usage
	c.running.InputTokens += m.Usage.InputTokens - old.InputTokens
	c.running.OutputTokens += m.Usage.OutputTokens - old.OutputTokens
	c.running.CacheReadTokens += m.Usage.CacheReadInputTokens - old.CacheReadInputTokens
	c.running.CacheWriteTokens += m.Usage.CacheCreationInputTokens - old.CacheCreationInputTokens
	if !f.Priced {
		// Tokens only until the result gives the cost; a price table may
		// turn them into dollars (Price).
		f.Usage = Usage{USD: c.Price.Cost(c.running), InputTokens: c.running.InputTokens, OutputTokens: c.running.OutputTokens,
			CacheReadTokens: c.running.CacheReadTokens, CacheWriteTokens: c.running.CacheWriteTokens}
	}
}

func (c *Claude) result(l claudeLine, now time.Time, f *Facts) {
	f.ResultAt = now
	f.Outcome = OutcomeSuccess
	if l.IsError {
		// A failed API call can arrive as subtype "success" with
		// is_error true: is_error decides.
		f.Outcome = OutcomeError
	}
	if l.NumTurns > 0 {
		f.Turns = l.NumTurns
	}
	if l.TotalCostUSD != nil {
		f.Usage.USD, f.Priced = *l.TotalCostUSD, true
	}
	if u := l.Usage; u != nil {
		f.Usage.InputTokens, f.Usage.OutputTokens = u.InputTokens, u.OutputTokens
		f.Usage.CacheReadTokens, f.Usage.CacheWriteTokens = u.CacheReadInputTokens, u.CacheCreationInputTokens
	}
	f.APIErrorStatus = l.APIErrorStatus
	f.Detail = l.Result
	if len(l.Errors) > 0 {
		f.Detail = strings.TrimSpace(f.Detail + "\n" + strings.Join(l.Errors, "\n"))
	}
	if !l.IsError {
		return
	}
	if f.Detail == "" {
		// Nothing else said (a resume the CLI could not find ends so):
		// the subtype, error_during_execution or error_max_turns, is what
		// the failure's reason can name.
		f.Detail = l.Subtype
	}
	if rateLimitStatus(l.APIErrorStatus) || RateLimitText(f.Detail) {
		f.RateLimited = true
	}
}

// claudeSynthetic is the model of a message the CLI makes up itself (an
// API error it reports as a message), not an answer of the API.
const claudeSynthetic = "<synthetic>"

// jsonString is raw as a JSON string, "" when it is none.
func jsonString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
