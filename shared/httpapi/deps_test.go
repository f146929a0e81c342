package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestDependencyHoles: over HTTP, cancelling a dependency fails its
// blocked dependant with reason dependency_failed; requeueing the
// dependant while its dependency has not shipped answers it blocked.
func TestDependencyHoles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	dep := f.submit("p1", manifest("r1"))
	waiter := f.submit("p1", manifest("r1", "deps: ["+dep.ID+"]"))
	require.Equal(t, fleet.StageBlocked, waiter.Stage)

	var got fleet.Job
	f.ok(200, &got, "POST", "/api/fleet/jobs/"+dep.ID+"/actions/cancel", rootToken, map[string]any{})
	f.ok(200, &got, "GET", "/api/fleet/jobs/"+waiter.ID, rootToken, nil, product("p1"))
	require.Equal(t, fleet.StageFailed, got.Stage)
	require.Equal(t, dag.ReasonDependencyFailed, got.LastFailure.Reason)

	f.ok(200, &got, "POST", "/api/fleet/jobs/"+dep.ID+"/actions/requeue", rootToken, map[string]any{})
	require.Equal(t, fleet.StageQueued, got.Stage)
	f.ok(200, &got, "POST", "/api/fleet/jobs/"+waiter.ID+"/actions/requeue", rootToken, map[string]any{})
	require.Equal(t, fleet.StageBlocked, got.Stage, "requeued with its dependency unshipped")
}
