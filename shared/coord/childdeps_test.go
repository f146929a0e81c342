package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// TestChildMayNotWaitOnItsParent: the parent waits for its children, so a
// child depending on the parent, an ancestor, or a job that waits on one
// (through deps or children) would never move, nor would the parent. Such
// a post is refused naming the dependency, and writes nothing.
func TestChildMayNotWaitOnItsParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	root := e.submit("title: root")
	parent := e.postChildrenOne(root.ID, childManifest("parent", "idempotencyKey: parent"))
	free := e.submit("title: free")
	onParent := e.submit("title: waits on the parent", "deps: ["+parent.ID+"]")
	throughChild := e.submit("title: its child waits on the root")
	e.postChildrenOne(throughChild.ID, childManifest("z", "deps: ["+root.ID+"]"))
	tests := []struct {
		name  string
		kids  [][]byte
		field string
	}{
		{"the parent", [][]byte{childManifest("x", "deps: ["+parent.ID+"]")}, "children[0].deps[0]"},
		{"an ancestor", [][]byte{childManifest("x", "deps: ["+root.ID+"]")}, "children[0].deps[0]"},
		{"a job depending on the parent", [][]byte{childManifest("x", "deps: ["+onParent.ID+"]")}, "children[0].deps[0]"},
		{"a job whose child depends on an ancestor", [][]byte{childManifest("x", "deps: ["+throughChild.ID+"]")}, "children[0].deps[0]"},
		{"behind a sibling and a free job", [][]byte{
			childManifest("a", "idempotencyKey: a"),
			childManifest("b", "deps: [a, "+free.ID+", "+parent.ID+"]"),
		}, "children[1].deps[2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshotContainers(store.Jobs, store.Events)
			_, _, err := e.c.PostChildren(e.ctx, prod, parent.ID, dag.ChildrenRequest{Actor: fleet.ActorOperator, ActorID: "op", Manifests: tc.kids})
			requireCode(t, err, fleet.CodeInvalid, tc.field)
			require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Events), "a refused post writes nothing")
		})
	}

	t.Run("its holder's post", func(t *testing.T) {
		cl := e.claimJob("f1", free.ID)
		before := e.snapshotContainers(store.Jobs, store.Events)
		_, _, err := e.c.PostChildren(e.ctx, prod, free.ID, dag.ChildrenRequest{Actor: fleet.ActorFactory, ActorID: "f1", LeaseEpoch: &cl.LeaseEpoch,
			Manifests: [][]byte{childManifest("x", "deps: ["+free.ID+"]")}})
		requireCode(t, err, fleet.CodeInvalid, "children[0].deps[0]")
		require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Events))
	})
	t.Run("an unrelated job and a sibling", func(t *testing.T) {
		kids, _ := e.postChildren(parent.ID, childManifest("a", "idempotencyKey: a"), childManifest("b", "deps: [a, "+free.ID+"]"))
		require.Len(t, kids, 2)
	})
}

// postChildrenOne posts one child as an operator and returns it.
func (e *env) postChildrenOne(parentID string, m []byte) *fleet.Job {
	e.t.Helper()
	kids, _ := e.postChildren(parentID, m)
	return kids[0]
}
