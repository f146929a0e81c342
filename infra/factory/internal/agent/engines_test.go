package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
)

// engineCoord is a fakeCoord that records what a structured engine's run
// reports, and the order of heartbeats and failures.
type engineCoord struct {
	*fakeCoord
	mu       sync.Mutex
	usage    []api.UsageRequest
	failReqs []api.FailRequest
	beats    []api.HeartbeatRequest
	order    []string
}

func (c *engineCoord) ReportUsage(_ context.Context, _, _ string, r api.UsageRequest) (*fleet.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usage = append(c.usage, r)
	return &fleet.Job{}, nil
}

func (c *engineCoord) Heartbeat(_ context.Context, hb api.HeartbeatRequest) (*fleet.Factory, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beats = append(c.beats, hb)
	c.order = append(c.order, "heartbeat")
	return &fleet.Factory{}, nil
}

func (c *engineCoord) Fail(ctx context.Context, r api.FailRequest) (*fleet.Job, error) {
	c.mu.Lock()
	c.failReqs = append(c.failReqs, r)
	c.order = append(c.order, "fail")
	c.mu.Unlock()
	return c.fakeCoord.Fail(ctx, r)
}

// presetT is a factory running the fake claude (testdata of the stream
// package) as the claude preset, on a manual clock.
type presetT struct {
	a     *Agent
	coord *engineCoord
	repo  gitRepo
	clock *clocktest.Clock
	argv  string // the file the fake appends its argv to
	stdin string // the file the fake appends its prompt to
}

// fakeEngines is the directory of the fake CLIs.
func fakeEngines(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../engine/stream/testdata/bin")
	require.NoError(t, err)
	return dir
}

// newPresetT sets the process environment (PATH, the fake's scenario):
// its tests cannot run in parallel.
func newPresetT(t *testing.T, scenario string) *presetT {
	t.Helper()
	root := t.TempDir()
	p := &presetT{repo: newGitRepo(t, root), argv: filepath.Join(root, "argv"), stdin: filepath.Join(root, "stdin"),
		clock: clocktest.New(time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC))}
	t.Setenv("PATH", fakeEngines(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_ENGINE_SCENARIO", scenario)
	t.Setenv("FAKE_ENGINE_ARGV_FILE", p.argv)
	t.Setenv("FAKE_ENGINE_STDIN_FILE", p.stdin)
	t.Setenv("CLAUDE_CONFIG_DIR", filepath.Join(root, "claude-config"))
	t.Setenv("CODEX_HOME", filepath.Join(root, "codex-home"))
	p.coord = &engineCoord{fakeCoord: newFakeCoord("j1", "app")}
	p.a = newGitAgent(t, root, p.repo, p.coord, "unused")
	p.a.cfg.Engines = map[string]string{"claude": "claude"}
	p.a.cfg.Presets = map[string]engine.Preset{"claude": engine.PresetClaude}
	p.a.cfg.DefaultEngine = "claude"
	p.a.cfg.EngineIdle, p.a.cfg.EngineExitGrace = time.Hour, time.Hour
	p.a.cfg.HeartbeatEnabled = true
	p.a.clock = p.clock // the cooldowns' too
	p.a.env = caps.Env{LookPath: func(string) (string, error) { return "", errors.New("not here") }}
	return p
}

func (p *presetT) run(t *testing.T) Outcome {
	t.Helper()
	r := p.a.handle(context.Background(), transport.Delivery{ID: "claim", Claimed: p.coord.claim()})
	out := waitRun(t, r, "the run")
	p.a.jobs.Wait()
	return out
}

// runStreamed runs the job until the fake has printed the whole of
// recorded (a stream of the stream package's testdata), then moves
// the clock by d and waits for the run to end: the run's waits on the
// clock (the periodic checkpoint, which meters usage) then act on what
// the engine said.
func (p *presetT) runStreamed(t *testing.T, recorded string, d time.Duration) Outcome {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("../engine/stream/testdata", recorded))
	require.NoError(t, err)
	r := p.a.handle(context.Background(), transport.Delivery{ID: "claim", Claimed: p.coord.claim()})
	require.NotNil(t, r)
	events := filepath.Join(p.a.jobsDir(), gitwt.RunName("j1", r.epoch), artifactEvents)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(events)
		return string(b) == string(want)
	}, 30*time.Second, 10*time.Millisecond, "the fake prints its stream")
	p.clock.Advance(d)
	out := waitRun(t, r, "the run")
	p.a.jobs.Wait()
	return out
}

