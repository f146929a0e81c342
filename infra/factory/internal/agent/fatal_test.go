package agent

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// waitingRecv hands out its first deliveries at the first receive, then
// waits as a bus receive does: until its wait passes or its context ends.
type waitingRecv struct {
	fakeRecv
	first []transport.Delivery
}

func (r *waitingRecv) Receive(ctx context.Context, _ int, wait time.Duration) ([]transport.Delivery, error) {
	if ds := r.first; ds != nil {
		r.first = nil
		return ds, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, nil
	}
}

// TestFatalStopsTheLoopAtOnce: a refused heartbeat (the token revoked, the
// factory deregistered) stops the loop at once, whatever it waits on: a
// seat while every seat is taken (a poll factory, or a bus factory with
// a dispatch parked per seat), or a receive. Before, the loop looked for
// it only between receives: with every seat taken it waited for a seat
// first, so a deregistered factory went on running and claiming.
func TestFatalStopsTheLoopAtOnce(t *testing.T) {
	t.Parallel()
	parked := protocol.DispatchMessage{JobID: "j2", ProductID: "p", TargetFactoryID: "f1", DispatchEpoch: 1}
	tests := []struct {
		name      string
		transport string
		seats     int
		first     []transport.Delivery // what the first receive hands out
		abandoned []string             // the parked dispatches given back
	}{
		{name: "poll factory, every seat taken", transport: config.TransportPoll, seats: 1},
		{name: "bus factory, every seat taken and a dispatch parked", transport: config.TransportServiceBus, seats: 1,
			first: []transport.Delivery{{ID: "d2", Dispatch: &parked}}, abandoned: []string{"d2"}},
		{name: "bus factory, receiving", transport: config.TransportServiceBus, seats: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				recv := &waitingRecv{first: tt.first}
				a := New(Deps{Config: config.Config{FactoryID: "f1", Seats: tt.seats, Transport: tt.transport, Poll: time.Minute},
					API: &fakeAPI{}, Receiver: recv, Log: slog.New(slog.DiscardHandler)})
				a.running["j1"] = &jobRun{id: "j1", epoch: 1, dispatchEpoch: 1}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				out := make(chan Outcome, 1)
				go func() { out <- a.loop(ctx) }()
				synctest.Wait() // the loop waits
				start := time.Now()
				a.fatal <- errors.New("heartbeat refused: 403 forbidden")
				synctest.Wait()
				select {
				case got := <-out:
					require.Equal(t, OutcomeError, got)
					require.Zero(t, time.Since(start), "the loop stopped at once, not once its wait was over")
					require.Equal(t, tt.abandoned, recv.abandoned)
				default:
					cancel()
					<-out
					t.Fatal("a refused heartbeat did not stop the loop while it waited")
				}
			})
		})
	}
}

// stalledStart is a coordinator whose first stage change (building) hangs
// until its context ends, so a run started stays in flight; it records
// the releases.
type stalledStart struct {
	fakeAPI
	released chan api.ReleaseRequest
}

func (s *stalledStart) Patch(ctx context.Context, _, _ string, _ api.PatchRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s *stalledStart) Release(_ context.Context, _, _ string, r api.ReleaseRequest) (*fleet.Job, error) {
	s.released <- r
	return &fleet.Job{}, nil
}

// TestFatalStopsOnce: a refused heartbeat (the token revoked, the factory
// deregistered) stops a --once execution as it stops the loop: at once,
// whatever it waits on (the message, or its job, which is checkpointed
// and released as on a shutdown), with OutcomeError, its exit status.
// Before, runOnce never looked at the fatal condition: it waited out its
// receive, or ran its job to the end, and exited as if all was well.
func TestFatalStopsOnce(t *testing.T) {
	t.Parallel()
	claimed := &protocol.Claimed{Job: &fleet.Job{ID: "j1", ProductID: "p", Repo: "app"}, LeaseEpoch: 1}
	tests := []struct {
		name     string
		first    []transport.Delivery
		released bool // the job was released
	}{
		{name: "waiting for its message"},
		{name: "running its job", first: []transport.Delivery{{ID: "claim:j1:1", Claimed: claimed}}, released: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g, err := gitwt.New(gitwt.Options{WorkDir: t.TempDir()})
				require.NoError(t, err)
				coord := &stalledStart{released: make(chan api.ReleaseRequest, 1)}
				a := New(Deps{Config: config.Config{FactoryID: "f1", Seats: 1, Once: true, OnceWait: time.Minute, WorkDir: t.TempDir()},
					API: coord, Receiver: &waitingRecv{first: tt.first}, Git: g, Log: slog.New(slog.DiscardHandler)})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				out := make(chan Outcome, 1)
				go func() { out <- a.runOnce(ctx) }()
				synctest.Wait() // waiting for a message, or for its job
				require.Equal(t, len(tt.first), a.load())
				start := time.Now()
				a.fatal <- errors.New("heartbeat refused: 401 unauthorized")
				synctest.Wait()
				select {
				case got := <-out:
					require.Equal(t, OutcomeError, got)
					require.Zero(t, time.Since(start), "--once stopped at once, not once its wait or its job was over")
					require.Equal(t, tt.released, len(coord.released) == 1, "the job is released as on a shutdown")
				default:
					cancel()
					<-out
					t.Fatal("a refused heartbeat did not stop --once")
				}
			})
		})
	}
}
