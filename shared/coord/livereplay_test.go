package coord_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/live"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// TestReplayReachesPastTheRing: a product stream resumed from a position
// taken before a job changed many times (its ring let the older events go
// to the events container meanwhile) replays every event after the
// position, in order, each once, none from before it; a peer process, which
// never saw the job, replays the same.
func TestReplayReachesPastTheRing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j, epoch := e.runJob() // events 1-3
	// Events 1-3 are older than the position's time mark (its read less a
	// minute): they were passed on before it and do not come again.
	e.clock.Advance(2 * time.Minute)
	sub, err := e.c.Subscribe(e.ctx, live.Watch{ProductID: prod})
	require.NoError(t, err)
	from := sub.Start
	sub.Close()
	const reports = 20 // events 4-23: the ring keeps 4 to 8 of them
	for i := range reports {
		_, err := e.c.ReportUsage(e.ctx, "f1", prod, j.ID, admission.UsageRequest{LeaseEpoch: epoch, Usage: fleet.Usage{USD: float64(i + 1)}})
		require.NoError(t, err)
	}
	require.Greater(t, e.job(j.ID).Recent()[0].Seq, int64(4), "the ring let events after the position go")

	for _, c := range []*coord.Coordinator{e.c, e.peer()} {
		var seqs []int64
		_, err := c.Replay(e.ctx, from, prod, func(chs []live.Change, _ live.Position) error {
			for _, ch := range chs {
				if ch.Event != nil && ch.Event.JobID == j.ID {
					seqs = append(seqs, ch.Event.Seq)
				}
			}
			return nil
		})
		require.NoError(t, err)
		want := make([]int64, 0, reports)
		for s := int64(4); s <= 3+reports; s++ {
			want = append(want, s)
		}
		require.Equal(t, want, seqs)
	}
}

// eventsQueryFails fails the next query of the events container while
// armed, as a throttled store would.
type eventsQueryFails struct {
	store.Store
	armed atomic.Bool
}

func (s *eventsQueryFails) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	if container == store.Events && s.armed.CompareAndSwap(true, false) {
		return store.Page{}, store.ErrThrottled
	}
	return s.Store.Query(ctx, container, q)
}

// TestReplayStoreFailureLosesNothing: when the read of a job's archived
// events fails (the store throttles), the replay fails without passing
// the page on, and is not taken as an undecodable change skipped: from
// the position it returns, a second replay gives every event.
func TestReplayStoreFailureLosesNothing(t *testing.T) {
	t.Parallel()
	var fails *eventsQueryFails
	e := newEnv(t, withStore(func(s store.Store) store.Store { fails = &eventsQueryFails{Store: s}; return fails }))
	e.factory("f1")
	j, epoch := e.runJob()
	e.clock.Advance(2 * time.Minute)
	sub, err := e.c.Subscribe(e.ctx, live.Watch{ProductID: prod})
	require.NoError(t, err)
	from := sub.Start
	sub.Close()
	const reports = 20
	for i := range reports {
		_, err := e.c.ReportUsage(e.ctx, "f1", prod, j.ID, admission.UsageRequest{LeaseEpoch: epoch, Usage: fleet.Usage{USD: float64(i + 1)}})
		require.NoError(t, err)
	}
	var seqs []int64
	replay := func(from live.Position) (live.Position, error) {
		return e.c.Replay(e.ctx, from, prod, func(chs []live.Change, _ live.Position) error {
			for _, ch := range chs {
				if ch.Event != nil && ch.Event.JobID == j.ID {
					seqs = append(seqs, ch.Event.Seq)
				}
			}
			return nil
		})
	}
	fails.armed.Store(true)
	at, err := replay(from)
	require.ErrorIs(t, err, store.ErrThrottled)
	require.Empty(t, seqs, "the failed page was not passed on")
	_, err = replay(at)
	require.NoError(t, err)
	want := make([]int64, 0, reports)
	for s := int64(4); s <= 3+reports; s++ {
		want = append(want, s)
	}
	require.Equal(t, want, seqs)
}
