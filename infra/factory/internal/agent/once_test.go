package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// lockingRecv hands out one bus-like delivery whose lock lasts lock unless
// renewed, and records settlements and renewals, each with what the
// coordinator's job looked like then.
type lockingRecv struct {
	mu        sync.Mutex
	d         *transport.Delivery
	lock      time.Duration
	until     time.Time
	renews    int
	lapsed    bool
	completed []fleet.Stage // the job's stage at each complete
	abandoned int
	stage     func() fleet.Stage
}

func (r *lockingRecv) Receive(context.Context, int, time.Duration) ([]transport.Delivery, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.d == nil {
		return nil, nil
	}
	d := *r.d
	r.d = nil
	r.until = time.Now().Add(r.lock)
	d.LockedUntil = r.until
	return []transport.Delivery{d}, nil
}

func (r *lockingRecv) RenewLock(context.Context, transport.Delivery) (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renews++
	if time.Now().After(r.until) {
		r.lapsed = true
	}
	r.until = time.Now().Add(r.lock)
	return r.until, nil
}

func (r *lockingRecv) Complete(context.Context, transport.Delivery) error {
	st := r.stage()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.completed = append(r.completed, st)
	return nil
}

func (r *lockingRecv) Abandon(context.Context, transport.Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.abandoned++
	return nil
}

func (r *lockingRecv) Close(context.Context) error { return nil }

func (r *lockingRecv) state() (renews int, completed []fleet.Stage, lapsed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renews, append([]fleet.Stage(nil), r.completed...), r.lapsed
}

// acceptingCoord is fakeCoord whose Accept hands the job to f1.
type acceptingCoord struct{ *fakeCoord }

func (c acceptingCoord) Accept(context.Context, api.AcceptRequest) (*protocol.Claimed, error) {
	return c.claim(), nil
}

// TestOnceHoldsDispatchForTheRun: an elastic execution (--once on a bus)
// keeps its dispatch message locked, renewing it, for its whole run and
// completes it only once the job has shipped, so the pool's scaler counts
// the running job in the subscription's active messages.
func TestOnceHoldsDispatchForTheRun(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	started, gate := fifo(t, t.TempDir(), "started"), fifo(t, t.TempDir(), "gate")
	engine := `sh -c 'echo up > ` + started + `; cat ` + gate + ` > /dev/null; echo done > result.txt'`
	coord := newFakeCoord("j1", "app")
	a := newGitAgent(t, root, repo, acceptingCoord{coord}, engine)
	a.cfg.Once, a.cfg.OnceWait = true, time.Second
	msg := protocol.DispatchMessage{JobID: "j1", ProductID: "p", Repo: "app", TargetFactoryID: "f1", DispatchEpoch: 1}
	const lock = 300 * time.Millisecond
	recv := &lockingRecv{d: &transport.Delivery{ID: msg.MessageID(), Dispatch: &msg}, lock: lock,
		stage: func() fleet.Stage { j, _ := coord.GetJob(context.Background(), "p", "j1"); return j.Stage }}
	a.recv = recv

	out := make(chan Outcome, 1)
	go func() { out <- a.runOnce(context.Background()) }()
	up, err := os.Open(started)
	require.NoError(t, err)
	_, _ = io.ReadAll(up)
	up.Close()
	// The engine runs for several lock durations: the message stays
	// locked and unsettled all along.
	require.Eventually(t, func() bool { n, _, _ := recv.state(); return n >= 4 }, 20*time.Second, 10*time.Millisecond)
	_, completed, lapsed := recv.state()
	require.Empty(t, completed, "the dispatch message is not completed while its job runs")
	require.False(t, lapsed, "every renewal came before the lock lapsed")

	openGate(t, gate)
	select {
	case o := <-out:
		require.Equal(t, OutcomeDone, o, "fails: %q", coord.fails)
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end")
	}
	renews, completed, _ := recv.state()
	require.Equal(t, []fleet.Stage{fleet.StageShipped}, completed, "completed once, after the job shipped")
	require.Zero(t, recv.abandoned)
	require.GreaterOrEqual(t, renews, 4)
}

