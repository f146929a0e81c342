package coord_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// capSeats sets p1's seat cap (its repos unchanged).
func (e *env) capSeats(n int) *fleet.Product {
	e.t.Helper()
	p, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Name: "Product one", Repos: []string{repo, "api"}, MaxRunning: n})
	require.NoError(e.t, err)
	return p
}

func (e *env) product() *fleet.Product {
	e.t.Helper()
	p, err := e.c.GetProduct(e.ctx, prod)
	require.NoError(e.t, err)
	return p
}

func (e *env) seatCap(jobID string) *fleet.Hold {
	e.t.Helper()
	ex, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, jobID)
	require.NoError(e.t, err)
	return ex.SeatCap
}

// TestSeatCapClaimRace: 32 claimers race for 10 jobs of a product with
// maxRunning 3 (and seats to spare on every factory): exactly 3 are
// assigned, and the product counts 3 seats.
func TestSeatCapClaimRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.capSeats(3)
	for range 10 {
		e.submit()
	}
	const claimers = 32
	for i := range claimers {
		e.factory(factoryName(i))
	}
	var mu sync.Mutex
	won := map[string]string{}
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			for {
				cl, err := e.c.Claim(e.ctx, e.as(factoryName(i)))
				if errors.Is(err, fleet.ErrConflict) {
					continue // a CAS lost too often: the client retries
				}
				require.NoError(t, err)
				if cl != nil {
					mu.Lock()
					won[cl.Job.ID] = factoryName(i)
					mu.Unlock()
				}
				return
			}
		})
	}
	wg.Wait()
	require.Len(t, won, 3)
	require.Equal(t, 3, e.product().Running())
	assigned, _, err := e.c.ListJobs(e.ctx, prod, fleet.StageAssigned, 100, "")
	require.NoError(t, err)
	require.Len(t, assigned, 3)
}

// TestSeatCapFreedOnEveryLeaseEnd: with maxRunning 1 the second job waits
// (queued, /explain names seat_cap with running/max) and flows the moment
// the seat frees, whichever way the lease ends: ship, fail, release,
// operator requeue, reap.
func TestSeatCapFreedOnEveryLeaseEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(e *env, id string, epoch int64)
	}{
		{"ship", func(e *env, id string, epoch int64) { e.shipWith("f1", &fleetClaim{id: id, epoch: epoch}, 0) }},
		{"fail", func(e *env, id string, epoch int64) {
			_, err := e.c.Fail(e.ctx, "f1", prod, id, coord.FailRequest{LeaseEpoch: epoch, Reason: "broke"})
			require.NoError(e.t, err)
		}},
		{"release", func(e *env, id string, epoch int64) {
			_, err := e.c.Release(e.ctx, "f1", prod, id, epoch)
			require.NoError(e.t, err)
		}},
		{"cancel", func(e *env, id string, epoch int64) {
			// No factory answers: the cancel is forced after the grace.
			_, err := e.c.Act(e.ctx, "op", prod, id, coord.ActionCancel, "")
			require.NoError(e.t, err)
			e.clock.Advance(time.Hour)
			e.beat(e.mustTok("f1"))
			_, err = e.c.Reap(e.ctx)
			require.NoError(e.t, err)
		}},
		{"reap", func(e *env, _ string, _ int64) {
			e.clock.Advance(e.c.Config().LeaseTTL + time.Second)
			e.beat(e.mustTok("f1"))
			n, err := e.c.Reap(e.ctx)
			require.NoError(e.t, err)
			require.Equal(e.t, 1, n)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			e.capSeats(1)
			a, b := e.submit(), e.submit()
			cl := e.claim("f1")
			waiting := b.ID
			if cl.Job.ID == b.ID {
				waiting = a.ID
			}
			none, err := e.c.Claim(e.ctx, e.as("f1"))
			require.NoError(t, err)
			require.Nil(t, none, "the one seat is taken")
			h := e.seatCap(waiting)
			require.NotNil(t, h)
			require.Equal(t, fleet.HoldSeatCap, h.Kind)
			require.Equal(t, 1, h.Running)
			require.Equal(t, 1, h.MaxRunning)
			require.Equal(t, fleet.StageQueued, e.job(waiting).Stage)

			v := e.queueVersion()
			tc.end(e, cl.Job.ID, cl.LeaseEpoch)
			require.Greater(t, e.queueVersion(), v, "the freed seat tells poll factories at once")
			require.Nil(t, e.seatCap(waiting))
			require.Zero(t, e.product().Running())
			e.claim("f1")
			require.Equal(t, 1, e.product().Running())
		})
	}
}

