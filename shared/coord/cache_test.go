package coord_test

import (
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// hookedEnv is an env whose coordinator runs on a hookStore.
func hookedEnv(t *testing.T) (*env, *hookStore) {
	t.Helper()
	hs := &hookStore{}
	e := newEnv(t, withStore(func(s store.Store) store.Store {
		hs.Store = s
		return hs
	}))
	return e, hs
}

// TestMutateRetriesOnPrecondition: a lost CAS (injected once, nothing
// written) makes the use case re-read and try again; the caller never sees
// it.
func TestMutateRetriesOnPrecondition(t *testing.T) {
	t.Parallel()
	e, hs := hookedEnv(t)
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	e.clock.Advance(e.c.Config().LeaseTTL / 2)

	hs.setBeforeReplace(once(func(pk, id string) error { return store.ErrPrecondition }))
	reads, replaces := hs.jobReads.Load(), hs.jobReplaces.Load()
	ren, err := e.c.Renew(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	require.Equal(t, e.clock.Now().Add(e.c.Config().LeaseTTL), ren.LeaseExpiresAt)
	require.Equal(t, ren.LeaseExpiresAt, e.job(j.ID).LeaseExpiresAt)
	require.Equal(t, replaces+2, hs.jobReplaces.Load(), "the injected failure, then the real write")
	require.Equal(t, reads+1+1, hs.jobReads.Load(), "a fresh read after the lost CAS (plus e.job's)")
	require.Equal(t, int64(1), e.c.Stats().CASConflicts)
}

// TestMutateRetriesWithFreshData: another coordinator writes the job
// between this one's read and its write. The CAS fails for real and the
// retry starts from the other writer's version, so neither write is lost.
func TestMutateRetriesWithFreshData(t *testing.T) {
	t.Parallel()
	e, hs := hookedEnv(t)
	other := e.peer()
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")

	hs.setBeforeReplace(once(func(pk, id string) error {
		_, err := other.Patch(e.ctx, "f1", pk, id, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("written by the other process")})
		return err // nil: the write goes ahead with its now stale revision
	}))
	got, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)
	require.Equal(t, fleet.StageBuilding, got.Stage)
	require.Equal(t, "written by the other process", got.Checkpoint, "the retry started from the other write")
	require.Equal(t, got.Checkpoint, e.job(j.ID).Checkpoint)
	require.Equal(t, int64(1), e.c.Stats().CASConflicts)
	requireContiguous(t, e.events(j.ID))
}

// TestStaleCacheNeverFences: coordinator A cached the job while f1 held it;
// B reaps it and f2 claims it. f2's patch through A, at its own epoch,
// succeeds: A's stale copy would have fenced it, and an error decided on a
// cached copy is never returned.
func TestStaleCacheNeverFences(t *testing.T) {
	t.Parallel()
	e, hs := hookedEnv(t)
	b := e.peer()
	e.factory("f1")
	e.factory("f2")
	j := e.submit()
	cl1 := e.claim("f1") // A's cache: assigned to f1 at epoch 1

	e.clock.Advance(e.c.Config().LeaseTTL)
	n, err := b.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	cl2, err := b.Claim(e.ctx, e.as("f2"))
	require.NoError(t, err)
	require.NotNil(t, cl2)
	require.Equal(t, j.ID, cl2.Job.ID)
	require.Greater(t, cl2.LeaseEpoch, cl1.LeaseEpoch)

	reads := hs.jobReads.Load()
	got, err := e.c.Patch(e.ctx, "f2", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl2.LeaseEpoch, Checkpoint: ptr("c2")})
	require.NoError(t, err, "a stale cached copy must not fence the real holder")
	require.Equal(t, fleet.StageBuilding, got.Stage)
	require.Equal(t, "f2", got.HolderFactoryID)
	require.Equal(t, reads+1, hs.jobReads.Load(), "A re-read the job once")

	_, err = e.c.Renew(e.ctx, "f2", prod, j.ID, cl2.LeaseEpoch)
	require.NoError(t, err)
	_, err = e.c.Fail(e.ctx, "f2", prod, j.ID, coord.FailRequest{LeaseEpoch: cl2.LeaseEpoch, Reason: "r", Retryable: true})
	require.NoError(t, err)
	requireContiguous(t, e.events(j.ID))
}

