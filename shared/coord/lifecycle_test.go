package coord_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestLifecycle: submit → claim → building → testing (the lease goes with
// the delivery) → operator ships. Events run 1..n without a gap and Runs
// shows the finished run.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit()

	e.clock.Advance(time.Second)
	cl := e.claim("f1")
	require.Equal(t, j.ID, cl.Job.ID)
	require.Equal(t, fleet.StageAssigned, cl.Job.Stage)
	require.Equal(t, int64(1), cl.LeaseEpoch)
	require.Equal(t, e.clock.Now().Add(coord.DefaultLeaseTTL), cl.LeaseExpiresAt)
	runs, err := e.c.Runs(e.ctx, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, []fleet.Run{{ID: fleet.RunID(j.ID, 1), JobID: j.ID, ProductID: prod, FactoryID: "f1",
		LeaseEpoch: 1, Result: fleet.RunRunning, StartedAt: e.clock.Now()}}, runs, "the run in progress is the lease")
	claimedAt := e.clock.Now()

	e.clock.Advance(time.Minute)
	b, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: 1, Checkpoint: ptr("aq/wip/" + j.ID)})
	require.NoError(t, err)
	require.Equal(t, fleet.StageBuilding, b.Stage)
	require.Equal(t, "f1", b.HolderFactoryID)
	require.Equal(t, "aq/wip/"+j.ID, b.Checkpoint)

	e.clock.Advance(time.Minute)
	tst, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageTesting, LeaseEpoch: 1})
	require.NoError(t, err)
	require.Equal(t, fleet.StageTesting, tst.Stage)
	require.Empty(t, tst.HolderFactoryID, "delivering for testing releases the lease")
	_, ok := tst.Lease()
	require.False(t, ok)

	// The factory's part is over: it can no longer move the job.
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: 1})
	require.ErrorIs(t, err, fleet.ErrFenced)

	e.clock.Advance(time.Minute)
	shipped, err := e.c.Act(e.ctx, "alice", prod, j.ID, coord.ActionShip, "looks good")
	require.NoError(t, err)
	require.Equal(t, fleet.StageShipped, shipped.Stage)
	require.Equal(t, shipped, e.job(j.ID))

	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "claimed", "stage", "stage", "ship"}, eventTypes(evs))
	stages := []fleet.Stage{fleet.StageQueued, fleet.StageAssigned, fleet.StageBuilding, fleet.StageTesting, fleet.StageShipped}
	for i, ev := range evs {
		require.Equal(t, stages[i], ev.To, "event %d", i+1)
		if i > 0 {
			require.Equal(t, stages[i-1], ev.From, "event %d", i+1)
		}
	}
	require.Equal(t, fleet.ActorOperator, evs[4].Actor)
	require.Equal(t, "alice", evs[4].ActorID)
	after, err := e.c.Events(e.ctx, prod, j.ID, 3, 1)
	require.NoError(t, err)
	require.Equal(t, evs[3:4], after, "events after seq 3, one of them")

	runs, err = e.c.Runs(e.ctx, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, []fleet.Run{{ID: fleet.RunID(j.ID, 1), JobID: j.ID, ProductID: prod, FactoryID: "f1", LeaseEpoch: 1,
		Result: fleet.RunSucceeded, Reason: "delivered for testing", StartedAt: claimedAt, EndedAt: claimedAt.Add(2 * time.Minute)}}, runs)
}

// TestPatchShipped: the factory may ship straight from building only when
// the job has no review gate; with one it must deliver for review.
func TestPatchShipped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		lines  []string
		wantOK bool
	}{
		{"no review gate", nil, true},
		{"review gate", []string{"review: {reviewers: [alice, bob], quorum: 1}"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			j := e.submit(tc.lines...)
			cl := e.claim("f1")
			_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
			require.NoError(t, err)
			before := e.rawJob(j.ID)
			got, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: cl.LeaseEpoch})
			if tc.wantOK {
				require.NoError(t, err)
				require.Equal(t, fleet.StageShipped, got.Stage)
				require.Empty(t, got.HolderFactoryID)
				return
			}
			require.ErrorIs(t, err, fleet.ErrConflict)
			require.Equal(t, before, e.rawJob(j.ID))
			got, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageReview, LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("aq/job/" + j.ID + "@1")})
			require.NoError(t, err)
			require.Equal(t, fleet.StageReview, got.Stage)
			require.Empty(t, got.HolderFactoryID, "delivering for review releases the lease")
		})
	}
}

