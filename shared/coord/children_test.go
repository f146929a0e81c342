package coord_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// claimJob claims job id as factoryID, releasing whatever else the claim
// hands out first (a claim picks among the best jobs at random).
func (e *env) claimJob(factoryID, id string) *protocol.Claimed {
	e.t.Helper()
	for range 50 {
		cl := e.claim(factoryID)
		if cl.Job.ID == id {
			return cl
		}
		_, err := e.c.Release(e.ctx, factoryID, prod, cl.Job.ID, cl.LeaseEpoch)
		require.NoError(e.t, err)
	}
	e.t.Fatalf("job %s never came up in a claim", id)
	return nil
}

// shipJob claims job id as f1 and ships it through building.
func (e *env) shipJob(id string) {
	e.t.Helper()
	cl := e.claimJob("f1", id)
	for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
		_, err := e.c.Patch(e.ctx, "f1", prod, id, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch})
		require.NoError(e.t, err)
	}
}

func childManifest(title string, lines ...string) []byte {
	return manifest(append([]string{"title: " + title}, lines...)...)
}

func (e *env) postChildren(parentID string, manifests ...[]byte) ([]*fleet.Job, bool) {
	e.t.Helper()
	kids, created, err := e.c.PostChildren(e.ctx, prod, parentID, dag.ChildrenRequest{Actor: fleet.ActorOperator, ActorID: "op", Manifests: manifests})
	require.NoError(e.t, err)
	return kids, created
}

func ids(jobs []*fleet.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestCompositeChildrenShipInDependencyOrder: an operator gives a composite
// job three children, the third depending on the second by its
// idempotencyKey. The parent waits in blocked, the dependant waits for its
// sibling, and the parent ships the moment the last child does, from that
// child's own transition (no sweep runs). Posting the same children again
// answers the same jobs and changes nothing.
func TestCompositeChildrenShipInDependencyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	parent := e.submit("title: epic", "kind: composite")
	kids := [][]byte{
		childManifest("a", "idempotencyKey: a"),
		childManifest("b", "idempotencyKey: b"),
		childManifest("c", "idempotencyKey: c", "deps: [b]"),
	}
	got, created := e.postChildren(parent.ID, kids...)
	require.True(t, created)
	require.Len(t, got, 3)
	a, b, c := got[0], got[1], got[2]
	for i, k := range got {
		require.Equal(t, parent.ID, k.ParentID)
		require.Equal(t, parent.ID, k.RootID)
		require.Equal(t, 1, k.Depth)
		require.Equal(t, prod, k.ProductID)
		require.Equal(t, []string{"a", "b", "c"}[i], k.IdempotencyKey)
	}
	require.Equal(t, []string{b.ID}, c.Deps, "a sibling's key resolves to its id")
	require.Equal(t, fleet.StageBlocked, c.Stage)
	p := e.job(parent.ID)
	require.Equal(t, fleet.StageBlocked, p.Stage)
	require.Equal(t, ids(got), p.Children)
	evs := e.events(parent.ID)
	requireContiguous(t, evs)
	require.Equal(t, fleet.EventChildren, evs[len(evs)-1].Type)

	again, created := e.postChildren(parent.ID, kids...)
	require.False(t, created)
	require.Equal(t, ids(got), ids(again), "idempotent re-post")
	require.Len(t, e.events(parent.ID), len(evs), "a re-post writes nothing")

	e.shipJob(a.ID)
	require.Equal(t, fleet.StageBlocked, e.job(c.ID).Stage)
	require.Equal(t, fleet.StageBlocked, e.job(parent.ID).Stage)
	e.shipJob(b.ID)
	require.Equal(t, fleet.StageQueued, e.job(c.ID).Stage, "c runs once b shipped")
	e.shipJob(c.ID)
	p = e.job(parent.ID)
	require.Equal(t, fleet.StageShipped, p.Stage, "a composite job ships with its last child")
	evs = e.events(parent.ID)
	require.Equal(t, fleet.ActorSystem, evs[len(evs)-1].Actor)

	tree, err := e.c.DAG(e.ctx, prod, c.ID)
	require.NoError(t, err)
	require.Equal(t, parent.ID, tree.RootID)
	require.Len(t, tree.Nodes, 4)
	require.Equal(t, map[fleet.Stage]int{fleet.StageShipped: 4}, tree.Counts)
	require.ElementsMatch(t, []dag.Edge{
		{From: parent.ID, To: a.ID, Kind: dag.EdgeChild}, {From: parent.ID, To: b.ID, Kind: dag.EdgeChild},
		{From: parent.ID, To: c.ID, Kind: dag.EdgeChild}, {From: b.ID, To: c.ID, Kind: dag.EdgeDep},
	}, tree.Edges)
}

