package coord_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/echo"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// TestChildKeysAreTheirParents: a holder posting children under the keys an
// operator's submit and a tracker item will use plants nothing there: the
// submit creates the operator's own job with its gate, the ingest a root
// job, and the same post again still answers the same children. A submit or
// ingest whose key does name a child (spelled as its parent's, or one
// stored before keys were scoped) is a conflict, never that child.
func TestChildKeysAreTheirParents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	held := e.submit("title: a job the factory holds")
	cl := e.claimJob("f1", held.ID)
	post := dag.ChildrenRequest{Actor: fleet.ActorFactory, ActorID: "f1", LeaseEpoch: &cl.LeaseEpoch, Manifests: [][]byte{
		childManifest("squat", "idempotencyKey: tracker-4711"),
		childManifest("squat2", `idempotencyKey: "tracker:jira:PROJ-1"`),
		childManifest("after", "idempotencyKey: after", "deps: [tracker-4711]"),
	}}
	kids, created, err := e.c.PostChildren(e.ctx, prod, held.ID, post)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, []string{kids[0].ID}, kids[2].Deps, "a sibling is still named by its key")

	op, created, err := e.c.Submit(e.ctx, prod, manifest("title: the operator's", "idempotencyKey: tracker-4711",
		"review: {reviewers: [alice, bob], quorum: 2}"))
	require.NoError(t, err)
	require.True(t, created, "the operator's key is the operator's")
	require.NotContains(t, ids(kids), op.ID)
	require.Empty(t, op.ParentID)
	require.Equal(t, "the operator's", op.Title)
	require.NotNil(t, op.Review)

	tracked, out, err := e.c.Ingest(e.ctx, echo.IngestRequest{ProductID: prod, Ref: fleet.TrackerRef{Source: "jira", ItemID: "PROJ-1", Revision: 1},
		Manifest: manifest("title: from jira")})
	require.NoError(t, err)
	require.Equal(t, echo.IngestCreated, out)
	require.NotContains(t, ids(kids), tracked.ID)
	require.Empty(t, tracked.ParentID)
	require.Equal(t, "squat2", e.job(kids[1].ID).Title, "the child is untouched")

	again, created, err := e.c.PostChildren(e.ctx, prod, held.ID, post)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, ids(kids), ids(again))

	t.Run("a submit whose key is a child's", func(t *testing.T) {
		before := e.snapshotContainers(store.Jobs, store.Events)
		_, _, err := e.c.Submit(e.ctx, prod, manifest(`idempotencyKey: "child:`+held.ID+`:tracker-4711"`))
		requireCode(t, err, fleet.CodeConflict, "idempotencyKey")
		require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Events))
	})
	t.Run("an ingest whose key a child stored before keys were scoped holds", func(t *testing.T) {
		legacy := *e.job(kids[1].ID)
		legacy.ID, legacy.Title, legacy.Rev = kernel.KeyedID(prod, "tracker:jira:PROJ-2"), "planted", ""
		body, err := json.Marshal(&legacy)
		require.NoError(t, err)
		_, err = e.raw.Create(e.ctx, store.Jobs, prod, legacy.ID, body)
		require.NoError(t, err)
		before := e.snapshotContainers(store.Jobs, store.Events)
		_, _, err = e.c.Ingest(e.ctx, echo.IngestRequest{ProductID: prod, Ref: fleet.TrackerRef{Source: "jira", ItemID: "PROJ-2", Revision: 1},
			Manifest: manifest("title: from jira")})
		requireCode(t, err, fleet.CodeConflict, "idempotencyKey")
		require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Events))
	})
}