// TestSeatCapDispatch: on the push transport a capped-out product's jobs
// are not dispatched (held untargeted, kind seat_cap); an accept of a
// dispatch made before the seats filled is refused (409) and holds the
// job; a freed seat dispatches the held job at once.
func TestSeatCapDispatch(t *testing.T) {
	t.Parallel()
	e, pub := dispatchEnv(t)
	e.factory("f1")
	e.capSeats(1)
	a := e.submit()
	b := e.submit()
	_, err := e.c.DispatchChanged(e.ctx, e.feed("").Items)
	require.NoError(t, err)
	sent := pub.sent()
	require.Len(t, sent, 2, "room for one: both are routed, the accept decides")
	byJob := map[string]int64{}
	for _, m := range sent {
		byJob[m.JobID] = m.DispatchEpoch
	}
	cl, err := e.c.Accept(e.ctx, "f1", prod, a.ID, byJob[a.ID])
	require.NoError(t, err)
	_, err = e.c.Accept(e.ctx, "f1", prod, b.ID, byJob[b.ID])
	requireCode(t, err, fleet.CodeConflict, "")
	held := e.job(b.ID)
	require.Equal(t, fleet.StageQueued, held.Stage)
	require.Empty(t, held.TargetFactoryID)
	require.Equal(t, fleet.UnroutableSeatCap, held.Dispatch.UnroutableKind)
	require.Equal(t, 1, e.product().Running())

	c := e.submit()
	d, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, c.ID))
	require.NoError(t, err)
	require.Contains(t, string(d[0].Skipped), "maxRunning")
	require.Len(t, pub.sent(), 2, "a capped-out product's job is not dispatched")

	_, err = e.c.Release(e.ctx, "f1", prod, a.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	sent = pub.sent()[2:]
	require.NotEmpty(t, sent, "the freed seat dispatches at once, not at the next sweep")
	acc, err := e.c.Accept(e.ctx, "f1", prod, sent[0].JobID, sent[0].DispatchEpoch)
	require.NoError(t, err)
	require.Equal(t, fleet.StageAssigned, acc.Job.Stage)
}

// TestSeatCapDeclare: maxRunning is validated (400 naming it, nothing
// written) and read back; a cap set while jobs run counts them; raising it
// lets held jobs flow at once; removing it clears the seats.
func TestSeatCapDeclare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	before := e.product()
	_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo, "api"}, MaxRunning: -1})
	requireCode(t, err, fleet.CodeInvalid, "maxRunning")
	require.Equal(t, before.Rev, e.product().Rev, "nothing written")

	e.submit()
	e.submit()
	e.submit()
	e.claim("f1")
	e.claim("f1")
	queued, _, err := e.c.ListJobs(e.ctx, prod, fleet.StageQueued, 10, "")
	require.NoError(t, err)
	require.Len(t, queued, 1)
	third := queued[0]
	p := e.capSeats(2)
	require.Equal(t, 2, p.MaxRunning)
	require.Equal(t, 2, p.Running(), "the runs going count against the new cap")
	require.NotNil(t, e.seatCap(third.ID))
	v := e.queueVersion()
	e.capSeats(3)
	require.Greater(t, e.queueVersion(), v, "a raised cap lets held jobs flow at once")
	require.Equal(t, third.ID, e.claim("f1").Job.ID)
	require.Equal(t, 3, e.product().Running())
	p = e.capSeats(0)
	require.Zero(t, p.MaxRunning)
	require.Empty(t, p.Seats)
}

