package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/tests/internal/messagesapi"
	"github.com/gigafactory/fleet/tests/internal/responsesapi"
)

// firstEndedRun waits for the job's first run to end and returns it.
func firstEndedRun(t *testing.T, s *Stack, product, id string) runView {
	t.Helper()
	var first runView
	Eventually(t, 60*time.Second, "the first run of "+id+" ends", func() bool {
		runs := jobRuns(t, s, product, id)
		if len(runs) == 0 || runs[0].Result == "running" {
			return false
		}
		first = runs[0]
		return true
	})
	return first
}

// TestClaudePresetFactory: a real factory runs the claude preset
// (FLEET_ENGINE_CLAUDE=preset) with the fake claude CLI first on PATH,
// which prints recorded stream-json transcripts. The shipped run's usage
// is the transcript's total_cost_usd and tokens, with its session, model,
// turns and exit; a claude that prints nothing at all is stopped within
// the idle timeout plus a second, as a retryable engine_idle failure.
func TestClaudePresetFactory(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	bin := filepath.Join(repoRoot, "infra/factory/internal/engine/stream/testdata/bin")
	const idle = 2 * time.Second
	startFactory(t, s, "fa", "demo", 2, repo, "true",
		"FLEET_ENGINE_CLAUDE=preset", "FLEET_DEFAULT_ENGINE=claude",
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"CLAUDE_CONFIG_DIR="+t.TempDir(), "FLEET_ENGINE_IDLE_TIMEOUT="+idle.String())

	normal := s.Submit("demo", "---\ntitle: greet\nrepo: app\n---\nAdd hello.txt.\n")
	hang := s.Submit("demo", "---\ntitle: hang\nrepo: app\n---\nfake-scenario: hang\n")
	limited := s.Submit("demo", "---\ntitle: limited\nrepo: app\n---\nfake-scenario: rate_limit_event\n")

	facWaitStage(t, s, "demo", normal, "shipped", 60*time.Second)
	require.Equal(t, "hello", repo.Show(t, "aq/job/"+normal, "hello.txt"))
	runs := jobRuns(t, s, "demo", normal)
	require.Len(t, runs, 1)
	run := runs[0]
	require.Equal(t, "succeeded", run.Result)
	require.Equal(t, "claude", run.Engine)
	// testdata/claude/normal.jsonl's result message.
	require.InDelta(t, 0.0421, run.Usage.USD, 1e-12)
	require.Equal(t, int64(2700), run.Usage.InputTokens)
	require.Equal(t, int64(190), run.Usage.OutputTokens)
	require.Equal(t, int64(300), run.Usage.CacheReadTokens)
	require.Equal(t, int64(300), run.Usage.CacheWriteTokens)
	require.Equal(t, "8f0e6c1a-5b2d-4e7a-9c3f-2d1b0a9e8c7d", run.EngineSession)
	require.Equal(t, "claude-sonnet-4-5-20250929", run.Model)
	require.Equal(t, 3, run.Turns)
	require.NotNil(t, run.Exit)
	require.Equal(t, "exited", run.Exit.Reason)

	first := firstEndedRun(t, s, "demo", hang)
	require.Equal(t, "failed", first.Result)
	require.Contains(t, first.Reason, "engine_idle: ")
	require.NotNil(t, first.Exit)
	require.Equal(t, "engine_idle", first.Exit.Reason)
	// lastActivityAt is when the engine started: it never wrote a byte.
	require.False(t, first.LastActivityAt.IsZero())
	took := first.EndedAt.Sub(first.LastActivityAt)
	t.Logf("the hung engine's run ended %s after it started (idle timeout %s)", took, idle)
	require.Less(t, took, idle+time.Second, "stopped within the idle timeout plus a second")
	require.GreaterOrEqual(t, took, idle)

	// The rate-limited run: kind rate_limited, no attempt spent, and the
	// factory's cooldown for engine:claude, which the failure carries.
	limitedRun := firstEndedRun(t, s, "demo", limited)
	require.Contains(t, limitedRun.Reason, "rate_limited: ")
	require.Equal(t, float64(0), s.Job("demo", limited)["attempts"], "a rate limit spends no attempt")
	cooling := factoryCooldowns(t, s, "demo")
	require.Len(t, cooling, 1)
	until := cooling["fa"]["engine:claude"]
	require.True(t, until.After(time.Now()), "cooling down for engine:claude: %v", cooling)
}

