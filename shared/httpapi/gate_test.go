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
	j, tok, c := f.heldJob("review: {reviewers: [alice, bob], quorum: 2}")
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

// TestReviewGateHolderCannotWeaken is the attack of issue 23 item 5: the
// holder of a job gated on two of root and p1-op asked for a review by one
// operator of its choosing (reviewers [multi-op], quorum 1), whose single
// approval then passed the gate. The holder may send only leaseEpoch and
// head (403 naming the field, nothing changed); an operator may not lower
// the quorum either; the gate still needs both manifest reviewers.
func TestReviewGateHolderCannotWeaken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob("review: {reviewers: [root, p1-op], quorum: 2}")
	f.ok(200, nil, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch})
	path := "/api/fleet/jobs/" + j.ID + "/review/request"
	head := "aq/job/" + j.ID + "@1"

	before := f.snapshot()
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"leaseEpoch": c.LeaseEpoch, "head": head, "reviewers": []string{"multi-op"}, "quorum": 1}, "reviewers"},
		{map[string]any{"leaseEpoch": c.LeaseEpoch, "head": head, "quorum": 1}, "quorum"},
	} {
		res := f.call("POST", path, tok, tc.body)
		require.Equal(t, http.StatusForbidden, res.status, "%s", res)
		e := res.errorOf(t)
		require.Equal(t, fleet.CodeForbidden, e.Code)
		require.Equal(t, tc.field, e.Field)
	}
	require.Equal(t, before, f.snapshot(), "a refused request changes nothing")

	var got fleet.Job
	f.ok(200, &got, "POST", path, tok, map[string]any{"leaseEpoch": c.LeaseEpoch, "head": head})
	require.Equal(t, fleet.StageReview, got.Stage)
	res := f.call("POST", path, rootToken, map[string]any{"quorum": 1})
	require.Equal(t, http.StatusForbidden, res.status, "%s", res)
	require.Equal(t, "quorum", res.errorOf(t).Field)
	res = f.call("POST", path, rootToken, map[string]any{"reviewers": []string{"root"}})
	require.Equal(t, http.StatusForbidden, res.status, "%s", res)
	require.Equal(t, "reviewers", res.errorOf(t).Field)
	res = f.call("POST", path, rootToken, map[string]any{"quorum": 3})
	require.Equal(t, http.StatusBadRequest, res.status, "more approvals than reviewers: %s", res)
	require.Equal(t, "quorum", res.errorOf(t).Field)

	vote := map[string]any{"approve": true, "head": head}
	require.Equal(t, http.StatusForbidden, f.call("POST", "/api/fleet/jobs/"+j.ID+"/review", multiToken, vote).status, "multi-op is no reviewer")
	f.ok(200, &got, "POST", "/api/fleet/jobs/"+j.ID+"/review", rootToken, vote)
	require.Equal(t, fleet.StageReview, got.Stage, "one approval is not the manifest's quorum")
	f.ok(200, &got, "POST", "/api/fleet/jobs/"+j.ID+"/review", p1Token, vote)
	require.Equal(t, fleet.StageTesting, got.Stage)
}