// TestOnceRedeliveredHeldDispatchIsNotAdopted: a held dispatch delivered
// again (the first execution's lock lapsed: it crashed or could not renew)
// finds its job assigned to this pool's factory id. That may be another
// live execution's run, so it is not adopted: the lock is released, the
// message completed, nothing runs; if the holder is gone, the reaper and
// the redispatch recover the job.
func TestOnceRedeliveredHeldDispatchIsNotAdopted(t *testing.T) {
	t.Parallel()
	msg := protocol.DispatchMessage{JobID: "j1", ProductID: "p", TargetFactoryID: "f1", DispatchEpoch: 4}
	assigned := &fleet.Job{ID: "j1", ProductID: "p", Stage: fleet.StageAssigned, HolderFactoryID: "f1", DispatchEpoch: 4, LeaseEpoch: 7}
	api := &fakeAPI{acceptErr: &api.Error{Status: 409, Code: "conflict"}, job: assigned}
	recv := &lockingRecv{lock: time.Minute, stage: func() fleet.Stage { return assigned.Stage },
		d: &transport.Delivery{ID: msg.MessageID(), Dispatch: &msg, Redelivered: true}}
	a := New(Deps{Config: config.Config{FactoryID: "f1", Seats: 1, Once: true},
		API: api, Receiver: recv, Log: slog.New(slog.DiscardHandler)})
	require.NotNil(t, a.adopt(context.Background(), msg), "a first delivery would adopt this job")

	require.Equal(t, OutcomeDone, a.runOnce(context.Background()))
	require.Equal(t, 1, api.accepts)
	_, completed, _ := recv.state()
	require.Len(t, completed, 1, "the stale message is completed")
	require.Zero(t, a.load(), "nothing runs")
}

// pollRecv is a receiver without locks (the poll transport's shape).
type pollRecv struct{ fakeRecv }

// TestHoldsLock: only an elastic execution's dispatch on a bus with
// per-message locks is held for the run; a static factory, a GC request,
// the poll transport and Service Bus sessions complete on claim.
func TestHoldsLock(t *testing.T) {
	t.Parallel()
	msg := protocol.DispatchMessage{JobID: "j1", ProductID: "p", TargetFactoryID: "f1", DispatchEpoch: 1}
	dispatch := transport.Delivery{ID: "j1:1", Dispatch: &msg}
	gc := transport.Delivery{ID: "gc:f1:1", GC: &protocol.GCRequest{FactoryID: "f1"}}
	tests := []struct {
		name string
		cfg  config.Config
		recv transport.Receiver
		d    transport.Delivery
		want bool
	}{
		{name: "elastic on nats", cfg: config.Config{Once: true, Transport: config.TransportNATS}, recv: &lockingRecv{}, d: dispatch, want: true},
		{name: "elastic on service bus", cfg: config.Config{Once: true, Transport: config.TransportServiceBus}, recv: &lockingRecv{}, d: dispatch, want: true},
		{name: "service bus sessions", cfg: config.Config{Once: true, Transport: config.TransportServiceBus, ServiceBusSessions: true}, recv: &lockingRecv{}, d: dispatch},
		{name: "static factory", cfg: config.Config{Transport: config.TransportNATS}, recv: &lockingRecv{}, d: dispatch},
		{name: "gc request", cfg: config.Config{Once: true, Transport: config.TransportNATS}, recv: &lockingRecv{}, d: gc},
		{name: "poll transport", cfg: config.Config{Once: true, Transport: config.TransportPoll}, recv: &pollRecv{}, d: dispatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := New(Deps{Config: tt.cfg, API: &fakeAPI{}, Receiver: tt.recv, Log: slog.New(slog.DiscardHandler)})
			_, got := a.holdsLock(tt.d)
			require.Equal(t, tt.want, got)
		})
	}
}