// factoryCooldowns is GET /factories of product: each factory's cooldowns
// by its id.
func factoryCooldowns(t *testing.T, s *Stack, product string) map[string]map[string]time.Time {
	t.Helper()
	r := s.Op(http.MethodGet, "/factories", product, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var factories struct {
		Items []struct {
			ID        string               `json:"id"`
			Cooldowns map[string]time.Time `json:"cooldowns"`
		} `json:"items"`
	}
	r.JSON(t, &factories)
	out := map[string]map[string]time.Time{}
	for _, f := range factories.Items {
		out[f.ID] = f.Cooldowns
	}
	return out
}

// TestClaudePresetResumesOnRetry: a run of the claude preset that crashed
// after its init line reported its session; the operator's requeue brings
// the job back to the same factory, which resumes that session
// (--resume <session>, the transcript moved to the new worktree) with the
// failure as the prompt, and ships.
func TestClaudePresetResumesOnRetry(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	bin := filepath.Join(repoRoot, "infra/factory/internal/engine/stream/testdata/bin")
	argv, stdin := filepath.Join(t.TempDir(), "argv"), filepath.Join(t.TempDir(), "stdin")
	startFactory(t, s, "fa", "demo", 1, repo, "true",
		"FLEET_ENGINE_CLAUDE=preset", "FLEET_DEFAULT_ENGINE=claude",
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"CLAUDE_CONFIG_DIR="+t.TempDir(), "FAKE_ENGINE_ARGV_FILE="+argv, "FAKE_ENGINE_STDIN_FILE="+stdin)
	id := s.Submit("demo", "---\ntitle: crash once\nrepo: app\n---\nfake-scenario: crash\n")
	facWaitStage(t, s, "demo", id, "failed", 60*time.Second)
	first := firstEndedRun(t, s, "demo", id)
	require.Contains(t, first.Reason, "crash: ")
	require.Equal(t, "8f0e6c1a-5b2d-4e7a-9c3f-2d1b0a9e8c7d", first.EngineSession, "the crashed run reported its session")

	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/requeue", "demo", map[string]any{"reason": "again"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)

	b, err := os.ReadFile(argv)
	require.NoError(t, err)
	runs := strings.Split(strings.TrimSuffix(string(b), "--\n"), "--\n")
	require.Len(t, runs, 2)
	require.NotContains(t, runs[0], "--resume")
	require.Contains(t, runs[1], "--resume\n8f0e6c1a-5b2d-4e7a-9c3f-2d1b0a9e8c7d\n", "the retry resumes the session")
	prompts, err := os.ReadFile(stdin)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(prompts), "fake-scenario: crash"), "the retry's prompt is the feedback, not the task again: %s", prompts)
	require.Equal(t, "hello", repo.Show(t, "aq/job/"+id, "hello.txt"))
}

