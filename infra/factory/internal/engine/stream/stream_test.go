package stream_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
)

var t0 = time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)

// feed writes the fixture into a Reader in small chunks, as a pipe would
// deliver it, and returns the facts.
func feed(t *testing.T, p stream.Parser, file string) stream.Facts {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(t, err)
	r := stream.NewReader(p, clocktest.New(t0))
	for len(b) > 0 {
		n := min(len(b), 97)
		_, err := r.Write(b[:n])
		require.NoError(t, err)
		b = b[n:]
	}
	require.NoError(t, r.Close())
	return r.Facts()
}

func TestParsers(t *testing.T) {
	t.Parallel()
	const claudeSession = "8f0e6c1a-5b2d-4e7a-9c3f-2d1b0a9e8c7d"
	const codexThread = "019a7c2e-4b1d-7f30-9a55-6c0e2b8d4f11"
	codexPrice := stream.Price{Input: 1.25, Output: 10, CachedInput: 0.125}
	tests := []struct {
		file    string
		parser  stream.Parser
		want    stream.Facts
		limited bool
	}{
		{
			file: "claude/normal.jsonl", parser: &stream.Claude{},
			want: stream.Facts{
				Usage:  stream.Usage{USD: 0.0421, InputTokens: 2700, OutputTokens: 190, CacheReadTokens: 300, CacheWriteTokens: 300},
				Priced: true, Session: claudeSession, Model: "claude-sonnet-4-5-20250929", Turns: 3,
				Outcome: stream.OutcomeSuccess, Detail: "Done: hello.txt holds the greeting.", Events: 7,
			},
		},
		{
			file: "claude/is_error.jsonl", parser: &stream.Claude{},
			want: stream.Facts{
				Priced: true, Session: claudeSession, Model: "claude-sonnet-4-5-20250929", Turns: 1,
				Outcome: stream.OutcomeError, APIErrorStatus: 500, Transient: true, Events: 3,
				Detail: `API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
			},
		},
		{
			file: "claude/429.jsonl", parser: &stream.Claude{}, limited: true,
			want: stream.Facts{
				Priced: true, Session: claudeSession, Model: "claude-sonnet-4-5-20250929", Turns: 1,
				Outcome: stream.OutcomeError, APIErrorStatus: 429, RateLimited: true, LimitRetries: 2, Events: 5,
				Detail: `API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit."}}`,
			},
		},
		{
			file: "claude/rate_limit_event.jsonl", parser: &stream.Claude{}, limited: true,
			want: stream.Facts{
				Priced: true, Session: claudeSession, Model: "claude-sonnet-4-5-20250929", Turns: 1,
				Outcome: stream.OutcomeError, RateLimited: true, LimitResetsAt: time.Unix(1795003600, 0).UTC(), Events: 5,
				Detail: "Claude usage limit reached. Your limit will reset at 6pm.",
			},
		},
		{
			// The real CLI with the API unreachable: no HTTP status, the
			// synthetic message's error "server_error" says what it was.
			file: "claude/real-2.1.197-unreachable.jsonl", parser: &stream.Claude{},
			want: stream.Facts{
				Priced: true, Session: "aa65d37f-7dc4-4fa8-a659-7be457f57b3b", Model: "claude-opus-4-8[1m]", Turns: 1,
				Outcome: stream.OutcomeError, Transient: true, Events: 4,
				Detail: "API Error: Unable to connect to API (ConnectionRefused)",
			},
		},
		{
			// A resume from another directory: an error result with no
			// text at all; its subtype is what the reason can say.
			file: "claude/resume_missing.jsonl", parser: &stream.Claude{},
			want: stream.Facts{
				Priced: true, Session: claudeSession, Outcome: stream.OutcomeError, Events: 1,
				Detail: "error_during_execution",
			},
		},
		{
			file: "codex/normal.jsonl", parser: &stream.Codex{Price: codexPrice},
			want: stream.Facts{
				// (24000-8000)×1.25 + 8000×0.125 + 1200×10 per million.
				Usage:   stream.Usage{USD: (16000*1.25 + 8000*0.125 + 1200*10) / 1e6, InputTokens: 24000, OutputTokens: 1200, CacheReadTokens: 8000},
				Session: codexThread, Turns: 1, Outcome: stream.OutcomeSuccess, Events: 8,
			},
		},
		{
			file: "codex/rate_limited.jsonl", parser: &stream.Codex{Price: codexPrice}, limited: true,
			want: stream.Facts{
				Session: codexThread, Turns: 1, Outcome: stream.OutcomeError, RateLimited: true, Events: 4,
				Detail: "exceeded retry limit, last status: 429 Too Many Requests",
			},
		},
		{
			file: "codex/failed.jsonl", parser: &stream.Codex{Price: codexPrice},
			want: stream.Facts{
				Session: codexThread, Turns: 1, Outcome: stream.OutcomeError, Transient: true, Events: 3,
				Detail: "stream disconnected before completion: error sending request for url (https://api.openai.com/v1/responses)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			got := feed(t, tc.parser, tc.file)
			want := tc.want
			want.LastEvent = t0
			if want.Outcome != stream.OutcomeNone {
				want.ResultAt = t0
			}
			require.InDelta(t, want.Usage.USD, got.Usage.USD, 1e-12)
			got.Usage.USD = want.Usage.USD
			require.Equal(t, want, got)
			require.Equal(t, tc.limited, got.Limited())
		})
	}
}

