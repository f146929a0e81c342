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
)

// endDep takes the job to stage the way it gets there in production: the
// holder failing it for good, failing it retryably with no attempts left,
// or an operator cancelling it.
func (e *env) endDep(id string, stage fleet.Stage) {
	e.t.Helper()
	switch stage {
	case fleet.StageCancelled:
		_, err := e.c.Act(e.ctx, "op", prod, id, coord.ActionCancel, "not needed")
		require.NoError(e.t, err)
	case fleet.StageFailed, fleet.StageDeadLetter:
		cl, err := e.c.Claim(e.ctx, e.as("f1"))
		require.NoError(e.t, err)
		require.NotNil(e.t, cl)
		require.Equal(e.t, id, cl.Job.ID)
		_, err = e.c.Fail(e.ctx, "f1", prod, id, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "broken", Retryable: stage == fleet.StageDeadLetter})
		require.NoError(e.t, err)
	case fleet.StageShipped:
		cl := e.claim("f1")
		require.Equal(e.t, id, cl.Job.ID)
		for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
			_, err := e.c.Patch(e.ctx, "f1", prod, id, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch})
			require.NoError(e.t, err)
		}
	}
	require.Equal(e.t, stage, e.job(id).Stage)
}

func requireDependencyFailed(t *testing.T, e *env, id string) {
	t.Helper()
	got := e.job(id)
	require.Equal(t, fleet.StageFailed, got.Stage)
	require.NotNil(t, got.LastFailure)
	require.Equal(t, dag.ReasonDependencyFailed, got.LastFailure.Reason)
	require.False(t, got.LastFailure.Retryable)
	evs := e.events(id)
	requireContiguous(t, evs)
	last := evs[len(evs)-1]
	require.Equal(t, fleet.EventDependencyFailed, last.Type)
	require.Equal(t, fleet.StageBlocked, last.From)
	require.Equal(t, fleet.StageFailed, last.To)
	require.Equal(t, fleet.ActorSystem, last.Actor)
}

// TestDependencyEndedUnshipped: a blocked job whose dependencies can no
// longer be satisfied (a dependency ended failed, dead_letter or
// cancelled) fails at once with reason dependency_failed, and so do the
// jobs waiting on it; nothing waits forever. With depsMode any it waits
// while another dependency may still ship.
func TestDependencyEndedUnshipped(t *testing.T) {
	t.Parallel()
	for _, end := range []fleet.Stage{fleet.StageFailed, fleet.StageDeadLetter, fleet.StageCancelled} {
		t.Run(string(end), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			dep := e.submit("title: dep", "maxAttempts: 1", "priority: high")
			waiter := e.submit("deps: ["+dep.ID+"]", "title: waiter")
			grand := e.submit("deps: ["+waiter.ID+"]", "title: grand-waiter")
			require.Equal(t, fleet.StageBlocked, waiter.Stage)
			e.endDep(dep.ID, end)
			requireDependencyFailed(t, e, waiter.ID)
			requireDependencyFailed(t, e, grand.ID)
			evs := e.events(waiter.ID)
			require.Contains(t, evs[len(evs)-1].Message, dep.ID, "the event names the dependency")
		})
	}

	t.Run("depsMode any", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.factory("f1")
		a := e.submit("title: a", "priority: critical")
		b := e.submit("title: b", "priority: high")
		waiter := e.submit(fmt.Sprintf("deps: [%s, %s]", a.ID, b.ID), "depsMode: any", "title: waiter")
		e.endDep(a.ID, fleet.StageFailed)
		require.Equal(t, fleet.StageBlocked, e.job(waiter.ID).Stage, "b may still ship")
		e.endDep(b.ID, fleet.StageCancelled)
		requireDependencyFailed(t, e, waiter.ID)
	})

	t.Run("dependency already ended at submit", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.factory("f1")
		dep := e.submit("title: dep")
		e.endDep(dep.ID, fleet.StageCancelled)
		j, created, err := e.c.Submit(e.ctx, prod, manifest("deps: ["+dep.ID+"]", "title: late"))
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, fleet.StageFailed, j.Stage, "the submit answers the job as it is")
		requireDependencyFailed(t, e, j.ID)
	})
}