// TestRealClaudePresetFactory: a real factory runs the real Claude Code
// CLI (make agent-clis) as the claude preset, against the scripted
// Messages API on loopback: the preset's command line is one the real CLI
// accepts (the prompt on stdin, the permission mode, stream-json), its Write
// tool really runs in the job's worktree, and the run's usage, session and
// turns are what the CLI's result said.
func TestRealClaudePresetFactory(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "claude")
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	id := s.Submit("demo", "---\ntitle: greet\nrepo: app\n---\nWrite hello.txt.\n")
	work := t.TempDir()
	worktree := filepath.Join(work, "worktrees", "app", id+"-e1")
	api := startMessagesAPI(t, messagesapi.Script{Steps: []messagesapi.Step{
		{Tool: "Write", Input: map[string]any{"file_path": filepath.Join(worktree, "hello.txt"), "content": "hello from claude\n"}, InputTokens: 1200, OutputTokens: 80},
		{Text: "I wrote hello.txt.", InputTokens: 1400, OutputTokens: 20},
	}})
	token := s.Factory("fa", "demo", 1, []string{"os:linux"}, []string{repo.Name})
	runFactoryIn(t, s, "fa", token, 1, repo.Base, "true", work,
		"FLEET_ENGINE_CLAUDE=preset", "FLEET_DEFAULT_ENGINE=claude",
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"ANTHROPIC_BASE_URL="+api.URL, "ANTHROPIC_API_KEY=sk-ant-test-0000", "DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_MAX_RETRIES=1", "HOME="+t.TempDir())

	facWaitStage(t, s, "demo", id, "shipped", 120*time.Second)
	require.Equal(t, "hello from claude", repo.Show(t, "aq/job/"+id, "hello.txt"), "the real Write tool ran in the worktree")
	reqs := api.Requests()
	require.NotEmpty(t, reqs)
	runs := jobRuns(t, s, "demo", id)
	require.Len(t, runs, 1)
	run := runs[0]
	require.Equal(t, "claude", run.Engine)
	require.Greater(t, run.Usage.USD, 0.0, "total_cost_usd, as the CLI priced the tokens")
	require.Equal(t, int64(2600), run.Usage.InputTokens)
	require.Equal(t, int64(100), run.Usage.OutputTokens)
	require.NotEmpty(t, run.EngineSession)
	require.Equal(t, 2, run.Turns)
	require.NotEmpty(t, run.Model)
	require.Equal(t, "exited", run.Exit.Reason)
	// The run's log reads as a transcript, not the raw events.
	var log string
	Eventually(t, 10*time.Second, "the run's log is complete", func() bool {
		r := s.Op(http.MethodGet, "/jobs/"+id+"/log?epoch=1", "demo", nil)
		log = string(r.Body)
		return r.Status == http.StatusOK && r.Header.Get("X-Fleet-Log-Complete") == "true"
	})
	require.Contains(t, log, "● claude session "+run.EngineSession)
	require.Regexp(t, `(?m)^→ Write /.*/hello\.txt$`, log)
	require.Contains(t, log, "✓ success after 2 turns")
	require.NotContains(t, log, `"type":"assistant"`)
}

// TestRealCodexPresetFactory: a real factory runs the real Codex CLI (make
// agent-clis) as the codex preset against the scripted Responses API (a
// model provider in $CODEX_HOME/config.toml): the preset's command line is
// one the real CLI accepts (the prompt on stdin as "-", -C the worktree,
// the workspace-write sandbox), its command really runs in the worktree,
// and the run's usage is the turn's tokens priced by FLEET_ENGINE_PRICES.
func TestRealCodexPresetFactory(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "codex")
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	id := s.Submit("demo", "---\ntitle: greet\nrepo: app\n---\nCreate hello.txt.\n")
	api := startResponsesAPI(t, responsesapi.Script{Steps: []responsesapi.Step{
		{Cmd: "printf 'hello from codex\\n' > hello.txt", InputTokens: 1000, CachedTokens: 200, OutputTokens: 50, ReasoningTokens: 10},
		{Text: "Created hello.txt.", InputTokens: 1100, OutputTokens: 20},
	}})
	home := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, "config.toml"), api.CodexConfig(), 0o600))
	token := s.Factory("fa", "demo", 1, []string{"os:linux"}, []string{repo.Name})
	runFactory(t, s, "fa", token, 1, repo.Base, "true",
		"FLEET_ENGINE_CODEX=preset", "FLEET_DEFAULT_ENGINE=codex", "FLEET_ENGINE_PRICES=codex=1.25/10",
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"CODEX_HOME="+home, "OPENAI_API_KEY=sk-test-0000")

	facWaitStage(t, s, "demo", id, "shipped", 120*time.Second)
	require.Equal(t, "hello from codex", repo.Show(t, "aq/job/"+id, "hello.txt"), "the real command ran in the worktree")
	runs := jobRuns(t, s, "demo", id)
	require.Len(t, runs, 1)
	run := runs[0]
	require.Equal(t, "codex", run.Engine)
	require.Equal(t, int64(2100), run.Usage.InputTokens)
	require.Equal(t, int64(70), run.Usage.OutputTokens)
	require.Equal(t, int64(200), run.Usage.CacheReadTokens)
	require.InDelta(t, (2100*1.25+70*10)/1e6, run.Usage.USD, 1e-12, "the tokens priced by FLEET_ENGINE_PRICES")
	require.NotEmpty(t, run.EngineSession, "thread.started's thread_id")
	require.Equal(t, 1, run.Turns)
	require.Equal(t, "exited", run.Exit.Reason)
}

