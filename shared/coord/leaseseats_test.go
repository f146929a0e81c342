package coord_test

import (
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/schedule"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// candidate is factory id's entry in the job's /explain.
func (e *env) candidate(jobID, id string) schedule.Candidate {
	e.t.Helper()
	ex, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, jobID)
	require.NoError(e.t, err)
	for _, c := range ex.Schedule.Candidates {
		if c.FactoryID == id {
			return c
		}
	}
	e.t.Fatalf("factory %s is not a candidate for %s", id, jobID)
	return schedule.Candidate{}
}

// TestLeasesFillSeatsBeforeAHeartbeat (issue 29): a one-seat factory that
// claimed a job and has not heartbeated since (it reported load 0) is full
// to the scheduler: the leases the coordinator granted count, whether this
// process granted the lease or another did (seen once the factory list is
// refreshed). A critical job is not dispatched to it and preempts the low
// job at once; /explain shows both counts.
func TestLeasesFillSeatsBeforeAHeartbeat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		peer  bool // another process grants the lease
		delay time.Duration
	}{
		{"granted here", false, 0},
		{"granted by another process", true, 2 * coord.DefaultFactoryCacheTTL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, pub := dispatchEnv(t)
			e.factory("fp", seats(1))
			low := e.submit("priority: low")
			// The factory list is in this process's cache before the claim.
			_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, low.ID))
			require.NoError(t, err)
			claimer := e.c
			if tt.peer {
				claimer = e.peer()
			}
			cl, err := claimer.Claim(e.ctx, e.as("fp"))
			require.NoError(t, err)
			require.NotNil(t, cl)
			require.Equal(t, low.ID, cl.Job.ID)
			e.clock.Advance(tt.delay)

			crit := e.submit("priority: critical", "title: hotfix")
			ds, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, crit.ID))
			require.NoError(t, err)
			require.Len(t, ds, 1)
			require.Empty(t, ds[0].Target, "a factory whose leases fill its seats gets no dispatch")
			require.Contains(t, string(ds[0].Skipped), "no free seat")
			for _, m := range pub.sent() {
				require.NotEqual(t, crit.ID, m.JobID, "the critical job was published to %s", m.TargetFactoryID)
			}
			require.True(t, e.job(low.ID).PreemptRequested, "the counted seat triggers the preemption")

			c := e.candidate(crit.ID, "fp")
			require.False(t, c.Eligible)
			require.Equal(t, "no free seat (leases 1, reported 0 of 1)", c.Reason)
			require.Equal(t, 1, c.Leases)
			require.Equal(t, 0, c.Reported)
			require.Equal(t, 1, c.Load)
		})
	}
}

// TestTwoDispatchesOneBatchOneSeat: two jobs in one change-feed batch and
// one one-seat factory: the first dispatch takes the seat until the job is
// taken, so the second is not sent there; with a second one-seat factory
// the two jobs go one to each. The first job's own /explain still shows
// its target eligible.
func TestTwoDispatchesOneBatchOneSeat(t *testing.T) {
	t.Parallel()
	e, pub := dispatchEnv(t)
	e.factory("fa", seats(1))
	a, b := e.submit("title: a"), e.submit("title: b")
	ds, err := e.c.DispatchChanged(e.ctx, e.feed("").Items)
	require.NoError(t, err)
	targets := map[string]string{}
	for _, d := range ds {
		targets[d.JobID] = d.Target
	}
	require.Equal(t, map[string]string{a.ID: "fa", b.ID: ""}, targets, "decisions %+v", ds)
	require.Len(t, pub.sent(), 1)
	c := e.candidate(b.ID, "fa")
	require.Equal(t, "no free seat (leases 0, dispatched 1, reported 0 of 1)", c.Reason)
	require.True(t, e.candidate(a.ID, "fa").Eligible, "a job's own dispatch takes no seat from it")

	// The dispatch taken, it is a lease; a second factory takes the other.
	_, err = e.c.Accept(e.ctx, "fa", prod, a.ID, e.job(a.ID).DispatchEpoch)
	require.NoError(t, err)
	require.Equal(t, "no free seat (leases 1, reported 0 of 1)", e.candidate(b.ID, "fa").Reason)
	e.factory("fb", seats(1))
	require.Equal(t, "fb", e.job(b.ID).TargetFactoryID, "enrolling fb retries the waiting job")

	e2, _ := dispatchEnv(t)
	e2.factory("fa", seats(1))
	e2.factory("fb", seats(1))
	a, b = e2.submit("title: a"), e2.submit("title: b")
	_, err = e2.c.DispatchChanged(e2.ctx, e2.feed("").Items)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"fa", "fb"}, []string{e2.job(a.ID).TargetFactoryID, e2.job(b.ID).TargetFactoryID})
}

