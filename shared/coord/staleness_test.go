package coord_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// Two instances on one store, each with its own caches: what one caches
// may be stale by its TTL, but what it decides from it must not break a
// guarantee past that TTL.

// TestSeatCapSetElsewhereCountsTheClaim: a cap set through instance A while
// B holds the product cached uncapped applies to B's claim: the claim reads
// the product fresh to pass over held jobs, so the seat it takes is decided
// on that copy, not on B's cache. Once every cache is past its TTL the cap
// holds (a claim that took no seat would leave the product over its cap for
// as long as that run goes).
func TestSeatCapSetElsewhereCountsTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	e.factory("f2")
	b := e.peer()
	_, _, err := b.Submit(e.ctx, prod, manifest()) // B caches the product, uncapped
	require.NoError(t, err)
	e.submit()

	e.capSeats(1)
	cl, err := b.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.NotNil(t, cl, "one seat is free")
	require.Equal(t, 1, e.product().Running(), "B's claim took the seat")

	e.clock.Advance(2 * e.c.Config().FactoryCacheTTL)
	for _, c := range []*coord.Coordinator{e.c, b} {
		none, err := c.Claim(e.ctx, e.as("f2"))
		require.NoError(t, err)
		require.Nil(t, none, "maxRunning 1 with one run going")
	}
}

// TestBudgetCountsRunsAdmittedWithoutReservation: a run admitted while its
// product had no budget, or by an instance that still took it to have none
// (its cache TTL), reserved nothing; when it ends under a budget its spend
// still counts, or the budget would never see what it spent.
func TestBudgetCountsRunsAdmittedWithoutReservation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	b := e.peer()
	e.submit()
	e.submit()
	before, err := b.Claim(e.ctx, e.as("f1")) // no budget yet: B notes that
	require.NoError(t, err)
	require.NotNil(t, before)

	e.putBudget(1)
	stale, err := b.Claim(e.ctx, e.as("f1")) // B still takes it to have none
	require.NoError(t, err)
	require.NotNil(t, stale)
	require.Zero(t, e.budget().ReservedUSD)

	e.shipWith("f1", &fleetClaim{id: before.Job.ID, epoch: before.LeaseEpoch}, 0.4)
	e.shipWith("f1", &fleetClaim{id: stale.Job.ID, epoch: stale.LeaseEpoch}, 0.9)

	bv := e.budget()
	require.InDelta(t, 1.3, bv.SpentUSD, 1e-9, "both runs ended under the budget")
	require.True(t, bv.Paused, "spend reached the ceiling")
}

// TestAcceptRefusesADeregisteredFactory: a factory deregistered through
// instance A is refused an accept through B, although B still trusts its
// token (revocation reaches B within TokenCacheTTL) and a message
// dispatched to it before is still current: a deregistered factory gets no
// new work.
func TestAcceptRefusesADeregisteredFactory(t *testing.T) {
	t.Parallel()
	e, _ := dispatchEnv(t)
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps, SeatLimit: 4})
	require.NoError(t, err)
	tok, err := e.c.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)
	_, err = e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}})
	require.NoError(t, err)
	b := e.peer()
	_, err = b.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)

	j := e.submit()
	ds, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
	require.NoError(t, err)
	require.Equal(t, "f1", ds[0].Target)

	require.NoError(t, e.c.Deregister(e.ctx, "f1"))
	e.clock.Advance(2 * e.c.Config().FactoryCacheTTL)
	_, err = b.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err, "B trusts the token until it next reads the ledger")

	before := e.rawJob(j.ID)
	_, err = b.Accept(e.ctx, "f1", prod, j.ID, ds[0].DispatchEpoch)
	requireCode(t, err, fleet.CodeConflict, "")
	require.Equal(t, before, e.rawJob(j.ID), "the refused accept wrote nothing")
}

// TestBudgetCountsARunEndedWhileTheNoBudgetNoteIsFresh: a run admitted
// while its product had no budget, that ends on an instance still taking
// the product to have none (a budget created elsewhere within that
// instance's cache TTL), counts its spend: the budget was created before
// the run ended, so neither its seed nor anything after it counts the run
// otherwise.
func TestBudgetCountsARunEndedWhileTheNoBudgetNoteIsFresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	b := e.peer()
	e.submit()
	cl, err := b.Claim(e.ctx, e.as("f1")) // no budget: B notes that
	require.NoError(t, err)
	require.NotNil(t, cl)

	e.putBudget(1) // through A, within B's cache TTL
	for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
		_, err := b.Patch(e.ctx, "f1", prod, cl.Job.ID, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch, Usage: &fleet.Usage{USD: 0.4}})
		require.NoError(t, err)
	}
	require.InDelta(t, 0.4, e.budget().SpentUSD, 1e-9, "the run ended under the budget")
}

// beforeBudgetCreate runs hook (once) before the next create of a budget
// document: what another instance does while a first budget is being put.
type beforeBudgetCreate struct {
	store.Store
	hook atomic.Pointer[func()]
}

func (s *beforeBudgetCreate) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if h := s.hook.Swap(nil); h != nil && container == store.Budgets {
		(*h)()
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

// TestBudgetCountsARunEndedWhileItWasCreated: a run that reserved nothing
// and ends after a new budget's seed read the product's jobs, but before
// the budget document exists, found no budget at its end: the budget
// counts it all the same once it exists.
func TestBudgetCountsARunEndedWhileItWasCreated(t *testing.T) {
	t.Parallel()
	hooked := &beforeBudgetCreate{}
	e := newEnv(t, withStore(func(s store.Store) store.Store { hooked.Store = s; return hooked }))
	e.factory("f1")
	b := e.peer()
	e.submit()
	cl, err := b.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.NotNil(t, cl)
	_, err = b.Patch(e.ctx, "f1", prod, cl.Job.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)

	ship := func() {
		_, err := b.Patch(e.ctx, "f1", prod, cl.Job.ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: cl.LeaseEpoch, Usage: &fleet.Usage{USD: 0.4}})
		require.NoError(t, err)
	}
	hooked.hook.Store(&ship)
	e.putBudget(1)
	require.Nil(t, hooked.hook.Load(), "the run ended while the budget was created")
	require.InDelta(t, 0.4, e.budget().SpentUSD, 1e-9, "the run ended as its budget was created")
}