// TestStaleCacheNeverUnfences: the other way round. A's cached copy still
// shows f1 holding the job at epoch 1, which would let f1's late writes
// through; the store's revision check refuses them and the fresh read
// fences f1. Nothing changes.
func TestStaleCacheNeverUnfences(t *testing.T) {
	t.Parallel()
	late := map[string]func(e *env, jobID string, epoch int64) error{
		"patch": func(e *env, jobID string, epoch int64) error {
			_, err := e.c.Patch(e.ctx, "f1", prod, jobID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: epoch, Checkpoint: ptr("late")})
			return err
		},
		"renew": func(e *env, jobID string, epoch int64) error {
			_, err := e.c.Renew(e.ctx, "f1", prod, jobID, epoch)
			return err
		},
		"release": func(e *env, jobID string, epoch int64) error {
			_, err := e.c.Release(e.ctx, "f1", prod, jobID, epoch)
			return err
		},
		"fail": func(e *env, jobID string, epoch int64) error {
			_, err := e.c.Fail(e.ctx, "f1", prod, jobID, coord.FailRequest{LeaseEpoch: epoch, Reason: "late"})
			return err
		},
	}
	for name, call := range late {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, hs := hookedEnv(t)
			b := e.peer()
			e.factory("f1")
			e.factory("f2")
			j := e.submit()
			cl1 := e.claim("f1")
			e.clock.Advance(e.c.Config().LeaseTTL)
			_, err := b.Reap(e.ctx)
			require.NoError(t, err)
			cl2, err := b.Claim(e.ctx, e.as("f2"))
			require.NoError(t, err)
			require.NotNil(t, cl2)

			before := e.rawJob(j.ID)
			replaces := hs.jobReplaces.Load()
			err = call(e, j.ID, cl1.LeaseEpoch)
			require.ErrorIs(t, err, fleet.ErrFenced)
			require.Equal(t, before, e.rawJob(j.ID))
			if name != "fail" { // Fail checks the fence on a fresh read before it writes
				require.Equal(t, replaces+1, hs.jobReplaces.Load(), "the stale copy let the write be tried; the revision refused it")
			}
		})
	}
}

// TestCASExhausted: a job that changes under every attempt gives a conflict
// to retry, never a wrong answer, and nothing is written.
func TestCASExhausted(t *testing.T) {
	t.Parallel()
	e, hs := hookedEnv(t)
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	before := e.rawJob(j.ID)
	hs.setBeforeReplace(func(pk, id string) error { return store.ErrPrecondition })
	_, err := e.c.Renew(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.ErrorIs(t, err, fleet.ErrConflict)
	require.NotErrorIs(t, err, fleet.ErrFenced)
	require.Equal(t, before, e.rawJob(j.ID))

	// A store outage is passed on as such, not as a verdict on the job.
	hs.setBeforeReplace(func(pk, id string) error { return store.ErrUnavailable })
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Empty(t, fleet.CodeOf(err))
	require.Equal(t, before, e.rawJob(j.ID))

	hs.setBeforeReplace(nil)
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)
}

// TestDispatchOldFeedCopy: a change-feed batch read before the job was
// claimed arrives late. Its stale copy (queued, no target) is cached by
// the dispatcher, yet nothing is dispatched or written, and the holder's
// next write through the same coordinator goes through.
func TestDispatchOldFeedCopy(t *testing.T) {
	t.Parallel()
	e, pub := dispatchEnv(t)
	e.factory("f1")
	j := e.submit()
	old := e.feed("")
	cl := e.claim("f1")
	before := e.rawJob(j.ID)

	ds, err := e.c.DispatchChanged(e.ctx, old.Items)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Empty(t, ds[0].Target)
	require.Empty(t, pub.sent())
	require.Equal(t, before, e.rawJob(j.ID))
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)
}