// TestSeatCapLeakedSeat: a seat a crash left between the product's CAS and
// the job's (the job never left queued) fills the cap until it is older
// than the lease TTL; then the next claim it blocks reclaims it.
func TestSeatCapLeakedSeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	e.capSeats(1)
	j := e.submit()
	it, err := e.raw.Read(e.ctx, store.Products, prod, prod)
	require.NoError(t, err)
	var doc fleet.Product
	require.NoError(t, json.Unmarshal(it.Body, &doc))
	doc.Seats = map[string]fleet.Seat{j.ID: {LeaseEpoch: 1, At: t0}}
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = e.raw.Replace(e.ctx, store.Products, prod, prod, body, it.Rev)
	require.NoError(t, err)

	cl, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, cl, "a fresh seat may be a claim still landing")
	e.clock.Advance(e.c.Config().LeaseTTL)
	e.beat(e.mustTok("f1"))
	got := e.claim("f1")
	require.Equal(t, j.ID, got.Job.ID)
	require.Equal(t, map[string]fleet.Seat{j.ID: {LeaseEpoch: got.LeaseEpoch, At: e.clock.Now()}}, e.product().Seats)
}

// TestSeatCapNoPreemptionPastCap: a critical job of a product already
// running maxRunning jobs waits for one of its own seats: it does not
// preempt, since the seat it freed could not be its.
func TestSeatCapNoPreemptionPastCap(t *testing.T) {
	t.Parallel()
	e, pub, cls := fullFleet(t, coord.Config{}, fleet.PriorityLow)
	e.capSeats(1)
	crit := e.submit("priority: critical")
	for range 3 {
		_, err := e.c.Redispatch(e.ctx)
		require.NoError(t, err)
	}
	require.False(t, e.job(cls[0].Job.ID).StopRequested())
	require.Empty(t, pub.sentControls())
	require.NotNil(t, e.seatCap(crit.ID))
}

// TestSeatCapPushReclaimsSeats: on the push transport no claim or accept
// meets a seat no run will free (held jobs are not dispatched), so the
// redispatch sweep reclaims it once it is older than the lease TTL and its
// run is over, and the jobs it held go out. Two such seats: one a cap set
// while a run went counted for that run (the run, admitted uncapped, frees
// none at its end), and one a crash left between the product's CAS and
// the job's.
func TestSeatCapPushReclaimsSeats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fill func(e *env, pub *recordingPublisher)
	}{
		{"counted by the cap", func(e *env, pub *recordingPublisher) {
			j := e.submit()
			_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
			require.NoError(e.t, err)
			cl, err := e.c.Accept(e.ctx, "f1", prod, j.ID, pub.sent()[0].DispatchEpoch)
			require.NoError(e.t, err)
			e.capSeats(1)
			require.Equal(e.t, 1, e.product().Running(), "the run going counts against the new cap")
			e.shipWith("f1", &fleetClaim{id: j.ID, epoch: cl.LeaseEpoch}, 0)
		}},
		{"left by a crash", func(e *env, _ *recordingPublisher) {
			e.capSeats(1)
			it, err := e.raw.Read(e.ctx, store.Products, prod, prod)
			require.NoError(e.t, err)
			var doc fleet.Product
			require.NoError(e.t, json.Unmarshal(it.Body, &doc))
			doc.Seats = map[string]fleet.Seat{"j-gone": {LeaseEpoch: 1, At: e.clock.Now()}}
			body, err := json.Marshal(doc)
			require.NoError(e.t, err)
			_, err = e.raw.Replace(e.ctx, store.Products, prod, prod, body, it.Rev)
			require.NoError(e.t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, pub := dispatchEnv(t)
			e.factory("f1")
			tc.fill(e, pub)
			held := e.submit()
			_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, held.ID))
			require.NoError(t, err)
			require.Equal(t, fleet.UnroutableSeatCap, e.job(held.ID).Dispatch.UnroutableKind)

			e.clock.Advance(e.c.Config().LeaseTTL)
			e.beat(e.mustTok("f1"))
			_, err = e.c.Redispatch(e.ctx)
			require.NoError(t, err)
			require.Equal(t, "f1", e.job(held.ID).TargetFactoryID, "the seat no run frees is reclaimed and the held job sent")
			require.Empty(t, e.product().Seats)
		})
	}
}
