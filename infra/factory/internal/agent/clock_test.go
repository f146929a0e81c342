package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
)

// t0 is where the tests' manual clocks start.
var t0 = time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC)

// beatingAPI counts heartbeats, keeps the last and answers each with err.
type beatingAPI struct {
	fakeAPI
	hbMu  sync.Mutex
	beats int
	last  api.HeartbeatRequest
	err   error
}

func (b *beatingAPI) Heartbeat(_ context.Context, hb api.HeartbeatRequest) (*fleet.Factory, error) {
	b.hbMu.Lock()
	defer b.hbMu.Unlock()
	b.beats++
	b.last = hb
	if b.err != nil {
		return nil, b.err
	}
	return &fleet.Factory{}, nil
}

func (b *beatingAPI) count() int {
	b.hbMu.Lock()
	defer b.hbMu.Unlock()
	return b.beats
}

// clockAgent is an agent with no git, no repos and nothing detected, on
// a manual clock standing at t0. Call it inside a synctest bubble.
func clockAgent(t *testing.T, cfg config.Config, coord API) (*Agent, *clocktest.Clock) {
	t.Helper()
	cfg.FactoryID, cfg.WorkDir, cfg.RepoBase = "f1", t.TempDir(), t.TempDir()
	if cfg.Seats == 0 {
		cfg.Seats = 1
	}
	clk := clocktest.New(t0)
	a := New(Deps{Config: cfg, API: coord, Receiver: &fakeRecv{}, Log: slog.New(slog.DiscardHandler), Clock: clk})
	a.detected = &caps.Result{}
	return a, clk
}

// TestHeartbeatOnTheAgentsClock: the periodic heartbeat is sent each time
// the interval passes on the agent's clock, and not before. Before, the
// loop ticked on the wall clock: the agent's clock drove none of it.
func TestHeartbeatOnTheAgentsClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const every = 20 * time.Second
		coord := &beatingAPI{}
		a, clk := clockAgent(t, config.Config{HeartbeatEnabled: true, Heartbeat: every}, coord)
		ctx, cancel := context.WithCancel(t.Context())
		var loop sync.WaitGroup
		loop.Go(func() { a.heartbeatLoop(ctx) })
		defer loop.Wait()
		defer cancel()
		advance := func(d time.Duration) {
			clk.Advance(d)
			synctest.Wait()
		}

		synctest.Wait() // the loop waits for its clock
		advance(every - time.Second)
		require.Zero(t, coord.count(), "no heartbeat before the interval passed")
		advance(time.Second)
		require.Equal(t, 1, coord.count(), "a heartbeat once the interval passed on the agent's clock")
		advance(every)
		require.Equal(t, 2, coord.count(), "and one each interval after")
	})
}

// sweptAPI counts the jobs an origin sweep asks about.
type sweptAPI struct {
	fakeAPI
	getMu sync.Mutex
	gets  int
}

func (s *sweptAPI) GetJob(context.Context, string, string) (*fleet.Job, error) {
	s.getMu.Lock()
	defer s.getMu.Unlock()
	s.gets++
	return nil, &api.Error{Status: 404, Code: "not_found"}
}

func (s *sweptAPI) count() int {
	s.getMu.Lock()
	defer s.getMu.Unlock()
	return s.gets
}

// TestSweepOnTheAgentsClock: the factory's own origin sweep runs each
// time its interval passes on the agent's clock, and not before (each
// sweep asks the coordinator about the job whose branch is on origin).
// Before, it ticked on the wall clock.
func TestSweepOnTheAgentsClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const every = 10 * time.Minute
		root := t.TempDir()
		repo := newGitRepo(t, root)
		gitT(t, repo.seed, "push", "--quiet", "origin", "main:"+gitwt.JobBranch("j9"))
		coord := &sweptAPI{}
		a := newGitAgent(t, root, repo, coord, "unused")
		a.cfg.GCInterval = every
		clk := clocktest.New(t0)
		a.clock = clk
		ctx, cancel := context.WithCancel(t.Context())
		var loop sync.WaitGroup
		loop.Go(func() { a.sweepLoop(ctx) })
		defer loop.Wait()
		defer cancel()
		advance := func(d time.Duration) {
			clk.Advance(d)
			synctest.Wait() // and the sweep's git, which is no durable block
		}

		synctest.Wait() // the loop waits for its clock
		advance(every - time.Second)
		require.Zero(t, coord.count(), "no sweep before the interval passed")
		advance(time.Second)
		require.Equal(t, 1, coord.count(), "a sweep once the interval passed on the agent's clock")
		advance(every)
		require.Equal(t, 2, coord.count(), "and one each interval after")
	})
}