// lastPatch is the delivering PATCH.
func (p *presetT) lastPatch(t *testing.T) api.PatchRequest {
	t.Helper()
	p.coord.fakeCoord.mu.Lock()
	defer p.coord.fakeCoord.mu.Unlock()
	require.NotEmpty(t, p.coord.patches)
	return p.coord.patches[len(p.coord.patches)-1]
}

func (p *presetT) onlyFail(t *testing.T) api.FailRequest {
	t.Helper()
	p.coord.mu.Lock()
	defer p.coord.mu.Unlock()
	require.Len(t, p.coord.failReqs, 1)
	return p.coord.failReqs[0]
}

// runsArgv is each run's argv, as the fake recorded it.
func (p *presetT) runsArgv(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile(p.argv)
	require.NoError(t, err)
	var out [][]string
	for run := range strings.SplitSeq(strings.TrimSuffix(string(b), "--\n"), "--\n") {
		out = append(out, strings.Split(strings.TrimSuffix(run, "\n"), "\n"))
	}
	return out
}

const fixtureSession = "8f0e6c1a-5b2d-4e7a-9c3f-2d1b0a9e8c7d"

// TestClaudePresetDelivers: the preset runs claude headless with the
// prompt on stdin; the run's usage is the result's total_cost_usd and
// tokens, and its session, model, turns and exit ride on the delivering
// PATCH; the raw stream is uploaded as engine-events.jsonl.
func TestClaudePresetDelivers(t *testing.T) {
	p := newPresetT(t, "normal")
	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	require.Equal(t, [][]string{{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"}}, p.runsArgv(t))
	stdin, err := os.ReadFile(p.stdin)
	require.NoError(t, err)
	require.Equal(t, "do it", string(stdin))
	require.Equal(t, "hello", p.repo.show("aq/job/j1", "hello.txt"))

	final := p.lastPatch(t)
	require.Equal(t, &fleet.Usage{USD: 0.0421, InputTokens: 2700, OutputTokens: 190, CacheReadTokens: 300, CacheWriteTokens: 300}, final.Usage)
	require.Equal(t, fixtureSession, final.Session)
	require.Equal(t, "claude-sonnet-4-5-20250929", final.Model)
	require.Equal(t, 3, final.Turns)
	require.Equal(t, &fleet.RunExit{Code: 0, Reason: fleet.ExitExited}, final.Exit)
	require.Equal(t, p.clock.Now(), final.LastActivityAt)
	names := []string{}
	for _, u := range p.coord.uploaded() {
		names = append(names, u.name)
		if u.name == artifactEvents {
			want, err := os.ReadFile("../engine/stream/testdata/claude/normal.jsonl")
			require.NoError(t, err)
			require.Equal(t, string(want), u.body)
		}
	}
	require.Contains(t, names, artifactEvents)
}

// TestClaudePresetFailures: is_error is a failure whatever the subtype
// (kind engine_error, retryable for a server error); a rate limit
// (429 after api_retry, or rate_limit_event rejected) fails rate_limited,
// retryable, and the failure carries the cooldown (until the reset the
// engine named, else a backoff), heartbeats or not: an elastic pool's
// execution (--once) sends none, and its cooldown must still reach the
// scheduler.
func TestClaudePresetFailures(t *testing.T) {
	now := time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		scenario  string
		kind      fleet.FailureKind
		retryable bool
		until     func(time.Time) bool
	}{
		{scenario: "is_error", kind: fleet.FailEngineError, retryable: true},
		{scenario: "429", kind: fleet.FailRateLimited, retryable: true,
			until: func(u time.Time) bool { return !u.Before(now.Add(48*time.Second)) && !u.After(now.Add(72*time.Second)) }},
		{scenario: "rate_limit_event", kind: fleet.FailRateLimited, retryable: true,
			until: func(u time.Time) bool { return u.Equal(time.Unix(1795003600, 0)) }},
	}
	for _, tc := range tests {
		for _, once := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/once=%v", tc.scenario, once), func(t *testing.T) {
				p := newPresetT(t, tc.scenario)
				p.a.cfg.Once, p.a.cfg.HeartbeatEnabled = once, !once
				require.Equal(t, OutcomeFailed, p.run(t))
				f := p.onlyFail(t)
				require.Equal(t, tc.kind, f.Kind)
				require.Equal(t, tc.retryable, *f.Retryable)
				require.True(t, strings.HasPrefix(*f.Reason, string(tc.kind)+": "), *f.Reason)
				require.Equal(t, fixtureSession, f.Session, "the session rides on the failure")
				if tc.until == nil {
					require.Empty(t, f.Cooldowns)
					return
				}
				require.Len(t, f.Cooldowns, 1)
				require.True(t, tc.until(f.Cooldowns["engine:claude"]), "until %s", f.Cooldowns["engine:claude"])
			})
		}
	}
}