// TestRealClaudeTwoAccounts: two real factories run the real Claude Code
// CLI on two accounts (two scripted Messages APIs). The first account is
// rate-limited (429): its run fails as rate_limited, spends no attempt, and
// its factory reports the cooldown, which keeps the job from it (/explain
// says so). The fleet keeps working: the second factory, on the other
// account, takes the job and ships it.
func TestRealClaudeTwoAccounts(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "claude")
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	caps := []string{"os:linux", "engine:claude"}
	claudeEnv := func(api *messagesapi.Server) []string {
		return []string{"FLEET_ENGINE_CLAUDE=preset", "FLEET_DEFAULT_ENGINE=claude",
			"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
			"ANTHROPIC_BASE_URL=" + api.URL, "ANTHROPIC_API_KEY=sk-ant-test-0000", "DISABLE_AUTOUPDATER=1",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_MAX_RETRIES=1", "HOME=" + t.TempDir()}
	}

	limited := startMessagesAPI(t, messagesapi.Script{Steps: []messagesapi.Step{{Status: 429, RetryAfter: 1}}})
	token := s.Factory("limited", "demo", 1, caps, []string{repo.Name})
	runFactoryIn(t, s, "limited", token, 1, repo.Base, "true", t.TempDir(), claudeEnv(limited)...)

	id := s.Submit("demo", "---\ntitle: greet\nrepo: app\ncapabilities: [engine:claude]\nmaxAttempts: 1\n---\nWrite hello.txt.\n")
	var job map[string]any
	Eventually(t, 90*time.Second, "the limited account's run fails as rate_limited", func() bool {
		job = s.Job("demo", id)
		f, _ := job["lastFailure"].(map[string]any)
		return f != nil && f["kind"] == "rate_limited"
	})
	require.NotEmpty(t, limited.Requests(), "the real CLI called the limited account")
	require.EqualValues(t, 0, job["attempts"], "a rate limit spends no attempt")
	require.NotEqual(t, "dead_letter", job["stage"], "not dead-lettered on its one attempt")

	var cooling map[string]any
	r := s.Op(http.MethodGet, "/factories", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var fs struct {
		Items []map[string]any `json:"items"`
	}
	r.JSON(t, &fs)
	for _, f := range fs.Items {
		if f["id"] == "limited" {
			cooling, _ = f["cooldowns"].(map[string]any)
		}
	}
	require.Contains(t, cooling, "engine:claude", "the factory reported its cooldown")
	ex := s.Op(http.MethodGet, "/jobs/"+id+"/explain", "demo", nil)
	require.Contains(t, string(ex.Body), "cooling down for engine:claude")

	// The other account: the job's next lease runs there.
	epoch := int(job["leaseEpoch"].(float64)) + 1
	work := t.TempDir()
	worktree := filepath.Join(work, "worktrees", "app", id+"-e"+strconv.Itoa(epoch))
	healthy := startMessagesAPI(t, messagesapi.Script{Steps: []messagesapi.Step{
		{Tool: "Write", Input: map[string]any{"file_path": filepath.Join(worktree, "hello.txt"), "content": "hello from the other account\n"}, InputTokens: 900, OutputTokens: 40},
		{Text: "Done.", InputTokens: 1000, OutputTokens: 10},
	}})
	token = s.Factory("healthy", "demo", 1, caps, []string{repo.Name})
	runFactoryIn(t, s, "healthy", token, 1, repo.Base, "true", work, claudeEnv(healthy)...)

	job = facWaitStage(t, s, "demo", id, "shipped", 120*time.Second)
	require.EqualValues(t, 0, job["attempts"])
	require.Equal(t, "hello from the other account", repo.Show(t, "aq/job/"+id, "hello.txt"))
	runs := jobRuns(t, s, "demo", id)
	require.Len(t, runs, 2)
	require.Equal(t, "failed", runs[0].Result)
	require.Equal(t, "succeeded", runs[1].Result)
	require.Greater(t, runs[1].Usage.USD, 0.0)
}

// TestRealCodexPresetResumesAfterAServerError: the real Codex CLI, run by
// the codex preset, meets a 500 from the scripted Responses API (no retries
// configured): its turn.failed (0.171.0: "We're currently experiencing
// high demand") is a server failure, so the failure is retryable and the job, on its one
// attempt, is dead-lettered rather than failed for good. The operator's
// requeue brings it back to the same factory, which resumes the thread
// with the preset's own command line (the root options, then `resume
// <thread> -`), as the real CLI accepts it: the resumed run's history holds
// the first prompt, its command runs in the new worktree, and the job
// ships.
func TestRealCodexPresetResumesAfterAServerError(t *testing.T) {
	t.Parallel()
	real := agentCLI(t, "codex")
	// A wrapper that records each run's arguments, then runs the real CLI.
	bin, argv := t.TempDir(), filepath.Join(t.TempDir(), "argv")
	require.NoError(t, os.WriteFile(filepath.Join(bin, "codex"), []byte("#!/bin/sh\n{ printf '%s\\n' \"$@\"; echo --; } >> '"+argv+"'\nexec '"+real+"' \"$@\"\n"), 0o755))
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	id := s.Submit("demo", "---\ntitle: greet\nrepo: app\nmaxAttempts: 1\n---\nCreate hello.txt.\n")
	api := startResponsesAPI(t, responsesapi.Script{Steps: []responsesapi.Step{
		{Status: 500, Once: true},
		{Cmd: "printf 'hello from codex\\n' > hello.txt", InputTokens: 1000, OutputTokens: 50},
		{Text: "Created hello.txt.", InputTokens: 1100, OutputTokens: 20},
	}})
	home := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, "config.toml"), api.CodexConfig(), 0o600))
	token := s.Factory("fa", "demo", 1, []string{"os:linux"}, []string{repo.Name})
	runFactory(t, s, "fa", token, 1, repo.Base, "true",
		"FLEET_ENGINE_CODEX=preset", "FLEET_DEFAULT_ENGINE=codex",
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"CODEX_HOME="+home, "OPENAI_API_KEY=sk-test-0000")

	facWaitStage(t, s, "demo", id, "dead_letter", 120*time.Second)
	first := firstEndedRun(t, s, "demo", id)
	// 0.171.0 words a 500 as "We're currently experiencing high demand".
	require.Contains(t, first.Reason, "engine_error: engine codex reported an error: ", "the run failed on the server's answer")
	require.NotEmpty(t, first.EngineSession, "thread.started came before the failed request")

	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/requeue", "demo", map[string]any{"reason": "the API is back"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	facWaitStage(t, s, "demo", id, "shipped", 120*time.Second)
	require.Equal(t, "hello from codex", repo.Show(t, "aq/job/"+id, "hello.txt"), "the resumed run's command ran in the new worktree")

	b, err := os.ReadFile(argv)
	require.NoError(t, err)
	runs := strings.Split(strings.TrimSuffix(string(b), "--\n"), "--\n")
	require.Len(t, runs, 2, "%s", b)
	require.NotContains(t, runs[0], "resume")
	require.Contains(t, runs[1], "\nresume\n"+first.EngineSession+"\n-\n", "the retry resumes the thread: %s", runs[1])
	reqs := api.Requests()
	require.Len(t, reqs, 3)
	require.Contains(t, strings.Join(reqs[1].Texts, "\n"), "Create hello.txt.", "the resumed history holds the first run's prompt")
}