// TestRequeueWithUnmetDeps: requeueing a job whose dependencies have not
// shipped puts it in blocked, not queued (where it could be claimed and run
// without them); it is queued once they ship. With them shipped, a requeue
// queues it.
func TestRequeueWithUnmetDeps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	dep := e.submit("title: dep", "priority: high")
	waiter := e.submit("deps: ["+dep.ID+"]", "title: waiter")
	_, err := e.c.Act(e.ctx, "op", prod, waiter.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	got, err := e.c.Act(e.ctx, "op", prod, waiter.ID, coord.ActionRequeue, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageBlocked, got.Stage)
	require.Equal(t, fleet.StageBlocked, e.job(waiter.ID).Stage)

	cl := e.claim("f1")
	require.Equal(t, dep.ID, cl.Job.ID, "only the dependency is claimable")
	cl2, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, cl2, "the requeued job waits for its dependency")
	for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
		_, err := e.c.Patch(e.ctx, "f1", prod, dep.ID, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch})
		require.NoError(t, err)
	}
	require.Equal(t, fleet.StageQueued, e.job(waiter.ID).Stage)

	// Dependencies met: a requeue queues at once.
	_, err = e.c.Act(e.ctx, "op", prod, waiter.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	got, err = e.c.Act(e.ctx, "op", prod, waiter.ID, coord.ActionRequeue, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageQueued, got.Stage)
}

// TestRequeueAfterDependencyFailed: requeueing the failed dependency and
// then its dependant lets the dependant wait (blocked) and run once the
// dependency ships.
func TestRequeueAfterDependencyFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	dep := e.submit("title: dep", "priority: high")
	waiter := e.submit("deps: ["+dep.ID+"]", "title: waiter")
	e.endDep(dep.ID, fleet.StageFailed)
	requireDependencyFailed(t, e, waiter.ID)

	_, err := e.c.Act(e.ctx, "op", prod, dep.ID, coord.ActionRequeue, "")
	require.NoError(t, err)
	got, err := e.c.Act(e.ctx, "op", prod, waiter.ID, coord.ActionRequeue, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageBlocked, got.Stage)
	e.endDep(dep.ID, fleet.StageShipped)
	require.Equal(t, fleet.StageQueued, e.job(waiter.ID).Stage)
}

// TestSweepFailsStrandedDependants: a dependant whose pass was lost (its
// dependency was cancelled but the process died before failing it) shows
// in metrics as a blocked_on_failed alert, and the next sweep fails it.
func TestSweepFailsStrandedDependants(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dep := e.submit("title: dep")
	waiter := e.submit("deps: ["+dep.ID+"]", "title: waiter")

	// Cancel the dependency behind the coordinator's back: no pass runs.
	it := e.rawJob(dep.ID)
	cancelled := *e.job(dep.ID)
	cancelled.Stage = fleet.StageCancelled
	body, err := json.Marshal(&cancelled)
	require.NoError(t, err)
	_, err = e.raw.Replace(e.ctx, store.Jobs, prod, dep.ID, body, it.Rev)
	require.NoError(t, err)
	require.Equal(t, fleet.StageBlocked, e.job(waiter.ID).Stage)

	m, err := e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.True(t, hasAlert(m.Alerts, fleet.AlertBlockedOnFailed), "alerts: %v", m.Alerts)
	for _, a := range m.Alerts {
		if a.Kind == fleet.AlertBlockedOnFailed {
			require.Equal(t, prod+"/"+waiter.ID, a.Subject)
			require.Equal(t, fleet.SeverityWarning, a.Severity)
		}
	}

	_, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	requireDependencyFailed(t, e, waiter.ID)
	m, err = e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.False(t, hasAlert(m.Alerts, fleet.AlertBlockedOnFailed), "alerts: %v", m.Alerts)
}

func hasAlert(alerts []fleet.Alert, kind fleet.AlertKind) bool {
	for _, a := range alerts {
		if a.Kind == kind {
			return true
		}
	}
	return false
}

// TestSettlingDependantsReadsNoEndedJob: when a job ends, its blocked
// dependants are settled with the stage just written, not by reading the
// ended job back once per dependant.
func TestSettlingDependantsReadsNoEndedJob(t *testing.T) {
	t.Parallel()
	var h *hookStore
	e := newEnv(t, withStore(func(s store.Store) store.Store { h = &hookStore{Store: s}; return h }))
	dep := e.submit()
	var dependants []*fleet.Job
	for range 3 {
		dependants = append(dependants, e.submit("deps: ["+dep.ID+"]"))
	}
	before := h.jobReadsOf(dep.ID)
	_, err := e.c.Act(e.ctx, "op", prod, dep.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	require.LessOrEqual(t, h.jobReadsOf(dep.ID)-before, 1,
		"at most the cancel's own read: the cancelled job was read back to settle its dependants")
	for _, d := range dependants {
		requireDependencyFailed(t, e, d.ID)
	}
}