// TestClaudePresetUnreachableAPI: the real CLI's run that could not reach
// the API (is_error with no api_error_status; its synthetic message's
// error "server_error") is a retryable engine_error: the next run may
// reach it.
func TestClaudePresetUnreachableAPI(t *testing.T) {
	p := newPresetT(t, "real-2.1.197-unreachable")
	require.Equal(t, OutcomeFailed, p.run(t))
	f := p.onlyFail(t)
	require.Equal(t, fleet.FailEngineError, f.Kind, *f.Reason)
	require.True(t, *f.Retryable, *f.Reason)
	require.Empty(t, f.Cooldowns, "no rate limit")
}

// TestClaudePresetWatchdog: an engine that prints nothing is stopped at
// the idle timeout (engine_idle, retryable); one that gives its result and
// does not exit is ended after the grace and judged by its result.
func TestClaudePresetWatchdog(t *testing.T) {
	t.Run("hang", func(t *testing.T) {
		p := newPresetT(t, "hang")
		p.a.cfg.EngineIdle = 10 * time.Minute
		p.a.cfg.DefaultWall = time.Hour // on the same clock: out of the way
		made := p.clock.TickerMade()
		r := p.a.handle(context.Background(), transport.Delivery{ID: "claim", Claimed: p.coord.claim()})
		// The lease keeper's two (its interval and the lease's end), the
		// wall budget's, the checkpoint's and the watchdog's: nothing else
		// waits on the clock before it moves.
		for range 5 {
			<-made
		}
		p.clock.Advance(10 * time.Minute)
		require.Equal(t, OutcomeFailed, waitRun(t, r, "the hung run"))
		p.a.jobs.Wait()
		f := p.onlyFail(t)
		require.Equal(t, fleet.FailEngineIdle, f.Kind)
		require.True(t, *f.Retryable)
		require.Equal(t, fleet.ExitEngineIdle, f.Exit.Reason)
	})
	t.Run("noexit", func(t *testing.T) {
		p := newPresetT(t, "noexit")
		p.a.cfg.EngineExitGrace = 30 * time.Second
		r := p.a.handle(context.Background(), transport.Delivery{ID: "claim", Claimed: p.coord.claim()})
		events := filepath.Join(p.a.jobsDir(), "j1-e1", artifactEvents)
		require.Eventually(t, func() bool {
			b, _ := os.ReadFile(events)
			return strings.Contains(string(b), `"type":"result"`)
		}, 30*time.Second, 10*time.Millisecond, "the fake prints its result")
		p.clock.Advance(30 * time.Second)
		require.Equal(t, OutcomeDone, waitRun(t, r, "the run that would not exit"), "fails: %q", p.coord.fails)
		p.a.jobs.Wait()
		final := p.lastPatch(t)
		require.Equal(t, fleet.ExitGrace, final.Exit.Reason)
		require.InDelta(t, 0.0421, final.Usage.USD, 1e-12)
	})
}

// TestClaudePresetResumes: a retry on the factory that ran the session
// resumes it (--resume <session>) with the last failure as the prompt,
// after moving the session's transcript to the new worktree's project
// folder; on another factory's session it starts afresh.
func TestClaudePresetResumes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		factory string
		resume  bool
	}{{"same factory", "f1", true}, {"other factory", "f2", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPresetT(t, "normal")
			p.earlierClaudeRun(t, tc.factory)

			require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
			argv := p.runsArgv(t)
			require.Len(t, argv, 1)
			stdin, err := os.ReadFile(p.stdin)
			require.NoError(t, err)
			if !tc.resume {
				require.NotContains(t, argv[0], "--resume")
				require.Equal(t, "do it", string(stdin))
				return
			}
			require.Equal(t, []string{"--resume", fixtureSession}, argv[0][len(argv[0])-2:])
			require.Contains(t, string(stdin), "Your previous run of this task failed: crash: tests still red")
			moved := filepath.Join(os.Getenv("CLAUDE_CONFIG_DIR"), "projects",
				nonAlnum.ReplaceAllLiteralString(p.a.git.WorktreePath("app", "j1", 2), "-"), fixtureSession+".jsonl")
			require.FileExists(t, moved, "the transcript follows the worktree")
		})
	}
}

