package stream_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
)

// render is what the transcript writes for the lines of file.
func render(t *testing.T, r stream.Renderer, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(t, err)
	var out bytes.Buffer
	tr := stream.NewTranscript(r, &out)
	// In small pieces, as a pipe delivers them.
	for len(b) > 0 {
		n := min(len(b), 37)
		_, _ = tr.Write(b[:n])
		b = b[n:]
	}
	require.NoError(t, tr.Close())
	return out.String()
}

// TestTranscript: a structured engine's log reads as a transcript: its
// text, each tool call with what it acts on, the first lines of each
// result, and how the run or turn ended.
func TestTranscript(t *testing.T) {
	t.Parallel()
	require.Equal(t, `● claude session 8f0e6c1a-5b2d-4e7a-9c3f-2d1b0a9e8c7d, model claude-sonnet-4-5-20250929
I will add the greeting file.
→ Write hello.txt
  ← File created successfully at: hello.txt
→ Bash cat hello.txt
  ← hello
Done: hello.txt holds the greeting.
✓ success after 3 turns, $0.0421
  Done: hello.txt holds the greeting.
`, render(t, stream.ClaudeTranscript{}, "claude/normal.jsonl"))

	require.Equal(t, `● codex thread 019a7c2e-4b1d-7f30-9a55-6c0e2b8d4f11
(thinking) **Adding the greeting file**
$ bash -lc 'printf hello > hello.txt'
✎ add hello.txt
Added hello.txt with the greeting.
✓ turn done: 24000 input (8000 cached), 1200 output tokens
`, render(t, stream.CodexTranscript{}, "codex/normal.jsonl"))

	// What the real CLIs printed.
	real429 := render(t, stream.ClaudeTranscript{}, "claude/real-2.1.197-429.jsonl")
	require.Contains(t, real429, "… the API answered 429: retry 1 of 1 in 1000 ms")
	require.Contains(t, real429, "✗ success after 1 turns, $0.0000, API status 429")
	realTool := render(t, stream.ClaudeTranscript{}, "claude/real-2.1.197-tool-call.jsonl")
	require.Regexp(t, `(?m)^→ Write /.*/hello\.txt$`, realTool)
	require.Contains(t, realTool, "✓ success after 2 turns, $0.0155")
	realCodex := render(t, stream.CodexTranscript{}, "codex/real-0.171.0-command.jsonl")
	require.Contains(t, realCodex, "$ /bin/bash -lc \"printf 'hello from codex\\\\n' > hello.txt\"")
	require.Contains(t, realCodex, "✓ turn done: 2100 input (200 cached), 70 output tokens")
	require.Contains(t, render(t, stream.CodexTranscript{}, "codex/real-0.171.0-429.jsonl"),
		"✗ turn failed: exceeded retry limit, last status: 429 Too Many Requests")
}

// TestTranscriptLines: a line that is no event is kept as printed, one
// past the bound is said to be left out, and unknown events say nothing.
func TestTranscriptLines(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	tr := stream.NewTranscript(stream.ClaudeTranscript{}, &out)
	_, _ = tr.Write([]byte("plain words from the CLI\n{\"type\":\"mystery\"}\n"))
	_, _ = tr.Write([]byte("{\"type\":\"assistant\",\"message\":{\"content\":\"" + strings.Repeat("x", stream.MaxLine) + "\"}}\n"))
	_, _ = tr.Write([]byte(`{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":9}`))
	require.NoError(t, tr.Close())
	require.Equal(t, "plain words from the CLI\n[an event longer than 1 MiB was left out]\n✗ error_max_turns after 9 turns\n", out.String())
}

// TestRealRecordings: the parsers read what the real CLIs printed (the
// recordings of tests/agentcli_test.go) as the fixtures shaped from their
// sources: a run's cost, tokens, session and turns; a 429 as a rate limit.
func TestRealRecordings(t *testing.T) {
	t.Parallel()
	facts := func(p stream.Parser, file string) stream.Facts {
		b, err := os.ReadFile(filepath.Join("testdata", file))
		require.NoError(t, err)
		r := stream.NewReader(p, clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)))
		_, _ = r.Write(b)
		require.NoError(t, r.Close())
		return r.Facts()
	}
	f := facts(&stream.Claude{}, "claude/real-2.1.197-tool-call.jsonl")
	require.Equal(t, stream.OutcomeSuccess, f.Outcome)
	require.Equal(t, stream.Usage{USD: 0.0155, InputTokens: 2600, OutputTokens: 100}, f.Usage)
	require.Equal(t, 2, f.Turns)
	require.NotEmpty(t, f.Session)
	require.False(t, f.Limited())

	f = facts(&stream.Claude{}, "claude/real-2.1.197-429.jsonl")
	require.Equal(t, stream.OutcomeError, f.Outcome, "success with is_error is a failure")
	require.Equal(t, 429, f.APIErrorStatus)
	require.True(t, f.Limited())

	f = facts(&stream.Codex{Price: stream.Price{Input: 1.25, Output: 10}}, "codex/real-0.171.0-command.jsonl")
	require.Equal(t, stream.OutcomeSuccess, f.Outcome)
	require.Equal(t, int64(2100), f.Usage.InputTokens)
	require.Equal(t, int64(70), f.Usage.OutputTokens)
	require.Equal(t, int64(200), f.Usage.CacheReadTokens)
	require.NotEmpty(t, f.Session)

	f = facts(&stream.Codex{}, "codex/real-0.171.0-429.jsonl")
	require.Equal(t, stream.OutcomeError, f.Outcome)
	require.True(t, f.Limited(), "the status names the rate limit")
}
