package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestChildrenAndDAG: over HTTP, an operator posts children (raw manifest
// strings and {"manifest"} objects alike) with 201, the same again with 200
// and the same jobs; GET .../dag shows the tree. A holder posts with its
// leaseEpoch and gives its seat back.
func TestChildrenAndDAG(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	tok := f.enroll("f1", []string{"p1"}, "r1")
	parent := f.submit("p1", manifest("r1", "kind: composite"))
	body := map[string]any{"children": []any{
		manifest("r1", "idempotencyKey: a"),
		map[string]any{"manifest": manifest("r1", "idempotencyKey: b", "deps: [a]")},
	}}
	var kids api.List[fleet.Job]
	f.ok(http.StatusCreated, &kids, "POST", "/api/fleet/jobs/"+parent.ID+"/children", rootToken, body)
	require.Len(t, kids.Items, 2)
	require.Equal(t, []string{kids.Items[0].ID}, kids.Items[1].Deps)
	var again api.List[fleet.Job]
	f.ok(http.StatusOK, &again, "POST", "/api/fleet/jobs/"+parent.ID+"/children", rootToken, body)
	require.Equal(t, kids.Items[0].ID, again.Items[0].ID)
	require.Equal(t, kids.Items[1].ID, again.Items[1].ID)

	var tree dag.View
	require.Equal(t, 403, f.call("GET", "/api/fleet/jobs/"+kids.Items[1].ID+"/dag", tok, nil).status, "a factory reads the DAG only of a job it holds")
	f.ok(200, &tree, "GET", "/api/fleet/jobs/"+kids.Items[1].ID+"/dag", rootToken, nil)
	require.Equal(t, parent.ID, tree.RootID)
	require.Len(t, tree.Nodes, 3)
	require.Equal(t, map[fleet.Stage]int{fleet.StageBlocked: 2, fleet.StageQueued: 1}, tree.Counts)
	require.Contains(t, tree.Edges, dag.Edge{From: kids.Items[0].ID, To: kids.Items[1].ID, Kind: dag.EdgeDep})

	planner := f.submit("p1", manifest("r1", "priority: critical"))
	c := f.claim(tok)
	require.Equal(t, planner.ID, c.Job.ID)
	f.ok(http.StatusCreated, &kids, "POST", "/api/fleet/jobs/"+planner.ID+"/children", tok,
		map[string]any{"leaseEpoch": c.LeaseEpoch, "children": []string{manifest("r1", "idempotencyKey: step")}})
	var got fleet.Job
	f.ok(200, &got, "GET", "/api/fleet/jobs/"+planner.ID, tok, nil)
	require.Equal(t, fleet.StageBlocked, got.Stage)
	require.Empty(t, got.HolderFactoryID, "the holder gave its seat back")
}

// TestReviewOverHTTP: the voter is the operator token's name. Two distinct
// listed reviewers pass the gate; the same one twice does not; one not
// listed is 403; a vote on an old head is 409.
func TestReviewOverHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob("review: {reviewers: [root, p1-op, carol], quorum: 2}")
	f.ok(200, nil, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch})
	head := "aq/job/" + j.ID + "@1"
	f.ok(200, nil, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "review", "leaseEpoch": c.LeaseEpoch, "checkpoint": head})

	vote := map[string]any{"approve": true, "head": head, "comment": "fine"}
	var got fleet.Job
	f.ok(200, &got, "POST", "/api/fleet/jobs/"+j.ID+"/review", rootToken, vote)
	f.ok(200, &got, "POST", "/api/fleet/jobs/"+j.ID+"/review", rootToken, vote)
	require.Equal(t, fleet.StageReview, got.Stage, "the same reviewer twice")
	require.Equal(t, []string{"p1-op", "carol"}, got.Review.Awaiting)

	res := f.call("POST", "/api/fleet/jobs/"+j.ID+"/review", multiToken, vote)
	require.Equal(t, http.StatusForbidden, res.status, "%s", res)
	res = f.call("POST", "/api/fleet/jobs/"+j.ID+"/review", p1Token, map[string]any{"approve": true, "head": "aq/job/" + j.ID + "@0"})
	require.Equal(t, http.StatusConflict, res.status, "%s", res)
	require.Equal(t, fleet.CodeConflict, res.errorOf(t).Code)
	require.Equal(t, "head", res.errorOf(t).Field)

	f.ok(200, &got, "POST", "/api/fleet/jobs/"+j.ID+"/review", p1Token, vote)
	require.Equal(t, fleet.StageTesting, got.Stage)
	var evs api.List[fleet.Event]
	f.ok(200, &evs, "GET", "/api/fleet/jobs/"+j.ID+"/events", rootToken, nil)
	last := evs.Items[len(evs.Items)-1]
	require.Equal(t, fleet.EventReviewVote, last.Type)
	require.Equal(t, "p1-op", last.ActorID)
}
