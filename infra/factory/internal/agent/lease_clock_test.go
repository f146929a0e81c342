package agent

import (
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// TestLeaseKeptOnTheAgentsClock: a run's lease is renewed, and lost, by
// the agent's clock: a renewal each interval as the clock passes it, none
// before; with renewals failing, the run stops (lease lost) exactly a
// whole lease length after the last renewal that succeeded began, not a
// moment before. Before, the keeper read the wall clock: the agent's
// clock drove none of it.
func TestLeaseKeptOnTheAgentsClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g, err := gitwt.New(gitwt.Options{WorkDir: t.TempDir()})
		require.NoError(t, err)
		coord := &stalledStart{released: make(chan api.ReleaseRequest, 1)}
		const every, ttl = 20 * time.Second, time.Minute
		t0 := time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC)
		clk := clocktest.New(t0)
		a := New(Deps{Config: config.Config{FactoryID: "f1", Seats: 1, WorkDir: t.TempDir(), Renew: every},
			API: coord, Receiver: &fakeRecv{}, Git: g, Log: slog.New(slog.DiscardHandler), Clock: clk})
		cl := &protocol.Claimed{Job: &fleet.Job{ID: "j1", ProductID: "p", Repo: "app", LeaseAcquiredAt: t0},
			LeaseEpoch: 1, LeaseExpiresAt: t0.Add(ttl)}
		r := a.start(t.Context(), cl, clk.Now())
		require.NotNil(t, r)
		defer a.jobs.Wait()
		defer r.cancel(errShutdown)
		renews := func() int {
			coord.mu.Lock()
			defer coord.mu.Unlock()
			return coord.renews
		}
		advance := func(d time.Duration) {
			clk.Advance(d)
			synctest.Wait()
		}

		synctest.Wait() // the run waits for its start; the keeper for its clock
		advance(every - time.Second)
		require.Zero(t, renews(), "no renewal before the interval passed")
		advance(time.Second)
		require.Equal(t, 1, renews(), "a renewal once the interval passed on the agent's clock")
		advance(every)
		require.Equal(t, 2, renews(), "and one each interval after")

		// The coordinator stops answering: the last renewal that succeeded
		// began at t0+40s, so the lease is lost at t0+100s.
		coord.mu.Lock()
		coord.renewErr = errors.New("connection refused")
		coord.mu.Unlock()
		advance(every)
		advance(every)
		advance(every - time.Second)
		require.Equal(t, 4, renews())
		select {
		case <-r.done:
			t.Fatalf("the run stopped (%s) before its lease could have run out", r.outcome)
		default:
		}
		advance(time.Second)
		select {
		case <-r.done:
			require.Equal(t, OutcomeFenced, r.outcome, "lease lost: nothing reported, the work quarantined")
		default:
			t.Fatal("the lease was not lost a whole lease length after the last renewal, on the agent's clock")
		}
		require.Empty(t, coord.released)
	})
}