// earlierClaudeRun gives the job a failed first run (lease epoch 1) of the
// claude preset on factoryID, with its session, and that session's
// transcript where Claude Code left it (the run's worktree's project folder).
func (p *presetT) earlierClaudeRun(t *testing.T, factoryID string) {
	t.Helper()
	p.coord.job.LeaseEpoch = 1
	p.coord.job.Runs = []fleet.Run{{FactoryID: factoryID, LeaseEpoch: 1, Engine: "claude", Result: fleet.RunFailed,
		EngineFacts: fleet.EngineFacts{Session: fixtureSession}}}
	p.coord.job.LastFailure = &fleet.Failure{Reason: "crash: tests still red", Retryable: true}
	old := filepath.Join(os.Getenv("CLAUDE_CONFIG_DIR"), "projects",
		nonAlnum.ReplaceAllLiteralString(p.a.git.WorktreePath("app", "j1", 1), "-"))
	require.NoError(t, os.MkdirAll(old, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(old, fixtureSession+".jsonl"), []byte("{}\n"), 0o600))
}

// TestClaudePresetResumeNotFound: a resumed session the CLI does not find
// (it ends at once: error_during_execution, is_error, num_turns 0, as the
// real CLI ends a resume from another directory, shared/AGENTS.md) costs
// the job nothing: the engine runs again afresh, with the task itself, on
// the work in the worktree, and the job is delivered.
func TestClaudePresetResumeNotFound(t *testing.T) {
	p := newPresetT(t, "resume_missing")
	p.earlierClaudeRun(t, "f1")

	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	argv := p.runsArgv(t)
	require.Len(t, argv, 2, "the resume, then a fresh session")
	require.Equal(t, []string{"--resume", fixtureSession}, argv[0][len(argv[0])-2:])
	require.NotContains(t, argv[1], "--resume")
	stdin, err := os.ReadFile(p.stdin)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(stdin), "do it"), "the fresh session gets the task: %q", stdin)
	require.Empty(t, p.coord.failReqs)
}

// TestClaudePresetResumeRefusesPlantedLink: a link the engine left in
// place of the retry's project folder is not followed: the session is not
// resumed (the transcript stays where it was) and the engine runs afresh
// with the task.
func TestClaudePresetResumeRefusesPlantedLink(t *testing.T) {
	p := newPresetT(t, "normal")
	p.earlierClaudeRun(t, "f1")
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(os.Getenv("CLAUDE_CONFIG_DIR"), "projects",
		nonAlnum.ReplaceAllLiteralString(p.a.git.WorktreePath("app", "j1", 2), "-"))))

	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	argv := p.runsArgv(t)
	require.Len(t, argv, 1)
	require.NotContains(t, argv[0], "--resume")
	stdin, err := os.ReadFile(p.stdin)
	require.NoError(t, err)
	require.Equal(t, "do it", string(stdin))
	require.FileExists(t, filepath.Join(os.Getenv("CLAUDE_CONFIG_DIR"), "projects",
		nonAlnum.ReplaceAllLiteralString(p.a.git.WorktreePath("app", "j1", 1), "-"), fixtureSession+".jsonl"),
		"the transcript is not moved through the link")
}

