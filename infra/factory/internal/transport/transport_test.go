package transport

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

type fakeClaimer struct {
	mu       sync.Mutex
	queue    []*protocol.Claimed
	calls    int
	fail     error
	released []string
}

func (f *fakeClaimer) Claim(context.Context, api.ClaimRequest) (*protocol.Claimed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return nil, f.fail
	}
	if len(f.queue) == 0 {
		return nil, nil
	}
	c := f.queue[0]
	f.queue = f.queue[1:]
	return c, nil
}

func (f *fakeClaimer) Release(_ context.Context, _, id string, _ api.ReleaseRequest) (*fleet.Job, error) {
	f.released = append(f.released, id)
	return nil, nil
}

func claimedJob(id string) *protocol.Claimed {
	return &protocol.Claimed{Job: &fleet.Job{ID: id, ProductID: "p"}, LeaseEpoch: 1}
}

func TestPollReceive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		queue   []string
		fail    error
		max     int
		want    []string
		wantErr bool
	}{
		{name: "up to max", queue: []string{"a", "b", "c"}, max: 2, want: []string{"a", "b"}},
		{name: "fewer than max", queue: []string{"a"}, max: 3, want: []string{"a"}},
		{name: "nothing within the wait", max: 1},
		{name: "claim error", fail: errors.New("down"), max: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fc := &fakeClaimer{fail: tt.fail}
			for _, id := range tt.queue {
				fc.queue = append(fc.queue, claimedJob(id))
			}
			p := NewPoll(fc, 20*time.Millisecond, clock.System{}, slog.New(slog.DiscardHandler))
			ds, err := p.Receive(context.Background(), tt.max, 100*time.Millisecond)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, d := range ds {
				require.NotNil(t, d.Claimed)
				got = append(got, d.Claimed.Job.ID)
			}
			require.Equal(t, tt.want, got)
			if len(tt.want) == 0 {
				require.Greater(t, fc.calls, 1, "claims again while the wait lasts")
			}
		})
	}
}

func TestPollAbandonReleases(t *testing.T) {
	t.Parallel()
	fc := &fakeClaimer{}
	p := NewPoll(fc, time.Second, clock.System{}, slog.New(slog.DiscardHandler))
	require.NoError(t, p.Complete(context.Background(), Delivery{Claimed: claimedJob("a")}))
	require.NoError(t, p.Abandon(context.Background(), Delivery{Claimed: claimedJob("a")}))
	require.Equal(t, []string{"a"}, fc.released)
}

// fakeBus is a BusClient holding deliveries in memory.
type fakeBus struct {
	mu                         sync.Mutex
	pending                    []bus.Delivery
	completed, abandoned, dead []string
	renewed                    []string
	completeErr, renewErr      error
}

func (f *fakeBus) Receive(_ context.Context, sub string, max int, _ time.Duration) ([]bus.Delivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sub != "f1" {
		return nil, bus.ErrNotFound
	}
	n := min(max, len(f.pending))
	out := f.pending[:n]
	f.pending = f.pending[n:]
	return out, nil
}

func (f *fakeBus) Complete(_ context.Context, d bus.Delivery) error {
	f.completed = append(f.completed, d.ID)
	return f.completeErr
}

func (f *fakeBus) Abandon(_ context.Context, d bus.Delivery) error {
	f.abandoned = append(f.abandoned, d.ID)
	return nil
}

func (f *fakeBus) DeadLetter(_ context.Context, d bus.Delivery, reason string) error {
	f.dead = append(f.dead, d.ID+": "+reason)
	return nil
}

func (f *fakeBus) RenewLock(_ context.Context, d bus.Delivery) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed = append(f.renewed, d.ID)
	return time.Now().Add(time.Minute), f.renewErr
}

func (f *fakeBus) Close(context.Context) error { return nil }

// TestBusDecodes: dispatch and GC messages as the coordinator's Dispatcher
// builds them reach the agent decoded; a malformed message is dead-lettered
// on the way and never returned; settlements map onto the backend, and a
// lost lock is not an error.
func TestBusDecodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	msg := protocol.DispatchMessage{JobID: "j1", ProductID: "p", Repo: "app", TargetFactoryID: "f1", DispatchEpoch: 2}
	dm, err := bus.DispatchToMessage(msg)
	require.NoError(t, err)
	gm, err := bus.GCToMessage(protocol.GCRequest{FactoryID: "f1", Repos: map[string][]string{"app": {"j0"}}}, time.Unix(600, 0))
	require.NoError(t, err)
	junk := bus.Message{ID: "junk", Subscription: "f1", Body: []byte("{"), Properties: map[string]string{bus.PropKind: string(bus.KindDispatch)}}
	alien := bus.Message{ID: "alien", Subscription: "f1", Body: []byte("{}"), Properties: map[string]string{bus.PropKind: "telemetry"}}
	fb := &fakeBus{}
	for _, m := range []bus.Message{dm, junk, gm, alien} {
		fb.pending = append(fb.pending, bus.NewDelivery(m, 1, time.Now(), nil))
	}
	b := NewBus(fb, "f1", slog.New(slog.DiscardHandler))

	got, err := b.Receive(ctx, 10, time.Second)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "j1:2", got[0].ID)
	require.Equal(t, msg, *got[0].Dispatch)
	require.Nil(t, got[0].GC)
	require.Equal(t, []string{"j0"}, got[1].GC.Repos["app"])
	require.Len(t, fb.dead, 2)
	require.Contains(t, fb.dead[0], "junk: ")
	require.Contains(t, fb.dead[1], "alien: ")

	require.NoError(t, b.Abandon(ctx, got[0]))
	require.NoError(t, b.Complete(ctx, got[1]))
	require.Equal(t, []string{"j1:2"}, fb.abandoned)
	require.Equal(t, []string{gm.ID}, fb.completed)

	fb.completeErr = bus.ErrLockLost
	require.NoError(t, b.Complete(ctx, got[0]), "a lost lock only means a redelivery the accept refuses")
	fb.completeErr = errors.New("broker down")
	require.Error(t, b.Complete(ctx, got[0]))

	until, err := b.RenewLock(ctx, got[0])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Minute), until, 10*time.Second)
	require.Equal(t, []string{"j1:2"}, fb.renewed)
	fb.renewErr = bus.ErrLockLost
	_, err = b.RenewLock(ctx, got[0])
	require.ErrorIs(t, err, bus.ErrLockLost, "a lost lock is reported to the keeper")
	_, err = b.RenewLock(ctx, Delivery{ID: "claim:x:1", Claimed: claimedJob("x")})
	require.ErrorIs(t, err, bus.ErrInvalid)

	// A delivery from another transport is not this one's to settle.
	require.NoError(t, b.Complete(ctx, Delivery{ID: "claim:x:1", Claimed: claimedJob("x")}))

	other := NewBus(fb, "nope", slog.New(slog.DiscardHandler))
	_, err = other.Receive(ctx, 1, time.Second)
	require.ErrorIs(t, err, bus.ErrNotFound)
}