// clockedCoord is a fakeCoord that records when, on the agent's clock,
// each checkpoint was recorded and each failure reported.
type clockedCoord struct {
	*fakeCoord
	clk                    *clocktest.Clock
	atMu                   sync.Mutex
	checkpointAt, failedAt []time.Time
}

func (c *clockedCoord) Patch(ctx context.Context, product, id string, p api.PatchRequest) error {
	if p.Checkpoint != nil && p.Stage == nil {
		c.atMu.Lock()
		c.checkpointAt = append(c.checkpointAt, c.clk.Now())
		c.atMu.Unlock()
	}
	return c.fakeCoord.Patch(ctx, product, id, p)
}

func (c *clockedCoord) Fail(ctx context.Context, r api.FailRequest) (*fleet.Job, error) {
	c.atMu.Lock()
	c.failedAt = append(c.failedAt, c.clk.Now())
	c.atMu.Unlock()
	return c.fakeCoord.Fail(ctx, r)
}

func (c *clockedCoord) at() (checkpoints, fails []time.Time) {
	c.atMu.Lock()
	defer c.atMu.Unlock()
	return slices.Clone(c.checkpointAt), slices.Clone(c.failedAt)
}

// heldEngine is an agent on a manual clock whose engine makes a change,
// says so on entered and waits for gate: a run that stays in its engine
// until the test lets it go. Its lease (an hour, renewed every 20 min)
// and its wall budget (an hour) stay out of the way of a few minutes.
func heldEngine(t *testing.T) (*Agent, *clockedCoord, string, string) {
	t.Helper()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	coord := &clockedCoord{fakeCoord: newFakeCoord("j1", "app"), clk: clocktest.New(t0)}
	coord.ttl = time.Hour
	gates := t.TempDir()
	entered, gate := fifo(t, gates, "entered"), fifo(t, gates, "gate")
	a := newGitAgent(t, root, repo, coord, `sh -c 'echo wip > wip.txt; echo up > `+entered+`; cat `+gate+` > /dev/null'`)
	a.cfg.Renew, a.cfg.DefaultWall = 0, time.Hour
	a.clock = coord.clk
	return a, coord, entered, gate
}

// TestPeriodicCheckpointOnTheAgentsClock: while the engine runs, its work
// is checkpointed each time the checkpoint interval passes on the agent's
// clock, and not before. Before, the checkpoint ticker ran on the wall
// clock: the agent's clock drove none of it.
func TestPeriodicCheckpointOnTheAgentsClock(t *testing.T) {
	t.Parallel()
	const every = 10 * time.Minute
	a, coord, entered, gate := heldEngine(t)
	a.cfg.Checkpoint = every
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.NotNil(t, r)
	waitUp(t, entered) // the engine made its change and waits
	coord.clk.Advance(every - time.Second)
	coord.clk.Advance(time.Second)
	require.Eventually(t, func() bool {
		cps, _ := coord.at()
		return len(cps) > 0
	}, 30*time.Second, 10*time.Millisecond, "a checkpoint once the interval passed on the agent's clock")
	cps, _ := coord.at()
	require.Equal(t, []time.Time{t0.Add(every)}, cps, "one checkpoint, once the interval had passed, none before")
	openGate(t, gate)
	require.Equal(t, OutcomeDone, waitRun(t, r, "the run"), "fails: %q", coord.fails)
	a.jobs.Wait()
}

// failingRecv fails every receive, counting them.
type failingRecv struct {
	fakeRecv
	mu       sync.Mutex
	receives int
}

func (f *failingRecv) Receive(context.Context, int, time.Duration) ([]transport.Delivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.receives++
	return nil, errors.New("the bus is down")
}

func (f *failingRecv) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.receives
}

// TestReceiveBackoffOnTheAgentsClock: after a failed receive the loop
// waits its backoff (a second, then two, ...) on the agent's clock before
// it receives again, and not a moment less. Before, the backoff was a
// wall-clock timer: the agent's clock did not drive it.
func TestReceiveBackoffOnTheAgentsClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a, clk := clockAgent(t, config.Config{}, &fakeAPI{})
		recv := &failingRecv{}
		a.recv = recv
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan Outcome, 1)
		go func() { out <- a.loop(ctx) }()
		advance := func(d time.Duration) {
			clk.Advance(d)
			synctest.Wait()
		}

		synctest.Wait() // the first receive failed; the loop backs off
		require.Equal(t, 1, recv.count())
		advance(time.Second - time.Millisecond)
		require.Equal(t, 1, recv.count(), "no receive before the backoff passed")
		advance(time.Millisecond)
		require.Equal(t, 2, recv.count(), "a receive once the backoff passed on the agent's clock")
		advance(2*time.Second - time.Millisecond)
		require.Equal(t, 2, recv.count(), "the backoff doubled")
		advance(time.Millisecond)
		require.Equal(t, 3, recv.count())
		cancel()
		require.Equal(t, OutcomeDone, <-out)
	})
}