// TestCodexPresetRuns: the codex preset's usage is its turns' tokens
// priced by FLEET_ENGINE_PRICES; a retry on this factory resumes its
// thread (exec resume <thread> -) with the failure as the prompt.
func TestCodexPresetRuns(t *testing.T) {
	p := newPresetT(t, "normal")
	p.a.cfg.Engines = map[string]string{"codex": "codex"}
	p.a.cfg.Presets = map[string]engine.Preset{"codex": engine.PresetCodex}
	p.a.cfg.DefaultEngine = "codex"
	p.a.cfg.Prices = map[string]stream.Price{"codex": {Input: 1.25, Output: 10}}
	const thread = "019a7c2e-4b1d-7f30-9a55-6c0e2b8d4f11"
	p.coord.job.LeaseEpoch = 1
	p.coord.job.Runs = []fleet.Run{{FactoryID: "f1", LeaseEpoch: 1, Engine: "codex", Result: fleet.RunFailed,
		EngineFacts: fleet.EngineFacts{Session: thread}}}
	p.coord.job.LastFailure = &fleet.Failure{Reason: "engine_idle: engine codex wrote nothing for 15m0s", Retryable: true}
	// The thread's earlier run used 10000 (3000 cached) in, 200 out: the
	// resumed run's turn.completed (24000/8000/1200) counts them again.
	writeCodexRollout(t, thread, `{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":10000,"cached_input_tokens":3000,"output_tokens":200}}}}`)
	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	wt := p.a.git.WorktreePath("app", "j1", 2)
	require.Equal(t, [][]string{{"exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-C", wt, "resume", thread, "-"}}, p.runsArgv(t))
	stdin, err := os.ReadFile(p.stdin)
	require.NoError(t, err)
	require.Contains(t, string(stdin), "Your previous run of this task failed: engine_idle: ")
	final := p.lastPatch(t)
	require.Equal(t, thread, final.Session)
	require.Equal(t, 1, final.Turns)
	require.Equal(t, int64(14000), final.Usage.InputTokens, "this run's tokens, not the thread's")
	require.Equal(t, int64(5000), final.Usage.CacheReadTokens)
	require.Equal(t, int64(1000), final.Usage.OutputTokens)
	require.InDelta(t, (14000*1.25+1000*10)/1e6, final.Usage.USD, 1e-12)
}

// TestCodexPresetFailures: a turn.failed on a transport or server failure
// codex could not get past (the stream disconnected, #30997; the retry
// limit spent on a 5xx) is a retryable engine_error, as a Claude result
// with a 5xx is: the next run may well not meet it. A rate limit fails
// rate_limited with the engine's cooldown.
func TestCodexPresetFailures(t *testing.T) {
	for _, tc := range []struct {
		scenario  string
		kind      fleet.FailureKind
		retryable bool
	}{
		{scenario: "failed", kind: fleet.FailEngineError, retryable: true},
		{scenario: "rate_limited", kind: fleet.FailRateLimited, retryable: true},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			p := newPresetT(t, tc.scenario)
			p.a.cfg.Engines = map[string]string{"codex": "codex"}
			p.a.cfg.Presets = map[string]engine.Preset{"codex": engine.PresetCodex}
			p.a.cfg.DefaultEngine = "codex"
			require.Equal(t, OutcomeFailed, p.run(t))
			f := p.onlyFail(t)
			require.Equal(t, tc.kind, f.Kind, *f.Reason)
			require.Equal(t, tc.retryable, *f.Retryable, *f.Reason)
		})
	}
}

// writeCodexRollout leaves thread's rollout where codex keeps it, holding
// lines.
func writeCodexRollout(t *testing.T, thread string, lines ...string) {
	t.Helper()
	dir := filepath.Join(os.Getenv("CODEX_HOME"), "sessions", "2026", "11", "18")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	body := `{"type":"session_meta","payload":{}}` + "\n" + strings.Join(lines, "\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rollout-2026-11-18T09-00-00-"+thread+".jsonl"), []byte(body), 0o600))
}

// TestCodexPresetResumesOnlyAThreadItHas: a thread codex no longer has
// (a seat's home went with its run) is not resumed: codex would exit 1 at
// once ("no rollout found"), on every retry. The retry starts afresh with
// the task.
func TestCodexPresetResumesOnlyAThreadItHas(t *testing.T) {
	p := newPresetT(t, "normal")
	p.a.cfg.Engines = map[string]string{"codex": "codex"}
	p.a.cfg.Presets = map[string]engine.Preset{"codex": engine.PresetCodex}
	p.a.cfg.DefaultEngine = "codex"
	p.coord.job.LeaseEpoch = 1
	p.coord.job.Runs = []fleet.Run{{FactoryID: "f1", LeaseEpoch: 1, Engine: "codex", Result: fleet.RunFailed,
		EngineFacts: fleet.EngineFacts{Session: "019a7c2e-0000-7000-8000-000000000000"}}}
	p.coord.job.LastFailure = &fleet.Failure{Reason: "crash: exit 1", Retryable: true}
	writeCodexRollout(t, "019a7c2e-4b1d-7f30-9a55-6c0e2b8d4f11") // another thread
	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	wt := p.a.git.WorktreePath("app", "j1", 2)
	require.Equal(t, [][]string{{"exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-C", wt, "-"}}, p.runsArgv(t))
	stdin, err := os.ReadFile(p.stdin)
	require.NoError(t, err)
	require.Equal(t, "do it", string(stdin), "the task itself, not a resume prompt")
}

