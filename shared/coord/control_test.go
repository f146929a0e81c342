package coord_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

func (e *env) runs(id string) []fleet.Run {
	e.t.Helper()
	rs, err := e.c.Runs(e.ctx, prod, id)
	require.NoError(e.t, err)
	return rs
}

// TestCancelLeasedIsAcknowledged: cancelling a leased job asks its holder
// (control message, renewal answer) and leaves the job with it; the holder's
// release with outcome cancelled ends it cancelled with its checkpoint, the
// run cancelled and the event saying it was acknowledged.
func TestCancelLeasedIsAcknowledged(t *testing.T) {
	t.Parallel()
	e, pub := dispatchEnv(t)
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)

	got, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "wrong repo")
	require.NoError(t, err)
	require.Equal(t, fleet.StageBuilding, got.Stage, "the holder still has it")
	require.True(t, got.CancelRequested)
	require.Equal(t, t0, got.StopRequestedAt)
	require.Equal(t, []protocol.ControlMessage{{Action: protocol.ControlCancel, JobID: j.ID, ProductID: prod,
		TargetFactoryID: "f1", LeaseEpoch: cl.LeaseEpoch}}, pub.sentControls())

	// A second cancel changes nothing and sends nothing more.
	again, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	require.Equal(t, got.EventSeq, again.EventSeq)
	require.Len(t, pub.sentControls(), 1)

	e.clock.Advance(time.Second)
	ren, err := e.c.Renew(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	require.Equal(t, protocol.Renewal{LeaseExpiresAt: e.clock.Now().Add(e.c.Config().LeaseTTL), CancelRequested: true}, ren)

	wip := "aq/wip/" + j.ID
	done, err := e.c.ReleaseWith(e.ctx, "f1", prod, j.ID, coord.ReleaseRequest{LeaseEpoch: cl.LeaseEpoch,
		Outcome: fleet.ReleaseCancelled, Checkpoint: &wip})
	require.NoError(t, err)
	require.Equal(t, fleet.StageCancelled, done.Stage)
	require.Equal(t, wip, done.Checkpoint)
	require.Equal(t, cl.LeaseEpoch, done.LeaseEpoch, "a release, not a revocation")
	require.False(t, done.CancelRequested, "the request ended with its lease")
	require.Empty(t, done.HolderFactoryID)

	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "claimed", "stage", "cancel_requested", "cancel_acknowledged"}, eventTypes(evs))
	require.Contains(t, evs[3].Message, "wrong repo")
	require.Equal(t, fleet.ActorFactory, evs[4].Actor)
	runs := e.runs(j.ID)
	require.Len(t, runs, 1)
	require.Equal(t, fleet.RunCancelled, runs[0].Result)

	_, err = e.c.Renew(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.ErrorIs(t, err, fleet.ErrFenced)
}

// TestCancelForcedAfterGrace: a holder that never acknowledges is revoked by
// the reaper once the grace is over (not before), the job ends cancelled,
// the holder is fenced and the event says the cancel was forced.
func TestCancelForcedAfterGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(coord.Config{CancelGrace: 30 * time.Second}))
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	_, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "")
	require.NoError(t, err)

	m, err := e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Len(t, m.Alerts, 1)
	require.Equal(t, fleet.AlertCancelUnacknowledged, m.Alerts[0].Kind)
	require.Equal(t, fleet.SeverityWarning, m.Alerts[0].Severity)
	require.Equal(t, prod+"/"+j.ID, m.Alerts[0].Subject)

	e.clock.Advance(29 * time.Second)
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "within the grace the holder may still answer")
	require.Equal(t, fleet.StageAssigned, e.job(j.ID).Stage)

	e.clock.Advance(time.Second)
	m, err = e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Equal(t, fleet.SeverityCritical, m.Alerts[0].Severity, "past the grace the alert is critical")

	n, err = e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := e.job(j.ID)
	require.Equal(t, fleet.StageCancelled, got.Stage)
	require.Equal(t, cl.LeaseEpoch+1, got.LeaseEpoch, "revoked: the holder is fenced")
	require.Zero(t, got.Attempts)
	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "claimed", "cancel_requested", "cancel_forced"}, eventTypes(evs))
	require.Equal(t, fleet.ActorSystem, evs[3].Actor)
	require.Contains(t, evs[3].Message, "did not acknowledge within 30s")
	require.Equal(t, fleet.RunCancelled, e.runs(j.ID)[0].Result)

	_, err = e.c.ReleaseWith(e.ctx, "f1", prod, j.ID, coord.ReleaseRequest{LeaseEpoch: cl.LeaseEpoch, Outcome: fleet.ReleaseCancelled})
	require.ErrorIs(t, err, fleet.ErrFenced, "the late acknowledgement is fenced")
	m, err = e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Empty(t, m.Alerts)
}

// TestCancelOfExpiredLeaseEndsCancelled: a holder that died after the
// cancel was requested is not requeued by the lease reaper: the job ends
// cancelled, forced, as soon as its lease expires, even inside the grace.
func TestCancelOfExpiredLeaseEndsCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(coord.Config{LeaseTTL: time.Minute, CancelGrace: time.Hour}))
	e.factory("f1")
	j := e.submit()
	e.claim("f1")
	_, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	e.clock.Advance(time.Minute)
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := e.job(j.ID)
	require.Equal(t, fleet.StageCancelled, got.Stage)
	require.Zero(t, got.Attempts, "a cancelled run spends no attempt")
	require.Equal(t, "cancel_forced", eventTypes(e.events(j.ID))[3])
}

// TestCancelNotLeasedIsImmediate: a queued job is cancelled at once, with
// no request and no control message.
func TestCancelNotLeasedIsImmediate(t *testing.T) {
	t.Parallel()
	e, pub := dispatchEnv(t)
	j := e.submit()
	got, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageCancelled, got.Stage)
	require.False(t, got.CancelRequested)
	require.Empty(t, pub.sentControls())
	require.Equal(t, []string{"submitted", "cancel"}, eventTypes(e.events(j.ID)))
}

// TestReleaseOutcomes: the outcome must answer a request, a plain release of
// a job whose cancel is pending still ends it cancelled (the operator's
// cancel wins over a shutdown), and an unknown outcome never reaches coord.
func TestReleaseOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")
	for _, o := range []fleet.ReleaseOutcome{fleet.ReleaseCancelled, fleet.ReleasePreempted} {
		_, err := e.c.ReleaseWith(e.ctx, "f1", prod, j.ID, coord.ReleaseRequest{LeaseEpoch: cl.LeaseEpoch, Outcome: o})
		require.ErrorIs(t, err, fleet.ErrConflict, "outcome %s with nothing requested", o)
	}
	require.Equal(t, fleet.StageAssigned, e.job(j.ID).Stage, "a refused release changes nothing")

	_, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	got, err := e.c.Release(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	require.Equal(t, fleet.StageCancelled, got.Stage)
	require.Equal(t, "cancel_acknowledged", eventTypes(e.events(j.ID))[3])

	_, err = fleet.ParseReleaseOutcome("outcome", "done")
	requireCode(t, err, fleet.CodeInvalid, "outcome")
}