// TestElasticPoolTargetedByCountedSeats: an elastic pool heartbeats no
// load (its executions come and go), so its seats are what the
// coordinator granted: two runs fill a two-seat pool and a third job
// waits with "leases 2, reported 0"; a run ending frees a seat and the
// waiting job goes to the pool.
func TestElasticPoolTargetedByCountedSeats(t *testing.T) {
	t.Parallel()
	e, _ := dispatchEnv(t)
	e.factory("pool", kind(fleet.KindElastic), seats(2))
	var runs []int64
	var ids []string
	for i := range 2 {
		j := e.submit("title: run " + string(rune('a'+i)))
		_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
		require.NoError(t, err)
		got := e.job(j.ID)
		require.Equal(t, "pool", got.TargetFactoryID)
		cl, err := e.c.Accept(e.ctx, "pool", prod, j.ID, got.DispatchEpoch)
		require.NoError(t, err)
		runs, ids = append(runs, cl.LeaseEpoch), append(ids, j.ID)
	}
	e.clock.Advance(4 * time.Minute) // no heartbeat: a pool stays ok; its runs renew
	for i, id := range ids {
		_, err := e.c.Renew(e.ctx, "pool", prod, id, runs[i])
		require.NoError(t, err)
	}
	third := e.submit("title: third")
	ds, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, third.ID))
	require.NoError(t, err)
	require.Empty(t, ds[0].Target)
	require.Equal(t, "no free seat (leases 2, reported 0 of 2)", e.candidate(third.ID, "pool").Reason)

	// A run given back frees its seat: one of the two queued jobs (the
	// released one and the third) goes to the pool, the other waits.
	_, err = e.c.Release(e.ctx, "pool", prod, ids[0], runs[0])
	require.NoError(t, err)
	_, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	targets := []string{e.job(ids[0]).TargetFactoryID, e.job(third.ID).TargetFactoryID}
	require.ElementsMatch(t, []string{"pool", ""}, targets, "one freed seat, one dispatch")
}

// TestCountedSeatsStoreCost measures what counting seats costs: the store
// operations of one job's dispatch, claim and release, and of an idle
// redispatch tick. It prints them (go test -v -run TestCountedSeatsStoreCost).
func TestCountedSeatsStoreCost(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	e, _ := dispatchEnv(t, countingStore(&counted))
	e.factory("f1", seats(1))
	e.clock.Advance(2 * coord.DefaultFactoryCacheTTL)
	before := counted.Snapshot()
	j := e.submit()
	_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
	require.NoError(t, err)
	got := e.job(j.ID)
	cl, err := e.c.Accept(e.ctx, "f1", prod, j.ID, got.DispatchEpoch)
	require.NoError(t, err)
	_, err = e.c.Release(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	life := counted.Snapshot().Sub(before)
	t.Logf("one lifecycle (submit, dispatch, accept, release): %+v", life)

	e.clock.Advance(time.Minute)
	_, err = e.c.Redispatch(e.ctx) // the job is queued again: routes it
	require.NoError(t, err)
	_, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	e.clock.Advance(time.Minute)
	before = counted.Snapshot()
	_, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	t.Logf("one redispatch tick: %+v", counted.Snapshot().Sub(before))

	// Idle, with the change feed on (as deployed): nothing queued, the
	// sweep's quiet check returns before it lists factories, so counting
	// seats adds nothing.
	var idle *storecount.Store
	e2, _ := dispatchEnv(t, withConfig(feedConfig), countingStore(&idle))
	e2.factory("f1")
	for range 2 {
		_, err = e2.c.Redispatch(e2.ctx)
		require.NoError(t, err)
		e2.clock.Advance(time.Minute)
	}
	before = idle.Snapshot()
	_, err = e2.c.Redispatch(e2.ctx)
	require.NoError(t, err)
	quiet := idle.Snapshot().Sub(before)
	t.Logf("one idle redispatch tick: %+v", quiet)
	require.Zero(t, quiet.Queries, "an idle tick queries nothing")
}
