package coord_test

import (
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

func seats(n int) factoryOpt {
	return func(r *catalog.EnrollRequest, hb *catalog.Heartbeat) { r.SeatLimit, hb.SeatLimit = n, n }
}

// fullFleet is a dispatch env whose one factory f1 (seats seats) runs one
// job per seat, of the priorities given, started a minute apart; it
// returns the running jobs' claims.
func fullFleet(t *testing.T, cfg coord.Config, priorities ...fleet.Priority) (*env, *recordingPublisher, []*protocol.Claimed) {
	t.Helper()
	e, pub := dispatchEnv(t, withConfig(cfg))
	tok := e.factory("f1", seats(len(priorities)))
	var cls []*protocol.Claimed
	for _, p := range priorities {
		e.submit("priority: " + string(p))
		cls = append(cls, e.claim("f1"))
		e.clock.Advance(time.Minute)
	}
	_, err := e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}, Load: len(priorities), SeatLimit: len(priorities)})
	require.NoError(t, err)
	return e, pub, cls
}

// TestCriticalPreemptsAcknowledged: a critical job with no free seat
// anywhere asks the holder of the lowest-priority, most recently started
// job on a factory that could run it to stop (once, however often dispatch
// retries); the holder's release with outcome preempted queues the victim
// again with its checkpoint and no attempt spent, and the critical job is
// dispatched to the freed seat. Events link the two both ways.
func TestCriticalPreemptsAcknowledged(t *testing.T) {
	t.Parallel()
	e, pub, cls := fullFleet(t, coord.Config{}, fleet.PriorityLow, fleet.PriorityLow, fleet.PriorityNormal)
	victim := cls[1] // low, started last of the lows
	crit := e.submit("priority: critical", "title: hotfix")
	for range 3 {
		_, err := e.c.Redispatch(e.ctx)
		require.NoError(t, err)
	}
	v := e.job(victim.Job.ID)
	require.True(t, v.PreemptRequested)
	require.Equal(t, &fleet.JobRef{ProductID: prod, JobID: crit.ID}, v.PreemptedBy)
	require.Equal(t, []protocol.ControlMessage{{Action: protocol.ControlPreempt, JobID: v.ID, ProductID: prod,
		TargetFactoryID: "f1", LeaseEpoch: victim.LeaseEpoch}}, pub.sentControls(), "one victim, however often dispatch retries")
	for _, other := range []*protocol.Claimed{cls[0], cls[2]} {
		require.False(t, e.job(other.Job.ID).StopRequested())
	}
	ren, err := e.c.Renew(e.ctx, "f1", prod, v.ID, victim.LeaseEpoch)
	require.NoError(t, err)
	require.True(t, ren.PreemptRequested)
	require.Equal(t, "preempted_by", eventTypes(e.events(v.ID))[2])
	critEvents := e.events(crit.ID)
	require.Equal(t, fleet.EventPreempted, critEvents[len(critEvents)-1].Type)
	require.Contains(t, critEvents[len(critEvents)-1].Message, v.ID)

	wip := "aq/wip/" + v.ID
	got, err := e.c.ReleaseWith(e.ctx, "f1", prod, v.ID, coord.ReleaseRequest{LeaseEpoch: victim.LeaseEpoch,
		Outcome: fleet.ReleasePreempted, Checkpoint: &wip})
	require.NoError(t, err)
	require.Equal(t, fleet.StageQueued, got.Stage)
	require.Zero(t, got.Attempts, "a preempted run spends no attempt")
	require.Equal(t, wip, got.Checkpoint, "it resumes from its checkpoint")
	require.False(t, got.StopRequested())
	evs := e.events(v.ID)
	requireContiguous(t, evs)
	require.Equal(t, fleet.EventPreemptAcknowledged, evs[len(evs)-1].Type)
	require.Contains(t, evs[len(evs)-1].Message, crit.ID)
	require.Equal(t, fleet.RunPreempted, e.runs(v.ID)[0].Result)

	c := e.job(crit.ID)
	require.Equal(t, "f1", c.TargetFactoryID, "the critical job takes the freed seat")
	sent := pub.sent()
	require.Equal(t, crit.ID, sent[len(sent)-1].JobID)
	require.Equal(t, "f1", sent[len(sent)-1].TargetFactoryID)
	require.Equal(t, c.DispatchEpoch, sent[len(sent)-1].DispatchEpoch)
	_, err = e.c.Accept(e.ctx, "f1", prod, crit.ID, c.DispatchEpoch)
	require.NoError(t, err)
}

// TestPreemptionForcedAfterGrace: a victim's holder that never releases is
// revoked by the reaper after the grace; the victim is queued again without
// spending an attempt, the event says it was forced, and the critical job is
// dispatched to the freed seat.
func TestPreemptionForcedAfterGrace(t *testing.T) {
	t.Parallel()
	e, pub, cls := fullFleet(t, coord.Config{CancelGrace: 30 * time.Second}, fleet.PriorityNormal)
	crit := e.submit("priority: critical")
	_, err := e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	require.True(t, e.job(cls[0].Job.ID).PreemptRequested)

	e.clock.Advance(30 * time.Second)
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	v := e.job(cls[0].Job.ID)
	require.Equal(t, fleet.StageQueued, v.Stage)
	require.Equal(t, cls[0].LeaseEpoch+1, v.LeaseEpoch, "revoked")
	require.Zero(t, v.Attempts)
	evs := e.events(v.ID)
	require.Equal(t, fleet.EventPreemptForced, evs[len(evs)-1].Type)
	require.Equal(t, "f1", e.job(crit.ID).TargetFactoryID)
	sent := pub.sent()
	require.Equal(t, crit.ID, sent[len(sent)-1].JobID)
}

// TestNoPreemption: nothing is preempted for a job that is not critical, for
// one whose only candidates are critical themselves, or with preemption off.
func TestNoPreemption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     coord.Config
		running fleet.Priority
		waiting fleet.Priority
	}{
		{"a high job does not preempt", coord.Config{}, fleet.PriorityLow, fleet.PriorityHigh},
		{"critical does not preempt critical", coord.Config{}, fleet.PriorityCritical, fleet.PriorityCritical},
		{"FLEET_PREEMPTION=off", coord.Config{NoPreemption: true}, fleet.PriorityLow, fleet.PriorityCritical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, pub, cls := fullFleet(t, tc.cfg, tc.running)
			e.submit("priority: " + string(tc.waiting))
			_, err := e.c.Redispatch(e.ctx)
			require.NoError(t, err)
			require.False(t, e.job(cls[0].Job.ID).StopRequested())
			require.Empty(t, pub.sentControls())
		})
	}
}