// TestResumePrompt: the feedback that sent the job back is the resumed
// session's prompt: the forge's on this iteration first, then the
// reviewer's, then the last failure.
func TestResumePrompt(t *testing.T) {
	t.Parallel()
	j := &fleet.Job{LastFailure: &fleet.Failure{Reason: "crash: exit 1"}}
	jb := &job{j: j}
	require.Contains(t, jb.resumePrompt(), "Your previous run of this task failed: crash: exit 1")
	j.Review = &fleet.Review{Feedback: "Add a test."}
	require.Contains(t, jb.resumePrompt(), "A reviewer sent your work back with this feedback:\n\nAdd a test.")
	j.Iteration = 2
	j.Feedback = []fleet.Feedback{
		{Iteration: 1, Source: fleet.FeedbackReview, Body: "stale remark"},
		{Iteration: 2, Source: fleet.FeedbackReview, Author: "ana", Body: "Rename it."},
		{Iteration: 2, Source: fleet.FeedbackCheck, Name: "ci/test", Body: "TestX failed"},
	}
	got := jb.resumePrompt()
	require.Contains(t, got, "Your pull request came back with this feedback:\n\nreview by ana:\nRename it.\n\ncheck ci/test:\nTestX failed")
	require.NotContains(t, got, "stale remark", "only this iteration's feedback")
}

// TestCodexPresetBudgetKill: the running usage a preset's stream gives
// (Codex's tokens priced by the table) drives the budget.usd kill while the
// engine still runs.
func TestCodexPresetBudgetKill(t *testing.T) {
	p := newPresetT(t, "noexit") // the normal stream, then no exit
	p.a.cfg.Engines = map[string]string{"codex": "codex"}
	p.a.cfg.Presets = map[string]engine.Preset{"codex": engine.PresetCodex}
	p.a.cfg.DefaultEngine = "codex"
	p.a.cfg.Prices = map[string]stream.Price{"codex": {Input: 1.25, Output: 10}}
	p.a.cfg.Checkpoint = 50 * time.Millisecond
	p.coord.job.Budget.USD = 0.01 // the stream's turn costs 0.042
	// The checkpoint after the turn, on the factory's clock, meters it.
	require.Equal(t, OutcomeFailed, p.runStreamed(t, "codex/normal.jsonl", p.a.cfg.Checkpoint))
	f := p.onlyFail(t)
	require.Equal(t, fleet.FailBudget, f.Kind)
	require.Contains(t, *f.Reason, "usd budget 0.01 exceeded (the engine reported 0.0420)")
	require.Equal(t, fleet.ExitStopped, f.Exit.Reason)
}

// TestClaudePresetUsageFileCannotLowerCost: a usage file the engine
// writes lower than its CLI's figures (total_cost_usd 0.0421) does not
// lower them: the budget.usd kill acts on the CLI's, and the failure
// reports them.
func TestClaudePresetUsageFileCannotLowerCost(t *testing.T) {
	p := newPresetT(t, "noexit") // the normal stream, then no exit
	t.Setenv("FAKE_ENGINE_USAGE", `{"usd":0.0001,"inputTokens":1,"outputTokens":1}`)
	p.a.cfg.Checkpoint = 50 * time.Millisecond
	p.coord.job.Budget.USD = 0.01
	require.Equal(t, OutcomeFailed, p.runStreamed(t, "claude/normal.jsonl", p.a.cfg.Checkpoint))
	f := p.onlyFail(t)
	require.Equal(t, fleet.FailBudget, f.Kind)
	require.Contains(t, *f.Reason, "usd budget 0.01 exceeded (the engine reported 0.0421)")
	require.InDelta(t, 0.0421, f.Usage.USD, 1e-12)
}

// TestCodexPresetArgv: codex exec runs with --json in a workspace-write
// sandbox in the worktree, the prompt on stdin ("-"); a resume names the
// thread before the prompt.
func TestCodexPresetArgv(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"codex", "exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-C", "/w", "-"},
		engine.PresetCodex.Argv(engine.PresetRun{Worktree: "/w", PersonaFile: "/p"}))
	require.Equal(t, []string{"codex", "exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-C", "/w", "resume", "t1", "-"},
		engine.PresetCodex.Argv(engine.PresetRun{Worktree: "/w", Resume: "t1"}))
	require.Equal(t, []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits",
		"--append-system-prompt-file", "/p", "--resume", "s1"},
		engine.PresetClaude.Argv(engine.PresetRun{Worktree: "/w", PersonaFile: "/p", Resume: "s1"}))
}

