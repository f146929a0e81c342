package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// TestHoldersChildKeepsTheParentsGate: the holder of a low job gated by two
// reviewers cannot post its work as an ungated, critical child and ship it
// itself. A child without a gate takes the parent's (and so cannot be
// patched to shipped), a higher priority is lowered to the parent's, a
// weaker gate or a composite child (which carries none) is refused, a
// stronger gate stays. An operator's children are the operator's call.
func TestHoldersChildKeepsTheParentsGate(t *testing.T) {
	t.Parallel()
	// holderPosts posts kid as the holder of a low job gated by alice and
	// bob, each case in an env of its own.
	holderPosts := func(t *testing.T, kid []byte) (*env, []*fleet.Job, error) {
		e := newEnv(t)
		e.factory("f1")
		parent := e.submit("title: parent", "priority: low", "review: {reviewers: [alice, bob], quorum: 2, onReject: fail}")
		cl := e.claimJob("f1", parent.ID)
		before := e.snapshotContainers(store.Jobs, store.Events)
		kids, _, err := e.c.PostChildren(e.ctx, prod, parent.ID, dag.ChildrenRequest{Actor: fleet.ActorFactory, ActorID: "f1",
			LeaseEpoch: &cl.LeaseEpoch, Manifests: [][]byte{kid}})
		if err != nil {
			require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Events), "a refused post writes nothing")
		}
		return e, kids, err
	}

	t.Run("no gate takes the parent's, priority at most the parent's", func(t *testing.T) {
		t.Parallel()
		e, kids, err := holderPosts(t, childManifest("the real work", "priority: critical"))
		require.NoError(t, err)
		kid := e.job(kids[0].ID)
		require.Equal(t, fleet.PriorityLow, kid.Priority)
		require.NotNil(t, kid.Review)
		require.Equal(t, []string{"alice", "bob"}, kid.Review.Reviewers)
		require.Equal(t, 2, kid.Review.Quorum)
		require.Equal(t, fleet.RejectFail, kid.Review.OnReject)

		cl := e.claimJob("f1", kid.ID)
		_, err = e.c.Patch(e.ctx, "f1", prod, kid.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
		require.NoError(t, err)
		_, err = e.c.Patch(e.ctx, "f1", prod, kid.ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: cl.LeaseEpoch})
		require.Error(t, err, "the gate holds the child")
		require.Equal(t, fleet.StageBuilding, e.job(kid.ID).Stage)
	})
	t.Run("a stronger gate stays", func(t *testing.T) {
		t.Parallel()
		_, kids, err := holderPosts(t, childManifest("x", "review: {reviewers: [alice, bob, carol], quorum: 3}"))
		require.NoError(t, err)
		require.Equal(t, []string{"alice", "bob", "carol"}, kids[0].Review.Reviewers)
		require.Equal(t, 3, kids[0].Review.Quorum)
	})
	for _, tc := range []struct {
		name, line, field string
	}{
		{"a reviewer dropped", "review: {reviewers: [alice, carol], quorum: 2}", "children[0].review"},
		{"a lower quorum", "review: {reviewers: [alice, bob], quorum: 1}", "children[0].review"},
		{"any operator", "review: {quorum: 1}", "children[0].review"},
		{"a composite child", "kind: composite", "children[0].kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := holderPosts(t, childManifest("x", tc.line))
			requireCode(t, err, fleet.CodeForbidden, tc.field)
		})
	}
	t.Run("an operator's post", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		parent := e.submit("title: parent", "priority: low", "review: {reviewers: [alice, bob], quorum: 2}")
		kids, _ := e.postChildren(parent.ID, childManifest("x", "priority: critical"), childManifest("y", "kind: composite"))
		require.Nil(t, kids[0].Review)
		require.Equal(t, fleet.PriorityCritical, kids[0].Priority)
		require.Equal(t, fleet.KindComposite, kids[1].Kind)
	})
}
