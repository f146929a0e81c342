package coord_test

import (
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// TestReap: an expired lease puts the job back in the queue with the epoch
// bumped and the checkpoint kept, records the lost run and the event, fences
// the old holder and lets another factory claim the job.
func TestReap(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Minute
	e := newEnv(t, withConfig(coord.Config{LeaseTTL: ttl}))
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("aq/wip/" + j.ID + "@abc123")})
	require.NoError(t, err)

	// Not yet: a lease is reaped at its expiry, not before.
	e.clock.Advance(ttl - time.Second)
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, fleet.StageBuilding, e.job(j.ID).Stage)

	v0 := e.queueVersion()
	e.clock.Advance(time.Second)
	n, err = e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got := e.job(j.ID)
	require.Equal(t, fleet.StageQueued, got.Stage)
	require.Equal(t, cl.LeaseEpoch+1, got.LeaseEpoch)
	require.Empty(t, got.HolderFactoryID)
	require.True(t, got.LeaseExpiresAt.IsZero())
	require.Equal(t, "aq/wip/"+j.ID+"@abc123", got.Checkpoint, "the checkpoint survives the reap")
	require.Equal(t, e.clock.Now(), got.QueuedAt)
	require.Empty(t, got.TargetFactoryID, "a reaped job needs a fresh dispatch")
	require.Equal(t, v0+1, e.queueVersion(), "entering queued bumps the queue state")

	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "claimed", "stage", "lease_expired"}, eventTypes(evs))
	last := evs[len(evs)-1]
	require.Equal(t, fleet.StageBuilding, last.From)
	require.Equal(t, fleet.StageQueued, last.To)
	require.Equal(t, fleet.ActorSystem, last.Actor)
	require.Contains(t, last.Message, "f1")

	runs, err := e.c.Runs(e.ctx, prod, j.ID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, fleet.Run{
		ID: fleet.RunID(j.ID, 1), JobID: j.ID, ProductID: prod, FactoryID: "f1", LeaseEpoch: 1,
		Result: fleet.RunLost, Reason: "lease of f1 expired", StartedAt: t0, EndedAt: e.clock.Now(),
	}, runs[0])

	// The old holder wakes up: everything it tries is fenced and changes nothing.
	before := e.rawJob(j.ID)
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("late")})
	require.ErrorIs(t, err, fleet.ErrFenced)
	_, err = e.c.Renew(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.ErrorIs(t, err, fleet.ErrFenced)
	require.Equal(t, before, e.rawJob(j.ID))

	// Idempotent: nothing more to reap, nothing changes.
	n, err = e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, before, e.rawJob(j.ID))

	// Another factory takes it over, with the checkpoint to resume from.
	e.factory("f2")
	cl2 := e.claim("f2")
	require.Equal(t, j.ID, cl2.Job.ID)
	require.Equal(t, cl.LeaseEpoch+2, cl2.LeaseEpoch)
	require.Equal(t, "aq/wip/"+j.ID+"@abc123", cl2.Job.Checkpoint)
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.ErrorIs(t, err, fleet.ErrFenced, "the old holder stays fenced after the new claim")
	_, err = e.c.Patch(e.ctx, "f2", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl2.LeaseEpoch})
	require.NoError(t, err)
}

// TestReapSkipsLiveLeases: renewed leases, unexpired leases and jobs
// without a lease are left alone; only the expired one goes.
func TestReapSkipsLiveLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(coord.Config{LeaseTTL: time.Minute}))
	e.factory("f1")
	for range 3 {
		e.submit()
	}
	renewed := e.claim("f1")
	expired := e.claim("f1")
	e.clock.Advance(30 * time.Second)
	late := e.claim("f1") // claimed later: expires later
	e.clock.Advance(29 * time.Second)
	_, err := e.c.Renew(e.ctx, "f1", prod, renewed.Job.ID, renewed.LeaseEpoch)
	require.NoError(t, err)
	queued := e.submit()
	e.clock.Advance(time.Second) // t0+60s: only `expired` has run out

	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, fleet.StageQueued, e.job(expired.Job.ID).Stage)
	for _, cl := range []*protocol.Claimed{renewed, late} {
		got := e.job(cl.Job.ID)
		require.Equal(t, fleet.StageAssigned, got.Stage)
		require.Equal(t, cl.LeaseEpoch, got.LeaseEpoch)
		require.Equal(t, "f1", got.HolderFactoryID)
	}
	require.Equal(t, int64(0), e.job(queued.ID).LeaseEpoch)
}

// TestReapRacesRenew: the reaper decided from a listing in which the lease
// had expired, but the holder renews before the reaper writes. The CAS
// sees the renewal and the job is not reaped.
func TestReapRacesRenew(t *testing.T) {
	t.Parallel()
	hs := &hookStore{}
	e := newEnv(t, withConfig(coord.Config{LeaseTTL: time.Minute}), withStore(func(s store.Store) store.Store {
		hs.Store = s
		return hs
	}))
	holder := e.peer() // the holder's coordinator, writing past e's listing
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	e.clock.Advance(time.Minute)
	hs.setBeforeReplace(once(func(pk, id string) error {
		// The reaper is about to write: the holder renews first (a lease
		// not yet reaped may still be renewed).
		_, err := holder.Renew(e.ctx, "f1", pk, id, cl.LeaseEpoch)
		return err
	}))
	hs.jobReplaces.Store(0)
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, int64(1), hs.jobReplaces.Load(), "one lost CAS, then the renewal seen and no second write")
	got := e.job(j.ID)
	require.Equal(t, fleet.StageAssigned, got.Stage)
	require.Equal(t, cl.LeaseEpoch, got.LeaseEpoch)
	require.Equal(t, "f1", got.HolderFactoryID)
}

// TestReapRacesCancel: an operator cancels a job whose lease has expired
// after the reaper listed it and before its write. The reaper must not put
// it back in the queue: the cancel is pending and ends the job cancelled
// (acknowledged by the holder or forced after the grace), never lost. Found
// by the linearizability check (shared/coord/lintest).
func TestReapRacesCancel(t *testing.T) {
	t.Parallel()
	hs := &hookStore{}
	e := newEnv(t, withConfig(coord.Config{LeaseTTL: time.Minute}), withStore(func(s store.Store) store.Store {
		hs.Store = s
		return hs
	}))
	operator := e.peer() // the operator's coordinator, writing past e's listing
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	e.clock.Advance(time.Minute)
	hs.setBeforeReplace(once(func(pk, id string) error {
		_, err := operator.Act(e.ctx, "ops", pk, id, coord.ActionCancel, "not needed")
		return err
	}))
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	got := e.job(j.ID)
	require.Equal(t, fleet.StageAssigned, got.Stage, "the pending cancel is the reaper's to force after the grace, not to requeue")
	require.True(t, got.CancelRequested)
	require.Equal(t, cl.LeaseEpoch, got.LeaseEpoch)
}
