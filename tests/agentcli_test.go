package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/tests/internal/messagesapi"
	"github.com/gigafactory/fleet/tests/internal/responsesapi"
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

// runCodex runs the real Codex CLI in dir: `codex exec --json` with the
// sandbox the codex preset uses, against the scripted Responses API, with
// args after (a prompt, or `resume <id> <prompt>` first).
func runCodex(t *testing.T, bin, dir string, api *responsesapi.Server, args ...string) ([]byte, int) {
	t.Helper()
	home := filepath.Join(dir, ".codex-home")
	require.NoError(t, os.MkdirAll(home, 0o700))
	var full []string
	full = append(full, "exec")
	if len(args) > 0 && args[0] == "resume" {
		full = append(full, "resume")
		args = args[1:]
	}
	full = append(full, "--json", "--skip-git-repo-check")
	full = append(full, api.ProviderArgs()...)
	full = append(full, "-c", "model_providers.fleettest.request_max_retries=0", "-c", "model_providers.fleettest.stream_max_retries=0")
	if full[1] != "resume" {
		full = append(full, "--sandbox", "workspace-write")
	}
	full = append(full, args...)
	cmd := exec.Command(bin, full...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "OPENAI_API_KEY=sk-test-0000")
	return runCLI(t, cmd)
}

// TestRealCodexCLI runs the real Codex CLI (make agent-clis) against the
// scripted Responses API and checks the facts the codex preset's parser
// relies on, as this version really prints them: thread.started's
// thread_id, a command that really ran in the workspace, turn.completed's
// usage; a rate limit; and a resumed thread that carries the earlier
// conversation and the new prompt.
func TestRealCodexCLI(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "codex")

	t.Run("a run with a command", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		api := startResponsesAPI(t, responsesapi.Script{Steps: []responsesapi.Step{
			{Cmd: "printf 'hello from codex\\n' > hello.txt", InputTokens: 1000, CachedTokens: 200, OutputTokens: 50, ReasoningTokens: 10},
			{Text: "Created hello.txt.", InputTokens: 1100, OutputTokens: 20},
		}})
		out, code := runCodex(t, bin, dir, api, "Create hello.txt")
		require.Equal(t, 0, code, "%s", out)
		b, err := os.ReadFile(filepath.Join(dir, "hello.txt"))
		require.NoError(t, err, "the command ran in the workspace: %s", out)
		require.Equal(t, "hello from codex\n", string(b))

		lines := streamLines(t, out)
		started := lineOf(lines, "thread.started", "")
		require.NotNil(t, started, "%s", out)
		require.NotEmpty(t, started["thread_id"])
		var ran map[string]any
		for _, l := range lines {
			if it, ok := l["item"].(map[string]any); ok && l["type"] == "item.completed" && it["type"] == "command_execution" {
				ran = it
			}
		}
		require.NotNil(t, ran, "a command_execution item: %s", out)
		require.EqualValues(t, 0, ran["exit_code"])
		done := lineOf(lines, "turn.completed", "")
		require.NotNil(t, done, "%s", out)
		usage := done["usage"].(map[string]any)
		require.EqualValues(t, 2100, usage["input_tokens"], "summed over the turn's two calls: %v", usage)
		require.EqualValues(t, 70, usage["output_tokens"], "%v", usage)
		require.EqualValues(t, 200, usage["cached_input_tokens"], "%v", usage)
	})

	t.Run("a rate limit fails the turn", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		api := startResponsesAPI(t, responsesapi.Script{Steps: []responsesapi.Step{{Status: 429, RetryAfter: 1}}})
		out, code := runCodex(t, bin, dir, api, "Create hello.txt")
		require.NotEqual(t, 0, code, "%s", out)
		lines := streamLines(t, out)
		failed := lineOf(lines, "turn.failed", "")
		require.NotNil(t, failed, "%s", out)
		// 0.171.0 words it "exceeded retry limit, last status: 429 too many
		// requests": the status, not the words "rate limit", is what to match.
		require.Contains(t, strings.ToLower(fmt.Sprint(failed["error"])), "429", "%s", out)
	})

	t.Run("a thread resumes with the new prompt", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		api := startResponsesAPI(t, responsesapi.Script{Steps: []responsesapi.Step{
			{Text: "First pass done.", InputTokens: 500, OutputTokens: 10},
			{Text: "Fixed as the reviewer asked.", InputTokens: 700, OutputTokens: 12},
		}})
		out, code := runCodex(t, bin, dir, api, "Do the task")
		require.Equal(t, 0, code, "%s", out)
		thread := lineOf(streamLines(t, out), "thread.started", "")["thread_id"].(string)

		// What the factory takes off a resumed run's usage: the rollout's
		// last token_count total (stream.CodexThreadUsage reads it).
		rollouts, err := filepath.Glob(filepath.Join(dir, ".codex-home", "sessions", "*", "*", "*", "rollout-*-"+thread+".jsonl"))
		require.NoError(t, err)
		require.Len(t, rollouts, 1, "the thread's rollout where codex keeps it")
		b, err := os.ReadFile(rollouts[0])
		require.NoError(t, err)
		require.Contains(t, string(b), `"type":"token_count","info":{"total_token_usage":{"input_tokens":500,`)

		out, code = runCodex(t, bin, dir, api, "resume", thread, "The reviewer says: add a test")
		require.Equal(t, 0, code, "%s", out)
		// The resumed run's turn.completed is the thread's total, its own
		// 700 input tokens and the first run's 500 (codex.go, Codex.Before).
		usage := lineOf(streamLines(t, out), "turn.completed", "")["usage"].(map[string]any)
		require.EqualValues(t, 1200, usage["input_tokens"], "%v", usage)
		require.EqualValues(t, 22, usage["output_tokens"], "%v", usage)
		reqs := api.Requests()
		last := reqs[len(reqs)-1]
		require.Equal(t, 1, last.Step, "the earlier answer is in the resumed history")
		require.Contains(t, strings.Join(last.Texts, "\n"), "The reviewer says: add a test")
	})
}