// TestIllegalTransitions: the holder asking for a move the stage machine
// does not have gets a conflict and changes nothing; a stage a factory may
// never ask for is invalid.
func TestIllegalTransitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1") // assigned
	tests := []struct {
		stage fleet.Stage
		code  fleet.Code
	}{
		{fleet.StageTesting, fleet.CodeConflict},  // assigned -> testing skips building
		{fleet.StageReview, fleet.CodeConflict},   // assigned -> review skips building
		{fleet.StageShipped, fleet.CodeConflict},  // assigned -> shipped skips building
		{fleet.StageQueued, fleet.CodeInvalid},    // use release
		{fleet.StageFailed, fleet.CodeInvalid},    // use fail
		{fleet.StageAssigned, fleet.CodeInvalid},  // claiming is not a patch
		{fleet.StageCancelled, fleet.CodeInvalid}, // operators cancel
		{fleet.Stage("bogus"), fleet.CodeInvalid},
	}
	for _, tc := range tests {
		before := e.rawJob(j.ID)
		_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: tc.stage, LeaseEpoch: cl.LeaseEpoch})
		requireCode(t, err, tc.code, "")
		if tc.code == fleet.CodeConflict {
			require.ErrorIs(t, err, fleet.ErrConflict, "%s", tc.stage)
		}
		require.Equal(t, before, e.rawJob(j.ID), "%s", tc.stage)
	}
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch})
	requireCode(t, err, fleet.CodeInvalid, "stage")
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("bad\x01")})
	requireCode(t, err, fleet.CodeInvalid, "checkpoint")

	// Building -> building again is not a transition either.
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.ErrorIs(t, err, fleet.ErrConflict)

	// Operator actions follow the same table.
	_, err = e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionShip, "")
	require.ErrorIs(t, err, fleet.ErrConflict, "an operator cannot ship a job still building")
	_, err = e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionRequeue, "")
	require.ErrorIs(t, err, fleet.ErrConflict)
	_, err = e.c.Act(e.ctx, "op", prod, j.ID, coord.Action("explode"), "")
	requireCode(t, err, fleet.CodeInvalid, "action")
	_, err = e.c.Act(e.ctx, "op", prod, "j-missing", coord.ActionShip, "")
	require.ErrorIs(t, err, fleet.ErrNotFound)

	// Cancelling a held job asks the holder, who acknowledges by
	// releasing; its lease is then gone.
	got, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "not needed")
	require.NoError(t, err)
	require.Equal(t, fleet.StageBuilding, got.Stage)
	require.True(t, got.CancelRequested)
	got, err = e.c.ReleaseWith(e.ctx, "f1", prod, j.ID, coord.ReleaseRequest{LeaseEpoch: cl.LeaseEpoch, Outcome: fleet.ReleaseCancelled})
	require.NoError(t, err)
	require.Equal(t, fleet.StageCancelled, got.Stage)
	_, err = e.c.Renew(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.ErrorIs(t, err, fleet.ErrFenced)
	requireContiguous(t, e.events(j.ID))
}

// TestCheckpointPatch: a checkpoint-only patch is fenced like the rest,
// writes only when the checkpoint changes and moves no stage.
func TestCheckpointPatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	got, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("c1")})
	require.NoError(t, err)
	require.Equal(t, "c1", got.Checkpoint)
	require.Equal(t, fleet.StageAssigned, got.Stage)
	before := e.rawJob(j.ID)
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("c1")})
	require.NoError(t, err)
	require.Equal(t, before, e.rawJob(j.ID), "the same checkpoint again writes nothing")
	require.Len(t, e.events(j.ID), 2, "a checkpoint is not a stage event")
}

// TestListJobs pages through a product's jobs, newest first, and filters
// by stage.
func TestListJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	var ids []string
	for range 5 {
		ids = append(ids, e.submit().ID)
		e.clock.Advance(time.Millisecond) // ids are time-ordered
	}
	e.claim("f1")
	var seen []string
	cursor := ""
	for {
		page, next, err := e.c.ListJobs(e.ctx, prod, "", 2, cursor)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 2)
		for _, j := range page {
			seen = append(seen, j.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Reverse(ids)
	require.Equal(t, ids, seen, "newest first")
	queued, _, err := e.c.ListJobs(e.ctx, prod, fleet.StageQueued, 0, "")
	require.NoError(t, err)
	require.Len(t, queued, 4)
	assigned, _, err := e.c.ListJobs(e.ctx, prod, fleet.StageAssigned, 0, "")
	require.NoError(t, err)
	require.Len(t, assigned, 1)
	_, _, err = e.c.ListJobs(e.ctx, "", "", 0, "")
	requireCode(t, err, fleet.CodeInvalid, "x-product-id")
}