// TestHolderPostsChildren: the holder posting children (fenced) gives its
// seat back: the lease is released and the job waits in blocked. When the
// children have shipped, a task (not composite) is queued for its own step.
// A stale epoch is fenced and writes nothing, not even a child.
func TestHolderPostsChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	parent := e.submit("title: planner")
	cl := e.claim("f1")
	_, err := e.c.Patch(e.ctx, "f1", prod, parent.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)

	before := e.snapshotContainers(store.Jobs)
	_, _, err = e.c.PostChildren(e.ctx, prod, parent.ID, dag.ChildrenRequest{Actor: fleet.ActorFactory, ActorID: "f1",
		LeaseEpoch: ptr(cl.LeaseEpoch + 1), Manifests: [][]byte{childManifest("x")}})
	requireCode(t, err, fleet.CodeFenced, "")
	_, _, err = e.c.PostChildren(e.ctx, prod, parent.ID, dag.ChildrenRequest{Actor: fleet.ActorFactory, ActorID: "f2",
		LeaseEpoch: ptr(cl.LeaseEpoch), Manifests: [][]byte{childManifest("x")}})
	requireCode(t, err, fleet.CodeFenced, "")
	require.Equal(t, before, e.snapshotContainers(store.Jobs), "a fenced post writes nothing")

	req := dag.ChildrenRequest{Actor: fleet.ActorFactory, ActorID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch),
		Manifests: [][]byte{childManifest("x"), childManifest("y")}}
	kids, created, err := e.c.PostChildren(e.ctx, prod, parent.ID, req)
	require.NoError(t, err)
	require.True(t, created)
	p := e.job(parent.ID)
	require.Equal(t, fleet.StageBlocked, p.Stage)
	_, held := p.Lease()
	require.False(t, held, "the holder gave its seat back")
	require.Equal(t, cl.LeaseEpoch, p.LeaseEpoch, "released, not revoked")
	runs, err := e.c.Runs(e.ctx, prod, parent.ID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, fleet.RunSucceeded, runs[0].Result)

	// The holder retrying a post whose answer it lost gets the same
	// children, though it no longer holds the lease.
	again, created, err := e.c.PostChildren(e.ctx, prod, parent.ID, req)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, ids(kids), ids(again))

	e.shipJob(kids[0].ID)
	require.Equal(t, fleet.StageBlocked, e.job(parent.ID).Stage)
	e.shipJob(kids[1].ID)
	p = e.job(parent.ID)
	require.Equal(t, fleet.StageQueued, p.Stage, "a task runs its own step once its children shipped")
	require.Equal(t, 0, p.Attempts)
}

// TestChildFailureFailsDependantsAndParent: a child ending unshipped fails
// the siblings waiting on it and the parent with dependency_failed, and so
// the grandparent; nothing is left blocked.
func TestChildFailureFailsDependantsAndParent(t *testing.T) {
	t.Parallel()
	for _, end := range []fleet.Stage{fleet.StageFailed, fleet.StageDeadLetter, fleet.StageCancelled} {
		t.Run(string(end), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			root := e.submit("title: root", "kind: composite")
			mid, _ := e.postChildren(root.ID, childManifest("mid", "kind: composite"))
			kids, _ := e.postChildren(mid[0].ID,
				childManifest("bad", "idempotencyKey: bad", "maxAttempts: 1", "priority: critical"),
				childManifest("after-bad", "deps: [bad]"),
				childManifest("independent"))
			e.endDep(kids[0].ID, end)
			requireDependencyFailed(t, e, kids[1].ID)
			requireDependencyFailed(t, e, mid[0].ID)
			requireDependencyFailed(t, e, root.ID)
			require.Contains(t, e.events(mid[0].ID)[len(e.events(mid[0].ID))-1].Message, kids[0].ID)
			blocked, _, err := e.c.ListJobs(e.ctx, prod, fleet.StageBlocked, 100, "")
			require.NoError(t, err)
			require.Empty(t, blocked, "nothing waits forever")
			require.Equal(t, fleet.StageQueued, e.job(kids[2].ID).Stage, "a sibling nobody waits on runs on")
		})
	}
}