// TestClaudeRunningUsage: before the result the running totals are the
// assistant messages' usage, each message once however many lines carry
// it, priced by the table when one is set; the result's own cost then wins.
func TestClaudeRunningUsage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/claude/normal.jsonl")
	require.NoError(t, err)
	lines := strings.SplitAfter(string(b), "\n")
	r := stream.NewReader(&stream.Claude{Price: stream.Price{Input: 3, Output: 15}}, clocktest.New(t0))
	// The first assistant line twice: a message split over two lines.
	for _, l := range append([]string{lines[0], lines[1]}, lines[1:4]...) {
		_, _ = io.WriteString(r, l)
	}
	f := r.Facts()
	require.Equal(t, stream.Usage{USD: (1900*3 + 175*15) / 1e6, InputTokens: 1900, OutputTokens: 175, CacheReadTokens: 150, CacheWriteTokens: 300}, f.Usage)
	require.Equal(t, 2, f.Turns)
	require.Equal(t, stream.OutcomeNone, f.Outcome)
	for _, l := range lines[4:] {
		_, _ = io.WriteString(r, l)
	}
	require.InDelta(t, 0.0421, r.Facts().Usage.USD, 1e-12)
}

// TestReaderBounds: an over-long line is skipped and counted, the lines
// around it still parsed; garbage and unknown types never stop the stream.
func TestReaderBounds(t *testing.T) {
	t.Parallel()
	r := stream.NewReader(&stream.Codex{}, clocktest.New(t0))
	_, _ = io.WriteString(r, `{"type":"thread.started","thread_id":"a"}`+"\n")
	long := `{"type":"item.completed","item":{"text":"` + strings.Repeat("x", stream.MaxLine) + `"}}` + "\n"
	for chunk := range slicesChunk([]byte(long), 4096) {
		_, _ = r.Write(chunk)
	}
	_, _ = io.WriteString(r, "not json\n{\"type\":\"some.future.event\"}\n\n")
	_, _ = io.WriteString(r, `{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":0,"output_tokens":7}}`)
	require.NoError(t, r.Close())
	f := r.Facts()
	require.Equal(t, 1, f.Overlong)
	require.Equal(t, 1, f.Malformed)
	require.Equal(t, 4, f.Events) // thread.started, garbage, future event, turn.completed
	require.Equal(t, "a", f.Session)
	require.Equal(t, stream.OutcomeSuccess, f.Outcome)
	require.Equal(t, int64(7), f.Usage.OutputTokens)
}

func slicesChunk(b []byte, n int) func(func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(b) > 0 {
			k := min(n, len(b))
			if !yield(b[:k]) {
				return
			}
			b = b[k:]
		}
	}
}

func TestParsePrice(t *testing.T) {
	t.Parallel()
	p, err := stream.ParsePrice("1.25/10")
	require.NoError(t, err)
	require.Equal(t, stream.Price{Input: 1.25, Output: 10}, p)
	p, err = stream.ParsePrice(" 3 / 15 / 0.3 ")
	require.NoError(t, err)
	require.Equal(t, stream.Price{Input: 3, Output: 15, CachedInput: 0.3}, p)
	for _, bad := range []string{"", "1.25", "1/2/3/4", "a/10", "-1/10", "NaN/1", "1/Inf"} {
		_, err := stream.ParsePrice(bad)
		require.Error(t, err, bad)
	}
}

