package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestReviewGateCannotBeSkipped: a job with a review gate reaches testing
// or shipped only through the gate. Neither the holder (patching testing or
// shipped) nor an operator (shipping or approving it out of review) can
// skip it; each attempt is a conflict that changes nothing.
func TestReviewGateCannotBeSkipped(t *testing.T) {
	t.Parallel()
	gated := "review: {reviewers: [alice, bob], quorum: 2}"
	tests := []struct {
		name  string
		gated bool
		to    fleet.Stage
	}{
		{"gated, holder patches testing", true, fleet.StageTesting},
		{"gated, holder patches shipped", true, fleet.StageShipped},
		{"ungated, holder patches testing", false, fleet.StageTesting},
		{"ungated, holder patches shipped", false, fleet.StageShipped},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			var lines []string
			if tc.gated {
				lines = append(lines, gated)
			}
			j := e.submit(lines...)
			cl := e.claim("f1")
			_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
			require.NoError(t, err)
			before := e.rawJob(j.ID)
			got, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: tc.to, LeaseEpoch: cl.LeaseEpoch})
			if !tc.gated {
				require.NoError(t, err)
				require.Equal(t, tc.to, got.Stage)
				return
			}
			requireCode(t, err, fleet.CodeConflict, "")
			require.Contains(t, err.Error(), "review gate")
			require.Equal(t, before, e.rawJob(j.ID), "a refused bypass changes nothing")
		})
	}

	t.Run("operator cannot ship a gated job out of review", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.factory("f1")
		j := e.submit(gated)
		e.deliver(j.ID, "aq/job/"+j.ID+"@1")
		before := e.rawJob(j.ID)
		_, err := e.c.Act(e.ctx, "root", prod, j.ID, coord.ActionShip, "looks fine")
		requireCode(t, err, fleet.CodeConflict, "")
		require.Equal(t, before, e.rawJob(j.ID))
		// The operator may still end it: reject or cancel.
		got, err := e.c.Act(e.ctx, "root", prod, j.ID, coord.ActionReject, "not good")
		require.NoError(t, err)
		require.Equal(t, fleet.StageFailed, got.Stage)
	})

	t.Run("an ungated job delivered for review may be shipped by an operator", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.factory("f1")
		j := e.submit()
		cl := e.claim("f1")
		for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageReview} {
			_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch})
			require.NoError(t, err)
		}
		got, err := e.c.Act(e.ctx, "root", prod, j.ID, coord.ActionShip, "")
		require.NoError(t, err)
		require.Equal(t, fleet.StageShipped, got.Stage)
	})
}
