package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestReviewGateBypassRefused: the holder of a gated job cannot PATCH it
// to testing (or shipped) past the gate; it gets 409 conflict and the job
// stays where it was. Delivering it for review is the way on.
func TestReviewGateBypassRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	tok := f.enroll("f1", []string{"p1"}, "r1")
	j := f.submit("p1", manifest("r1", "review: {reviewers: [alice, bob], quorum: 2}"))
	c := f.claim(tok)
	f.ok(200, nil, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch})
	before := f.snapshot()
	for _, stage := range []string{"testing", "shipped"} {
		res := f.call("PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": stage, "leaseEpoch": c.LeaseEpoch})
		require.Equal(t, http.StatusConflict, res.status, "%s: %s", stage, res)
		require.Equal(t, fleet.CodeConflict, res.errorOf(t).Code)
	}
	require.Equal(t, before, f.snapshot(), "a refused bypass changes nothing")
	var got fleet.Job
	f.ok(200, &got, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "review", "leaseEpoch": c.LeaseEpoch, "checkpoint": "aq/job/" + j.ID + "@1"})
	require.Equal(t, fleet.StageReview, got.Stage)
	res := f.call("POST", "/api/fleet/jobs/"+j.ID+"/actions/ship", rootToken, map[string]any{"reason": "skip it"})
	require.Equal(t, http.StatusConflict, res.status, "%s", res)
}