// TestCancelReachesEveryDescendant: cancelling a parent cancels each
// non-terminal descendant, dependants before their dependencies; a leased
// one is asked to stop like any leased job and ends cancelled when its
// holder acknowledges; shipped ones stay shipped.
func TestCancelReachesEveryDescendant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	root := e.submit("title: root", "kind: composite")
	kids, _ := e.postChildren(root.ID,
		childManifest("done", "priority: critical"),
		childManifest("running", "idempotencyKey: running", "priority: high"),
		childManifest("waits", "deps: [running]"),
		childManifest("sub", "kind: composite"))
	grand, _ := e.postChildren(kids[3].ID, childManifest("grandchild"), childManifest("grandchild 2", "priority: low"))
	e.shipJob(kids[0].ID)
	cl := e.claimJob("f1", kids[1].ID)
	_, err := e.c.Patch(e.ctx, "f1", prod, kids[1].ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)

	got, err := e.c.Act(e.ctx, "op", prod, root.ID, coord.ActionCancel, "scrapped")
	require.NoError(t, err)
	require.Equal(t, fleet.StageCancelled, got.Stage)
	require.Equal(t, fleet.StageShipped, e.job(kids[0].ID).Stage)
	running := e.job(kids[1].ID)
	require.Equal(t, fleet.StageBuilding, running.Stage, "the holder still has it")
	require.True(t, running.CancelRequested)
	_, err = e.c.ReleaseWith(e.ctx, "f1", prod, kids[1].ID, coord.ReleaseRequest{LeaseEpoch: cl.LeaseEpoch, Outcome: fleet.ReleaseCancelled})
	require.NoError(t, err)
	for _, id := range []string{kids[1].ID, kids[2].ID, kids[3].ID, grand[0].ID, grand[1].ID} {
		j := e.job(id)
		require.Equal(t, fleet.StageCancelled, j.Stage, "%s (%s)", j.Title, id)
		_, held := j.Lease()
		require.False(t, held)
	}
	evs := e.events(kids[2].ID)
	require.Equal(t, fleet.EventCancel, evs[len(evs)-1].Type, "the dependant is cancelled, not failed for its dependency")
	require.Contains(t, evs[len(evs)-1].Message, "cancelled with "+root.ID)
	_, err = e.c.Patch(e.ctx, "f1", prod, kids[1].ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: cl.LeaseEpoch})
	requireCode(t, err, fleet.CodeFenced, "")
}

// TestRequeueParentWaitsForChildren: requeueing a parent failed by its
// child puts it back in blocked until the (requeued) child ships.
func TestRequeueParentWaitsForChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	parent := e.submit("title: parent")
	kids, _ := e.postChildren(parent.ID, childManifest("child"))
	e.endDep(kids[0].ID, fleet.StageCancelled)
	requireDependencyFailed(t, e, parent.ID)
	_, err := e.c.Act(e.ctx, "op", prod, kids[0].ID, coord.ActionRequeue, "")
	require.NoError(t, err)
	got, err := e.c.Act(e.ctx, "op", prod, parent.ID, coord.ActionRequeue, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageBlocked, got.Stage)
	e.shipJob(kids[0].ID)
	require.Equal(t, fleet.StageQueued, e.job(parent.ID).Stage)
}

// TestSweepSettlesStrandedParent: a parent whose child ended while its
// settling was lost (written behind the coordinator's back here) is settled
// by the redispatch sweep, the safety net.
func TestSweepSettlesStrandedParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	parent := e.submit("title: parent", "kind: composite")
	kids, _ := e.postChildren(parent.ID, childManifest("child"))
	it := e.rawJob(kids[0].ID)
	shipped := *e.job(kids[0].ID)
	shipped.Stage = fleet.StageShipped
	body, err := json.Marshal(&shipped)
	require.NoError(t, err)
	_, err = e.raw.Replace(e.ctx, store.Jobs, prod, kids[0].ID, body, it.Rev)
	require.NoError(t, err)
	require.Equal(t, fleet.StageBlocked, e.job(parent.ID).Stage)
	_, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	require.Equal(t, fleet.StageShipped, e.job(parent.ID).Stage)
}

