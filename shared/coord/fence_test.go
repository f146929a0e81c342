package coord_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestFencing: every worker mutation with a stale epoch, a future epoch or
// the wrong factory gets ErrFenced and leaves the stored document byte for
// byte as it was (same body, same revision).
func TestFencing(t *testing.T) {
	t.Parallel()
	type mutation func(e *env, factoryID, jobID string, epoch int64) error
	mutations := map[string]mutation{
		"patch checkpoint": func(e *env, f, id string, epoch int64) error {
			_, err := e.c.Patch(e.ctx, f, prod, id, coord.PatchRequest{LeaseEpoch: epoch, Checkpoint: ptr("aq/wip/x@1")})
			return err
		},
		"patch stage": func(e *env, f, id string, epoch int64) error {
			_, err := e.c.Patch(e.ctx, f, prod, id, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: epoch})
			return err
		},
		"patch stage and checkpoint": func(e *env, f, id string, epoch int64) error {
			_, err := e.c.Patch(e.ctx, f, prod, id, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: epoch, Checkpoint: ptr("c")})
			return err
		},
		"renew": func(e *env, f, id string, epoch int64) error {
			_, err := e.c.Renew(e.ctx, f, prod, id, epoch)
			return err
		},
		"fail retryable": func(e *env, f, id string, epoch int64) error {
			_, err := e.c.Fail(e.ctx, f, prod, id, coord.FailRequest{LeaseEpoch: epoch, Reason: "boom", Retryable: true})
			return err
		},
		"fail terminal": func(e *env, f, id string, epoch int64) error {
			_, err := e.c.Fail(e.ctx, f, prod, id, coord.FailRequest{LeaseEpoch: epoch, Reason: "boom"})
			return err
		},
		"release": func(e *env, f, id string, epoch int64) error {
			_, err := e.c.Release(e.ctx, f, prod, id, epoch)
			return err
		},
	}
	// Each case sets up a job held by f1 and says who calls with what epoch.
	// The job is reaped and re-claimed first, so f1 holds it at epoch 3 and
	// epochs 1 and 2 are genuinely old.
	cases := []struct {
		name      string
		factoryID string
		epoch     func(held int64) int64
	}{
		{"holder, previous lease's epoch", "f1", func(h int64) int64 { return 1 }},
		{"holder, the reaped epoch", "f1", func(h int64) int64 { return h - 1 }},
		{"holder, future epoch", "f1", func(h int64) int64 { return h + 1 }},
		{"holder, epoch zero", "f1", func(h int64) int64 { return 0 }},
		{"non-holder, the right epoch", "f2", func(h int64) int64 { return h }},
		{"non-holder, stale epoch", "f2", func(h int64) int64 { return 1 }},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			e.factory("f2", caps("os:linux")) // cannot claim: lacks engine:claude
			j := e.submit()
			require.Equal(t, int64(1), e.claim("f1").LeaseEpoch)
			e.clock.Advance(e.c.Config().LeaseTTL)
			n, err := e.c.Reap(e.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			held := e.claim("f1")
			require.Equal(t, j.ID, held.Job.ID)
			require.Equal(t, int64(3), held.LeaseEpoch)

			for _, tc := range cases {
				before := e.rawJob(j.ID)
				err := mutate(e, tc.factoryID, j.ID, tc.epoch(held.LeaseEpoch))
				require.ErrorIs(t, err, fleet.ErrFenced, tc.name)
				require.Equal(t, fleet.CodeFenced, fleet.CodeOf(err), tc.name)
				after := e.rawJob(j.ID)
				require.Equal(t, before.Rev, after.Rev, "%s: a fenced call wrote the job", tc.name)
				require.Equal(t, string(before.Body), string(after.Body), tc.name)
			}

			// The holder at its own epoch is not fenced: the cases above
			// failed for their epoch or factory, not for some other reason.
			require.NoError(t, mutate(e, "f1", j.ID, held.LeaseEpoch))
		})
	}
}

// TestFencedAfterRelease: once the lease is given up (released, delivered,
// failed), the old holder at its old epoch is fenced: there is no lease.
func TestFencedAfterRelease(t *testing.T) {
	t.Parallel()
	ends := map[string]func(e *env, id string, epoch int64){
		"release": func(e *env, id string, epoch int64) {
			_, err := e.c.Release(e.ctx, "f1", prod, id, epoch)
			require.NoError(e.t, err)
		},
		"deliver for testing": func(e *env, id string, epoch int64) {
			_, err := e.c.Patch(e.ctx, "f1", prod, id, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: epoch})
			require.NoError(e.t, err)
			_, err = e.c.Patch(e.ctx, "f1", prod, id, coord.PatchRequest{Stage: fleet.StageTesting, LeaseEpoch: epoch})
			require.NoError(e.t, err)
		},
		"fail": func(e *env, id string, epoch int64) {
			_, err := e.c.Fail(e.ctx, "f1", prod, id, coord.FailRequest{LeaseEpoch: epoch, Reason: "no", Retryable: true})
			require.NoError(e.t, err)
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			e.submit()
			cl := e.claim("f1")
			end(e, cl.Job.ID, cl.LeaseEpoch)
			before := e.rawJob(cl.Job.ID)
			_, err := e.c.Renew(e.ctx, "f1", prod, cl.Job.ID, cl.LeaseEpoch)
			require.ErrorIs(t, err, fleet.ErrFenced)
			_, err = e.c.Patch(e.ctx, "f1", prod, cl.Job.ID, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("late")})
			require.ErrorIs(t, err, fleet.ErrFenced)
			_, err = e.c.Fail(e.ctx, "f1", prod, cl.Job.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "late"})
			require.ErrorIs(t, err, fleet.ErrFenced)
			after := e.rawJob(cl.Job.ID)
			require.Equal(t, before, after)
		})
	}
}

// TestRenew extends the lease from now, and a renewed lease survives the
// time its first expiry would have come.
func TestRenew(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(coord.Config{LeaseTTL: time.Minute}))
	e.factory("f1")
	e.submit()
	cl := e.claim("f1")
	require.Equal(t, t0.Add(time.Minute), cl.LeaseExpiresAt)
	e.clock.Advance(50 * time.Second)
	ren, err := e.c.Renew(e.ctx, "f1", prod, cl.Job.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	require.Equal(t, t0.Add(50*time.Second+time.Minute), ren.LeaseExpiresAt)
	require.Equal(t, ren.LeaseExpiresAt, e.job(cl.Job.ID).LeaseExpiresAt)
}