// TestWallBudgetOnTheAgentsClock: an engine still running when the job's
// wall budget has passed on the agent's clock is stopped and the job
// failed for its budget, then and not before. Before, the budget was a
// wall-clock deadline (context.WithTimeoutCause): the agent's clock did
// not drive it.
func TestWallBudgetOnTheAgentsClock(t *testing.T) {
	t.Parallel()
	const wall = 10 * time.Minute
	a, coord, entered, gate := heldEngine(t)
	a.cfg.DefaultWall = wall
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.NotNil(t, r)
	waitUp(t, entered) // the engine runs, and would wait for ever
	defer openGate(t, gate)
	coord.clk.Advance(wall - time.Second)
	coord.clk.Advance(time.Second)
	require.Equal(t, OutcomeFailed, waitRun(t, r, "the run past its wall budget on the agent's clock"))
	a.jobs.Wait()
	_, fails := coord.at()
	require.Equal(t, []time.Time{t0.Add(wall)}, fails, "failed once the budget had passed, not before")
	require.Len(t, coord.fakeCoord.fails, 1)
	require.True(t, strings.HasPrefix(coord.fakeCoord.fails[0], "budget_exceeded: wall budget 10m0s exhausted"), coord.fakeCoord.fails[0])
}

// TestWallBudgetCapped: a job's budget.wall longer than the factory's
// FLEET_MAX_WALL (24h unset) gets the cap: its engine is stopped and the
// job failed for its budget once the cap has passed on the agent's clock
// (the reason names the cap), so a job cannot hold a seat for ever.
func TestWallBudgetCapped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		maxWall time.Duration
		want    time.Duration
	}{
		{"FLEET_MAX_WALL", 10 * time.Minute, 10 * time.Minute},
		{"unset", 0, config.DefaultMaxWall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, coord, entered, gate := heldEngine(t)
			a.cfg.MaxWall = tc.maxWall
			coord.job.Budget.Wall = fleet.Duration(1000 * time.Hour)
			r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
			require.NotNil(t, r)
			waitUp(t, entered)
			defer openGate(t, gate)
			coord.clk.Advance(tc.want)
			require.Equal(t, OutcomeFailed, waitRun(t, r, "the run past the factory's cap on its wall budget"))
			a.jobs.Wait()
			_, fails := coord.at()
			require.Equal(t, []time.Time{t0.Add(tc.want)}, fails, "failed when the cap had passed")
			require.Len(t, coord.fakeCoord.fails, 1)
			require.True(t, strings.HasPrefix(coord.fakeCoord.fails[0],
				"budget_exceeded: wall budget "+tc.want.String()+" (the factory's FLEET_MAX_WALL; the job asked for 1000h0m0s) exhausted"), coord.fakeCoord.fails[0])
		})
	}
}

// TestCooldownsOnTheAgentsClock: a rate limit's cooldown is timed on the
// agent's clock, as everything else of the agent is: the heartbeat
// carries it until the engine's reset time has passed on that clock, and
// not after. Before, the cooldowns kept a clock of their own (the
// system's, set apart from the agent's in New), so injecting the agent's
// clock left them on the wall clock.
func TestCooldownsOnTheAgentsClock(t *testing.T) {
	t.Parallel()
	coord := &beatingAPI{}
	a, clk := clockAgent(t, config.Config{HeartbeatEnabled: true, Heartbeat: 20 * time.Second}, coord)
	reset := t0.Add(time.Hour)
	a.cool.limited("claude", reset)
	require.NoError(t, a.heartbeat(t.Context(), fleet.HealthOK))
	require.Equal(t, map[string]time.Time{"engine:claude": reset}, coord.last.Cooldowns,
		"cooling down until the engine's reset, on the agent's clock")
	clk.Advance(time.Hour)
	require.NoError(t, a.heartbeat(t.Context(), fleet.HealthOK))
	require.Nil(t, coord.last.Cooldowns, "over once the reset passed on the agent's clock")
}