// TestChildrenBadInput: every refused request names its field and writes
// nothing.
func TestChildrenBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	parent := e.submit("title: parent")
	other := e.submit("title: other", `idempotencyKey: "child:`+parent.ID+`:taken"`)
	many := make([][]byte, fleet.MaxChildrenPerRequest+1)
	for i := range many {
		many[i] = childManifest(fmt.Sprintf("c%d", i))
	}
	tests := []struct {
		name      string
		manifests [][]byte
		code      fleet.Code
		field     string
	}{
		{"none", nil, fleet.CodeInvalid, "children"},
		{"too many", many, fleet.CodeInvalid, "children"},
		{"a bad manifest", [][]byte{childManifest("ok"), []byte("no front matter")}, fleet.CodeInvalid, "children[1]"},
		{"a bad field", [][]byte{childManifest("ok"), childManifest("bad", "priority: urgent")}, fleet.CodeInvalid, "children[1].priority"},
		{"a repo the product does not own", [][]byte{childManifest("ok"), childManifest("bad", "repo: nobodys")}, fleet.CodeRepoNotOwned, "children[1].repo"},
		{"an unknown dependency", [][]byte{childManifest("ok"), childManifest("bad", "deps: [jnope]")}, fleet.CodeInvalid, "children[1].deps[0]"},
		{"an unknown persona", [][]byte{childManifest("bad", "persona: ghost")}, fleet.CodeInvalid, "children[0].persona"},
		{"another parent", [][]byte{childManifest("bad", "parentId: "+other.ID)}, fleet.CodeInvalid, "children[0].parentId"},
		{"a cycle", [][]byte{childManifest("x", "idempotencyKey: x", "deps: [y]"), childManifest("y", "idempotencyKey: y", "deps: [x]")}, fleet.CodeInvalid, "children[0].deps"},
		{"depends on itself", [][]byte{childManifest("x", "idempotencyKey: x", "deps: [x]")}, fleet.CodeInvalid, "children[0].deps[0]"},
		{"the same key twice", [][]byte{childManifest("x", "idempotencyKey: x"), childManifest("x2", "idempotencyKey: x")}, fleet.CodeInvalid, "children[1].idempotencyKey"},
		{"a key naming a job that is no child", [][]byte{childManifest("x", "idempotencyKey: taken")}, fleet.CodeConflict, "children[0].idempotencyKey"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshotContainers(store.Jobs, store.Events)
			_, _, err := e.c.PostChildren(e.ctx, prod, parent.ID, dag.ChildrenRequest{Actor: fleet.ActorOperator, ActorID: "op", Manifests: tc.manifests})
			requireCode(t, err, tc.code, tc.field)
			require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Events), "a refused post writes nothing")
		})
	}

	t.Run("an operator posting to a running job", func(t *testing.T) {
		running := e.submit("title: running", "priority: critical")
		e.claimJob("f1", running.ID)
		_, _, err := e.c.PostChildren(e.ctx, prod, running.ID, dag.ChildrenRequest{Actor: fleet.ActorOperator, ActorID: "op",
			Manifests: [][]byte{childManifest("x")}})
		requireCode(t, err, fleet.CodeConflict, "")
	})
	t.Run("a manifest naming a parent on submit", func(t *testing.T) {
		_, _, err := e.c.Submit(e.ctx, prod, manifest("parentId: "+parent.ID))
		requireCode(t, err, fleet.CodeInvalid, "parentId")
	})
}

// TestTreeLimits: a tree deeper than fleet.MaxTreeDepth, or holding more
// than fleet.MaxTreeJobs jobs, is refused naming children.
func TestTreeLimits(t *testing.T) {
	t.Parallel()
	t.Run("depth", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		id := e.submit("title: root", "kind: composite").ID
		for d := 1; d <= fleet.MaxTreeDepth; d++ {
			kids, _ := e.postChildren(id, childManifest(fmt.Sprintf("depth %d", d), "kind: composite"))
			require.Equal(t, d, kids[0].Depth)
			id = kids[0].ID
		}
		_, _, err := e.c.PostChildren(e.ctx, prod, id, dag.ChildrenRequest{Actor: fleet.ActorOperator, ActorID: "op",
			Manifests: [][]byte{childManifest("too deep")}})
		requireCode(t, err, fleet.CodeInvalid, "children")
		require.Contains(t, err.Error(), "depth")
	})
	t.Run("jobs per tree", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		root := e.submit("title: root", "kind: composite")
		batch := func(n, from int) [][]byte {
			out := make([][]byte, n)
			for i := range out {
				out[i] = childManifest(fmt.Sprintf("c%d", from+i))
			}
			return out
		}
		made := 1
		for made+fleet.MaxChildrenPerRequest <= fleet.MaxTreeJobs {
			e.postChildren(root.ID, batch(fleet.MaxChildrenPerRequest, made)...)
			made += fleet.MaxChildrenPerRequest
		}
		if rest := fleet.MaxTreeJobs - made; rest > 0 {
			e.postChildren(root.ID, batch(rest, made)...)
		}
		_, _, err := e.c.PostChildren(e.ctx, prod, root.ID, dag.ChildrenRequest{Actor: fleet.ActorOperator, ActorID: "op",
			Manifests: [][]byte{childManifest("one too many")}})
		requireCode(t, err, fleet.CodeInvalid, "children")
		require.Contains(t, err.Error(), "limit")
		require.Len(t, e.job(root.ID).Children, fleet.MaxTreeJobs-1)
	})
}
