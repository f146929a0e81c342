package coord_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// TestSeatRefreshReadsOnlyChanges (issue 25): refreshing the scheduler's
// factory list reads the jobs changed since the last refresh from the
// change feed instead of querying every leased job again, so a dispatch
// that refreshes costs the same with 250 jobs leased as with one (the
// query took 3 pages at 250, 20 at 2,000). Leases another process grants
// or ends in between are still counted.
func TestSeatRefreshReadsOnlyChanges(t *testing.T) {
	t.Parallel()
	refreshCost := func(t *testing.T, leased int) storecount.Counts {
		var counted *storecount.Store
		e, _ := dispatchEnv(t, countingStore(&counted))
		e.factory("f1", seats(leased+10))
		for range leased {
			j := e.submit()
			_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
			require.NoError(t, err)
			_, err = e.c.Accept(e.ctx, "f1", prod, j.ID, e.job(j.ID).DispatchEpoch)
			require.NoError(t, err)
		}
		// A peer (another process, unseen by this one's cache) takes one
		// more lease and ends one of this process's.
		peer := e.peer()
		extra := e.submit()
		_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, extra.ID))
		require.NoError(t, err)
		e.clock.Advance(2 * coord.DefaultFactoryCacheTTL)
		_, err = peer.Accept(e.ctx, "f1", prod, extra.ID, e.job(extra.ID).DispatchEpoch)
		require.NoError(t, err)
		first := e.feed("").Items[0].ID
		_, err = peer.Release(e.ctx, "f1", prod, first, e.job(first).LeaseEpoch)
		require.NoError(t, err)

		e.clock.Advance(2 * coord.DefaultFactoryCacheTTL)
		j, cost := e.dispatchNewJob(counted)
		// The peer's grant and release are both counted: the one extra
		// lease replaces the one ended.
		require.Equal(t, leased, e.candidate(j.ID, "f1").Leases)
		return cost
	}
	one, many := refreshCost(t, 1), refreshCost(t, 250)
	t.Logf("a dispatch that refreshes the factory list: %+v with 1 job leased, %+v with 250", one, many)
	require.Equal(t, one.Queries, many.Queries, "the refresh's queries do not grow with the leased jobs")
	require.Equal(t, one.FeedReads, many.FeedReads)
}

// TestSeatRefreshAfterAPauseQueriesLeases: after a minute without a
// refresh the change feed may hold more jobs than there are leases, so the
// refresh queries the leased jobs again; a lease a peer granted meanwhile
// is counted either way.
func TestSeatRefreshAfterAPauseQueriesLeases(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	e, _ := dispatchEnv(t, countingStore(&counted))
	e.factory("f1", seats(5))
	j := e.submit()
	_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
	require.NoError(t, err)
	_, err = e.peer().Accept(e.ctx, "f1", prod, j.ID, e.job(j.ID).DispatchEpoch)
	require.NoError(t, err)

	e.clock.Advance(2 * time.Minute)
	next, cost := e.dispatchNewJob(counted)
	require.Equal(t, int64(2), cost.Queries, "the factories and the leased jobs: %+v", cost)
	require.Equal(t, 1, e.candidate(next.ID, "f1").Leases)
}

// dispatchNewJob submits a job and dispatches it from the feed, returning
// it and the store operations of its dispatch.
func (e *env) dispatchNewJob(counted *storecount.Store) (*fleet.Job, storecount.Counts) {
	e.t.Helper()
	j := e.submit()
	before := counted.Snapshot()
	_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
	require.NoError(e.t, err)
	return j, counted.Snapshot().Sub(before)
}
