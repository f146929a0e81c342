package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// testSweepPage is the sweep page the tests here set: backlogs of a few
// dozen jobs are then several pages.
const testSweepPage = 5

// sweepEnv is an env whose store counts operations and the job documents
// queries return, with the sweep page shrunk and factory f1 enrolled with
// room for every job.
func sweepEnv(t *testing.T, opts ...envOpt) (*env, *storecount.Store, *itemCounter) {
	t.Helper()
	var counted *storecount.Store
	var items *itemCounter
	e := newEnv(t, append(opts, withStore(func(s store.Store) store.Store {
		counted = storecount.New(s)
		items = &itemCounter{Store: counted}
		return items
	}))...)
	coord.SetSweepPage(e.c, testSweepPage)
	e.factory("f1", seats(1000))
	return e, counted, items
}

// tickCost is what one sweep tick cost: store operations, job documents
// read by queries, and what the sweep returned.
type tickCost struct {
	ops   storecount.Counts
	items int64
	n     int
}

func tick(t *testing.T, counted *storecount.Store, items *itemCounter, sweep func() (int, error)) tickCost {
	t.Helper()
	ops, read := counted.Snapshot(), items.jobItems.Load()
	n, err := sweep()
	require.NoError(t, err)
	return tickCost{ops: counted.Snapshot().Sub(ops), items: items.jobItems.Load() - read, n: n}
}

// TestRedispatchPagesThroughABacklog: a queue of never-dispatched jobs
// larger than the sweep page is routed a page per tick, every job by the
// end of one pass, and a tick costs the same store operations whether the
// queue is 12 or 120 jobs.
func TestRedispatchPagesThroughABacklog(t *testing.T) {
	t.Parallel()
	firstTick := map[int]storecount.Counts{}
	for _, backlog := range []int{12, 120} {
		e, counted, items := sweepEnv(t, withPublisher(&recordingPublisher{}))
		ids := make([]string, backlog)
		for i := range ids {
			ids[i] = e.submit().ID // no change feed here: nothing routes them
		}
		ticks := (backlog + testSweepPage - 1) / testSweepPage
		sent := 0
		for i := range ticks {
			c := tick(t, counted, items, func() (int, error) { return e.c.Redispatch(e.ctx) })
			require.LessOrEqual(t, c.items, int64(testSweepPage), "backlog %d tick %d: job documents read", backlog, i)
			require.LessOrEqual(t, c.n, testSweepPage)
			if i == 0 {
				firstTick[backlog] = c.ops
			}
			sent += c.n
		}
		require.Equal(t, backlog, sent, "one pass routes the whole backlog")
		for _, id := range ids {
			require.Equal(t, "f1", e.job(id).TargetFactoryID, "job %s", id)
		}
	}
	require.Positive(t, firstTick[12].Writes)
	require.Equal(t, firstTick[12], firstTick[120], "a tick costs the same with ten times the queue")
}

// TestRedispatchQuietOnlyAfterAWholePass: a tick whose page, read from
// where the last one stopped, is empty has not seen the jobs before it, so
// it must not mark the sweep quiet; the next tick starts from the top and
// routes the jobs there again.
func TestRedispatchQuietOnlyAfterAWholePass(t *testing.T) {
	t.Parallel()
	e, _, _ := sweepEnv(t, withConfig(feedConfig), withPublisher(&recordingPublisher{}))
	coord.SetSweepPage(e.c, 2)
	fd := &feeder{e: e, c: e.c}
	var ids []string
	for range 4 {
		ids = append(ids, e.submit().ID)
	}
	fd.run() // routed; the messages are lost
	e.clock.Advance(coord.DefaultRedispatchAfter + 1)
	n, err := e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the first page is routed again")
	// The two jobs past the first page are accepted: the rest of the pass
	// finds the queue empty there.
	for _, id := range ids {
		if j := e.job(id); j.DispatchEpoch == 1 {
			_, err := e.c.Accept(e.ctx, "f1", prod, id, j.DispatchEpoch)
			require.NoError(t, err)
		}
	}
	fd.run()
	e.clock.Advance(coord.DefaultRedispatchAfter + 1)
	n, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the end of the pass")
	n, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "a new pass from the top routes the first page again")
}

// leasedBacklog submits n jobs and leases every one to f1.
func leasedBacklog(e *env, n int) []string {
	e.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.submit().ID
	}
	for range ids {
		e.claim("f1")
	}
	return ids
}

// TestReaperReadsOnlyOverdueLeases: with live leases only, a reaper tick
// reads one job document (that some lease exists), not every lease; once
// they expire it reaps a page per tick, all of them within a pass, at the
// same cost per tick whether 12 or 60 leases expired.
func TestReaperReadsOnlyOverdueLeases(t *testing.T) {
	t.Parallel()
	firstTick := map[int]storecount.Counts{}
	for _, backlog := range []int{12, 60} {
		e, counted, items := sweepEnv(t)
		ids := leasedBacklog(e, backlog)
		reap := func() (int, error) { return e.c.Reap(e.ctx) }

		live := tick(t, counted, items, reap)
		require.Zero(t, live.n)
		require.Equal(t, int64(1), live.items, "backlog %d: job documents read by a tick with no lease due", backlog)

		e.clock.Advance(coord.DefaultLeaseTTL)
		reaped := 0
		for i := range (backlog + testSweepPage - 1) / testSweepPage {
			c := tick(t, counted, items, reap)
			require.Equal(t, min(testSweepPage, backlog-reaped), c.n, "backlog %d tick %d: a page reaped", backlog, i)
			require.LessOrEqual(t, c.items, int64(1+2*testSweepPage))
			if i == 0 {
				firstTick[backlog] = c.ops
			}
			reaped += c.n
		}
		require.Equal(t, backlog, reaped)
		for _, id := range ids {
			require.Equal(t, fleet.StageQueued, e.job(id).Stage, "job %s", id)
		}
	}
	require.Equal(t, firstTick[12], firstTick[60], "a tick costs the same with five times the expired leases")
}