func TestRateLimitText(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"exceeded retry limit, last status: 429 Too Many Requests": true,
		"API Error: 529 Overloaded":                                true,
		"rate_limit_error":                                         true,
		"You've hit your usage limit. Try again in 2 hours":        true,
		"stream disconnected before completion":                    false,
		"wrote 4290 bytes":                                         false,
	} {
		require.Equal(t, want, stream.RateLimitText(s), s)
	}
}

// TestClaudeRetriesThatGotThroughAreNoRateLimit: a 529 the CLI retried and
// then got an answer for says nothing of how the run ended; a later
// failure of another kind is that failure, not a rate limit (which would
// spend no attempt and cool the factory down).
func TestClaudeRetriesThatGotThroughAreNoRateLimit(t *testing.T) {
	t.Parallel()
	const session = `"session_id":"8f0e6c1a-5b2d-4e7a-9c3f-2d1b0a9e8c7d"`
	retry := `{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":500,"error_status":529,` + session + "}\n"
	answer := `{"type":"assistant","message":{"id":"msg_1","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"On it."}],` +
		`"usage":{"input_tokens":10,"output_tokens":5}},` + session + "}\n"
	failed := `{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":1,"result":"",` + session + "}\n"

	r := stream.NewReader(&stream.Claude{}, clocktest.New(t0))
	_, _ = io.WriteString(r, retry+answer+failed)
	require.NoError(t, r.Close())
	f := r.Facts()
	require.Equal(t, stream.OutcomeError, f.Outcome)
	require.False(t, f.Limited(), "the retried call was answered: the run failed for another reason")

	// Retries with no answer after them are still the rate limit.
	r = stream.NewReader(&stream.Claude{}, clocktest.New(t0))
	_, _ = io.WriteString(r, answer+retry+failed)
	require.NoError(t, r.Close())
	require.True(t, r.Facts().Limited(), "the last call was retried for 529 and never answered")
}

// TestCodexThreadUsage: a thread's usage so far is its rollout's last
// token_count total (the real codex-cli 0.171.0's rollout); other records,
// token_count events without info, and lines too long to be one are passed
// over; a rollout without any is zero.
func TestCodexThreadUsage(t *testing.T) {
	t.Parallel()
	real, err := os.ReadFile(filepath.Join("testdata", "codex", "real-0.171.0-rollout.jsonl"))
	require.NoError(t, err)
	u, err := stream.CodexThreadUsage(bytes.NewReader(real))
	require.NoError(t, err)
	require.Equal(t, stream.Usage{InputTokens: 500, CacheReadTokens: 100, OutputTokens: 10}, u)

	later := `{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":1200,"cached_input_tokens":100,"output_tokens":22}}}}` + "\n"
	noInfo := `{"type":"event_msg","payload":{"type":"token_count","info":null}}` + "\n"
	long := `{"type":"response_item","payload":{"output":"` + strings.Repeat("token_count ", 20000) + `"}}` + "\n"
	u, err = stream.CodexThreadUsage(strings.NewReader(string(real) + long + later + noInfo))
	require.NoError(t, err)
	require.Equal(t, stream.Usage{InputTokens: 1200, CacheReadTokens: 100, OutputTokens: 22}, u, "the last total")

	u, err = stream.CodexThreadUsage(strings.NewReader(`{"type":"session_meta","payload":{}}` + "\n" + `{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":9}}}}`))
	require.NoError(t, err)
	require.Equal(t, int64(9), u.InputTokens, "a last line without a newline")
	u, err = stream.CodexThreadUsage(strings.NewReader(""))
	require.NoError(t, err)
	require.Zero(t, u)
}

