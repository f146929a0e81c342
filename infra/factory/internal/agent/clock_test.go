package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
)

// t0 is where the tests' manual clocks start.
var t0 = time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC)

// beatingAPI counts heartbeats and answers each with err.
type beatingAPI struct {
	fakeAPI
	hbMu  sync.Mutex
	beats int
	err   error
}

func (b *beatingAPI) Heartbeat(context.Context, api.HeartbeatRequest) (*fleet.Factory, error) {
	b.hbMu.Lock()
	defer b.hbMu.Unlock()
	b.beats++
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
	a := New(cfg, coord, &fakeRecv{}, nil, caps.Env{}, slog.New(slog.DiscardHandler))
	a.detected = &caps.Result{}
	clk := clocktest.New(t0)
	a.clock = clk
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
