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