// TestCodexResumedThreadUsage: a resumed thread's turn.completed reports
// the thread's total (real codex-cli 0.171.0: 1,200 input tokens for a run
// that used 700 after one of 500), so the run's usage is that less what
// the thread had used before it, priced as such.
func TestCodexResumedThreadUsage(t *testing.T) {
	t.Parallel()
	c := &stream.Codex{Price: stream.Price{Input: 1.25, Output: 10}, Before: stream.Usage{InputTokens: 500, CacheReadTokens: 100, OutputTokens: 10}}
	var f stream.Facts
	now := time.Date(2026, 11, 27, 5, 36, 0, 0, time.UTC)
	c.Line([]byte(`{"type":"thread.started","thread_id":"01a21b81-5fca-7911-8737-d4679334c52d"}`), now, &f)
	c.Line([]byte(`{"type":"turn.completed","usage":{"input_tokens":1200,"cached_input_tokens":100,"cache_write_input_tokens":0,"output_tokens":22,"reasoning_output_tokens":3}}`), now, &f)
	require.Equal(t, stream.Usage{InputTokens: 700, OutputTokens: 12, USD: (700*1.25 + 12*10) / 1e6}, f.Usage)
	c.Line([]byte(`{"type":"turn.completed","usage":{"input_tokens":1500,"cached_input_tokens":100,"output_tokens":30}}`), now, &f)
	require.Equal(t, int64(1000), f.Usage.InputTokens, "a later turn's total replaces the earlier one's, never adds to it")
}

// TestCodexLastFailureDecides: a reconnect codex reports as an error and
// gets past does not make the run's later, different failure a rate limit;
// a run whose last failure is a 429 still is one.
func TestCodexLastFailureDecides(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 5, 36, 0, 0, time.UTC)
	run := func(lines ...string) stream.Facts {
		var f stream.Facts
		c := &stream.Codex{}
		for _, l := range lines {
			c.Line([]byte(l), now, &f)
		}
		return f
	}
	reconnect := `{"type":"error","message":"Reconnecting... 1/5 (unexpected status 429 Too Many Requests)"}`
	f := run(`{"type":"turn.started"}`, reconnect, `{"type":"turn.failed","error":{"message":"stream disconnected before completion: connection reset"}}`)
	require.False(t, f.Limited(), "the run failed for another reason: %+v", f)
	f = run(`{"type":"turn.started"}`, reconnect, `{"type":"error","message":"exceeded retry limit, last status: 429 Too Many Requests"}`,
		`{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}`)
	require.True(t, f.Limited())
	f = run(`{"type":"turn.started"}`, reconnect, `{"type":"turn.failed"}`)
	require.True(t, f.Limited(), "a failure without a message is the error before it")
}

// TestCodexTransientFailure: a turn.failed whose error is a transport or
// server failure (texts of openai/codex codex-rs/core/src/error.rs:
// CodexErr::Stream, ConnectionFailed, ResponseStreamFailed,
// InternalServerError, RetryLimit and UnexpectedStatus with a 5xx) is
// Transient; one the next run would meet again (the context window, a 4xx)
// is not, nor is a rate limit (Limited decides those).
func TestCodexTransientFailure(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]bool{
		"stream disconnected before completion: error sending request for url (https://api.openai.com/v1/responses)":              true,
		"Connection failed: error sending request for url (https://api.openai.com/v1/responses)":                                  true,
		"Error while reading the server response: error decoding response body, request id: req_1":                                true,
		"We're currently experiencing high demand, which may cause temporary errors.":                                             true,
		"exceeded retry limit, last status: 500 Internal Server Error":                                                            true,
		"exceeded retry limit, last status: 503 Service Unavailable, request id: req_1":                                           true,
		"unexpected status 502 Bad Gateway: <html>bad gateway</html>":                                                             true,
		"exceeded retry limit, last status: 429 Too Many Requests":                                                                false,
		"unexpected status 400 Bad Request: {\"error\":\"invalid model\"}":                                                        false,
		"Codex ran out of room in the model's context window. Start a new conversation or clear earlier history before retrying.": false,
		"wrote 500 lines": false,
	} {
		var f stream.Facts
		c := &stream.Codex{}
		c.Line([]byte(`{"type":"turn.started"}`), t0, &f)
		line, err := json.Marshal(map[string]any{"type": "turn.failed", "error": map[string]string{"message": msg}})
		require.NoError(t, err)
		c.Line(line, t0, &f)
		require.Equal(t, stream.OutcomeError, f.Outcome, msg)
		require.Equal(t, want, f.Transient, msg)
	}
	// The last failure decides, as for a rate limit.
	var f stream.Facts
	c := &stream.Codex{}
	c.Line([]byte(`{"type":"error","message":"stream disconnected before completion: connection reset"}`), t0, &f)
	c.Line([]byte(`{"type":"turn.failed","error":{"message":"unexpected status 400 Bad Request: no"}}`), t0, &f)
	require.False(t, f.Transient)
}
