package tests

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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

	var first runView
	Eventually(t, 60*time.Second, "the hung engine's run ends", func() bool {
		runs := jobRuns(t, s, "demo", hang)
		if len(runs) == 0 || runs[0].Result == "running" {
			return false
		}
		first = runs[0]
		return true
	})
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
}
