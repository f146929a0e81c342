package coord_test

import (
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestDrain: a draining factory claims nothing new, is named "draining" in
// /explain (and counted so when nothing is eligible), keeps renewing and
// finishing what it holds, stays draining across heartbeats, is refused an
// accept of a message dispatched before the drain, and takes work again
// once undrained.
func TestDrain(t *testing.T) {
	t.Parallel()
	e, _ := dispatchEnv(t)
	e.factory("f1")
	held := e.submit()
	cl := e.claim("f1")
	require.Equal(t, held.ID, cl.Job.ID)

	f, err := e.c.SetDraining(e.ctx, "f1", true)
	require.NoError(t, err)
	require.True(t, f.Draining)
	e.beat(e.mustTok("f1"))
	f, err = e.c.GetFactory(e.ctx, "f1")
	require.NoError(t, err)
	require.True(t, f.Draining, "a heartbeat keeps the drain")

	waiting := e.submit()
	none, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, none, "a draining factory claims nothing new")
	ex, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, waiting.ID)
	require.NoError(t, err)
	require.False(t, ex.Schedule.Routable)
	require.Equal(t, "no eligible factory: 1 is draining", ex.Schedule.Reason)
	require.Equal(t, "factory is draining", ex.Schedule.Candidates[0].Reason)

	// What it holds, it keeps.
	_, err = e.c.Renew(e.ctx, "f1", prod, held.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageTesting} {
		_, err = e.c.Patch(e.ctx, "f1", prod, held.ID, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch})
		require.NoError(t, err)
	}

	// Another factory takes the waiting job.
	e.factory("f2")
	got := e.claim("f2")
	require.Equal(t, waiting.ID, got.Job.ID)

	// A message dispatched to f1 before its drain is refused, writing nothing.
	_, err = e.c.SetDraining(e.ctx, "f1", false)
	require.NoError(t, err)
	late := e.submit("priority: high")
	ds, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, late.ID))
	require.NoError(t, err)
	var target string
	for _, d := range ds {
		if d.JobID == late.ID {
			target = d.Target
		}
	}
	require.NotEmpty(t, target)
	_, err = e.c.SetDraining(e.ctx, target, true)
	require.NoError(t, err)
	before := e.rawJob(late.ID)
	_, err = e.c.Accept(e.ctx, target, prod, late.ID, e.job(late.ID).DispatchEpoch)
	require.ErrorIs(t, err, fleet.ErrConflict)
	require.ErrorContains(t, err, "draining")
	require.Equal(t, before, e.rawJob(late.ID), "the refused accept wrote nothing")

	// Undrained, it takes work again.
	_, err = e.c.SetDraining(e.ctx, target, false)
	require.NoError(t, err)
	acc, err := e.c.Accept(e.ctx, target, prod, late.ID, e.job(late.ID).DispatchEpoch)
	require.NoError(t, err)
	require.Equal(t, late.ID, acc.Job.ID)

	_, err = e.c.SetDraining(e.ctx, "nope", true)
	require.ErrorIs(t, err, fleet.ErrNotFound)
}
