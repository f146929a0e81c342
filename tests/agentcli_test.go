package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/tests/internal/messagesapi"
)

// TestRealClaudeCLI runs the real Claude Code CLI (make agent-clis) against
// the scripted Messages API and checks the facts the claude preset's
// parser relies on, as this version of the CLI really prints them: the
// init line's session, a tool that really ran, the result's cost, usage
// and turns; a 429 that arrives as subtype "success" with is_error true
// and api_error_status 429; a resume that works from the same directory
// (the server gets the earlier conversation) and fails from another.
func TestRealClaudeCLI(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "claude")

	t.Run("a run with a tool call", func(t *testing.T) {
		t.Parallel()
		dir, home := t.TempDir(), t.TempDir()
		api := startMessagesAPI(t, messagesapi.Script{Steps: []messagesapi.Step{
			{Tool: "Write", Input: map[string]any{"file_path": filepath.Join(dir, "hello.txt"), "content": "hello from claude\n"}, InputTokens: 1200, OutputTokens: 80},
			{Text: "I wrote hello.txt.", InputTokens: 1400, OutputTokens: 20},
		}})
		out, code := runClaude(t, bin, dir, claudeEnv(api, home), "Write hello.txt")
		require.Equal(t, 0, code, "%s", out)
		b, err := os.ReadFile(filepath.Join(dir, "hello.txt"))
		require.NoError(t, err, "the Write tool ran in the working directory")
		require.Equal(t, "hello from claude\n", string(b))

		lines := streamLines(t, out)
		initLine, result := lineOf(lines, "system", "init"), lineOf(lines, "result", "")
		require.NotNil(t, initLine)
		require.NotNil(t, result, "%s", out)
		require.NotEmpty(t, initLine["session_id"])
		require.Equal(t, initLine["session_id"], result["session_id"])
		require.Equal(t, "success", result["subtype"])
		require.Equal(t, false, result["is_error"])
		require.EqualValues(t, 2, result["num_turns"])
		require.Greater(t, result["total_cost_usd"].(float64), 0.0, "the CLI prices the tokens the server reported")
		usage := result["usage"].(map[string]any)
		require.EqualValues(t, 2600, usage["input_tokens"], "summed over the two calls")
		require.EqualValues(t, 100, usage["output_tokens"])
		require.NotNil(t, lineOf(lines, "assistant", ""))
		require.NotNil(t, lineOf(lines, "user", ""), "the tool result comes back as a user message")
	})

	t.Run("a rate limit is a success subtype with is_error", func(t *testing.T) {
		t.Parallel()
		dir, home := t.TempDir(), t.TempDir()
		api := startMessagesAPI(t, messagesapi.Script{Steps: []messagesapi.Step{{Status: 429, RetryAfter: 1}}})
		out, code := runClaude(t, bin, dir, claudeEnv(api, home), "Write hello.txt")
		require.Equal(t, 1, code, "%s", out)
		lines := streamLines(t, out)
		retry := lineOf(lines, "system", "api_retry")
		require.NotNil(t, retry, "the CLI says it retries, alive but limited: %s", out)
		require.EqualValues(t, 429, retry["error_status"])
		result := lineOf(lines, "result", "")
		require.NotNil(t, result)
		require.Equal(t, "success", result["subtype"], "the trap: success …")
		require.Equal(t, true, result["is_error"], "… with is_error")
		require.EqualValues(t, 429, result["api_error_status"])
	})

	t.Run("a session resumes from the same directory only", func(t *testing.T) {
		t.Parallel()
		dir, other, home := t.TempDir(), t.TempDir(), t.TempDir()
		api := startMessagesAPI(t, messagesapi.Script{Steps: []messagesapi.Step{
			{Text: "First pass done.", InputTokens: 500, OutputTokens: 10},
			{Text: "Fixed as the reviewer asked.", InputTokens: 700, OutputTokens: 12},
		}})
		env := claudeEnv(api, home)
		out, code := runClaude(t, bin, dir, env, "Do the task")
		require.Equal(t, 0, code, "%s", out)
		session := lineOf(streamLines(t, out), "result", "")["session_id"].(string)

		out, code = runClaude(t, bin, dir, env, "--resume", session, "The reviewer says: add a test")
		require.Equal(t, 0, code, "%s", out)
		result := lineOf(streamLines(t, out), "result", "")
		require.Equal(t, "Fixed as the reviewer asked.", result["result"], "the script's second step: the history held the first answer")
		reqs := api.Requests()
		last := reqs[len(reqs)-1]
		require.Equal(t, 1, last.Step, "one assistant message in the resumed history")
		require.True(t, strings.Contains(last.Prompt, "The reviewer says: add a test"), "the feedback is the new prompt: %q", last.Prompt)

		out, code = runClaude(t, bin, other, env, "--resume", session, "again")
		require.NotEqual(t, 0, code)
		result = lineOf(streamLines(t, out), "result", "")
		require.NotNil(t, result, "%s", out)
		require.Equal(t, true, result["is_error"], "a session is found only from the directory it ran in")
	})
}