// TestCooldowns: a named reset wins (bounded to 24 h ahead); without one
// the backoff grows with the limits in a row and a success resets it;
// past cooldowns are dropped from the heartbeat.
func TestCooldowns(t *testing.T) {
	t.Parallel()
	c := clocktest.New(time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC))
	cd := newCooldowns(c)
	require.Nil(t, cd.active())
	reset := c.Now().Add(2 * time.Hour)
	require.Equal(t, reset, cd.limited("claude", reset))
	day := 24*time.Hour - 5*time.Minute
	require.Equal(t, c.Now().Add(day), cd.limited("claude", c.Now().Add(72*time.Hour)), "less than 24 h ahead")
	first := cd.limited("codex", time.Time{}).Sub(c.Now())
	require.InDelta(t, float64(time.Minute), float64(first), float64(12*time.Second))
	second := cd.limited("codex", c.Now().Add(-time.Hour)).Sub(c.Now())
	require.InDelta(t, float64(2*time.Minute), float64(second), float64(24*time.Second), "a reset in the past is no reset")
	require.Equal(t, map[string]time.Time{"engine:claude": c.Now().Add(day), "engine:codex": c.Now().Add(second)}, cd.active())
	cd.succeeded("codex")
	c.Advance(10 * time.Minute)
	require.Equal(t, map[string]time.Time{"engine:claude": c.Now().Add(day - 10*time.Minute)}, cd.active(), "codex's cooldown is over")
	again := cd.limited("codex", time.Time{}).Sub(c.Now())
	require.Less(t, again, 90*time.Second, "a success reset the backoff")
}

// TestRunExit: how the process ended, as the run records it.
func TestRunExit(t *testing.T) {
	t.Parallel()
	require.Equal(t, &fleet.RunExit{Code: 0, Reason: fleet.ExitExited}, runExit(engine.Result{}, nil))
	require.Equal(t, &fleet.RunExit{Code: -1, Signal: "segmentation_fault", Reason: fleet.ExitSignal},
		runExit(engine.Result{ExitCode: -1, Signal: "segmentation fault"}, nil))
	require.Equal(t, fleet.ExitEngineIdle, runExit(engine.Result{ExitCode: -1, Stopped: true}, errEngineIdle).Reason)
	require.Equal(t, fleet.ExitGrace, runExit(engine.Result{ExitCode: -1, Stopped: true}, errExitGrace).Reason)
	require.Equal(t, fleet.ExitStopped, runExit(engine.Result{ExitCode: -1, Stopped: true}, errBudget).Reason)
}

// TestBudgetSpansIterations: on an iteration its pull request asked for, a
// job's budget.usd is what the earlier iterations' runs left of it: a run
// that alone stays under the budget is stopped once, with theirs, it is
// past it.
func TestBudgetSpansIterations(t *testing.T) {
	p := newPresetT(t, "noexit")
	p.a.cfg.Engines = map[string]string{"codex": "codex"}
	p.a.cfg.Presets = map[string]engine.Preset{"codex": engine.PresetCodex}
	p.a.cfg.DefaultEngine = "codex"
	p.a.cfg.Prices = map[string]stream.Price{"codex": {Input: 1.25, Output: 10}}
	p.a.cfg.Checkpoint = 50 * time.Millisecond
	p.a.cfg.EngineExitGrace = 5 * time.Second
	p.coord.job.Budget.USD = 0.05 // the stream's turn costs 0.042: under it alone
	p.coord.job.Iteration = 2
	p.coord.job.Runs = []fleet.Run{{FactoryID: "f0", Usage: fleet.Usage{USD: 0.03}}}
	require.Equal(t, OutcomeFailed, p.runStreamed(t, "codex/normal.jsonl", p.a.cfg.Checkpoint))
	f := p.onlyFail(t)
	require.Equal(t, fleet.FailBudget, f.Kind)
	require.Contains(t, *f.Reason, "usd budget 0.05 exceeded (the engine reported 0.0420, after 0.0300 spent by the earlier iterations)")
}
