package coord_test

import (
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestMetrics: active jobs by stage, seats and load, and a starvation
// alert for a job queued past StarvationAge with the reason it waits.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e, _ := dispatchEnv(t)
	tok := e.factory("f1")
	_, err := e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}, Load: 1, SeatLimit: 4})
	require.NoError(t, err)
	e.submit()
	e.claim("f1")
	stuck := e.submit("capabilities: [gpu:a100]")
	_, err = e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, stuck.ID))
	require.NoError(t, err)

	e.clock.Advance(coord.StarvationAge)
	_, err = e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}, Load: 1, SeatLimit: 4})
	require.NoError(t, err)
	m, err := e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Equal(t, e.clock.Now(), m.At)
	require.Equal(t, map[string]int{"queued": 1, "blocked": 0, "assigned": 1, "building": 0, "review": 0, "testing": 0}, m.Jobs)
	require.Equal(t, coord.FactoryMetrics{Total: 1, ByHealth: map[string]int{"ok": 1}, Seats: 4, Load: 1, Utilization: 0.25}, m.Factories)
	require.Len(t, m.Starving, 1)
	require.Equal(t, stuck.ID, m.Starving[0].JobID)
	require.Equal(t, "30m0s", m.Starving[0].WaitingFor)
	require.Equal(t, "unroutable: no factory has capability gpu:a100", m.Starving[0].Reason)
	require.Equal(t, []fleet.Alert{{Kind: fleet.AlertNoFactory, Severity: fleet.SeverityWarning,
		Subject: prod + "/" + stuck.ID, Since: stuck.QueuedAt,
		Message: "no enrolled factory can run job " + stuck.ID + " (no factory has capability gpu:a100); enroll one that can, or change the job"},
		{Kind: fleet.AlertStarving, Severity: fleet.SeverityWarning,
			Subject: prod + "/" + stuck.Repo, Since: stuck.QueuedAt,
			Message: "job " + stuck.ID + " has been queued for 30m0s: unroutable: no factory has capability gpu:a100"}}, m.Alerts)
	require.Equal(t, int64(1), m.Coord.Claims)

	// f1 has been silent for 30 minutes: down, no timer needed.
	e.clock.Advance(coord.StarvationAge)
	m, err = e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Contains(t, m.Alerts, fleet.Alert{Kind: fleet.AlertStaleFactory, Severity: fleet.SeverityCritical,
		Subject: "f1", Since: m.At.Add(-coord.StarvationAge), Message: "silent for 30m0s: down, its leases are reaped as they expire"})
	require.Equal(t, map[string]int{string(fleet.HealthDown): 1}, m.Factories.ByHealth)
}

// TestMetricsStarvingOldestFirst: the starving list leads with the job that
// has waited longest since it was (re)queued, not the one created first.
func TestMetricsStarvingOldestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.factory("f1")
	first := e.submit("priority: high", "title: created first")
	e.clock.Advance(10 * time.Minute)
	e.beat(tok)
	second := e.submit("title: created second")
	// The first job is claimed (it outranks the second) and released: it
	// re-enters the queue after the second.
	cl := e.claim("f1")
	require.Equal(t, first.ID, cl.Job.ID)
	e.clock.Advance(time.Minute)
	_, err := e.c.Release(e.ctx, "f1", prod, first.ID, cl.LeaseEpoch)
	require.NoError(t, err)

	e.clock.Advance(coord.StarvationAge)
	m, err := e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Len(t, m.Starving, 2)
	require.Equal(t, []string{second.ID, first.ID}, []string{m.Starving[0].JobID, m.Starving[1].JobID})
	require.Equal(t, "31m0s", m.Starving[0].WaitingFor)
	require.Equal(t, "30m0s", m.Starving[1].WaitingFor)
}

// TestMetricsAlerts: alerts are objects with kind, severity, subject, since
// and message (API.md): one starving alert per product and repo naming its
// oldest job, a critical dead_letter alert per job that dead-lettered within
// DeadLetterAlertWindow, and none after it.
func TestMetricsAlerts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	oldest := e.submit("title: oldest in r", "capabilities: [gpu:a100]")
	e.clock.Advance(time.Minute)
	younger := e.submit("title: younger in r", "capabilities: [gpu:a100]")
	tok := e.factory("f1")
	dead := e.submit("title: doomed", "maxAttempts: 1", "priority: high")
	cl := e.claim("f1")
	require.Equal(t, dead.ID, cl.Job.ID)
	_, err := e.c.Fail(e.ctx, "f1", prod, dead.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "flaky", Retryable: true})
	require.NoError(t, err)
	require.Equal(t, fleet.StageDeadLetter, e.job(dead.ID).Stage)
	deadAt := e.clock.Now()

	e.clock.Advance(coord.StarvationAge)
	e.beat(tok)
	m, err := e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Len(t, m.Starving, 2, "the list names every starving job")
	noFactory := func(j *fleet.Job) fleet.Alert {
		return fleet.Alert{Kind: fleet.AlertNoFactory, Severity: fleet.SeverityWarning, Subject: prod + "/" + j.ID, Since: j.QueuedAt,
			Message: "no enrolled factory can run job " + j.ID + " (no factory has capability gpu:a100); enroll one that can, or change the job"}
	}
	require.Equal(t, []fleet.Alert{
		noFactory(oldest),
		{Kind: fleet.AlertStarving, Severity: fleet.SeverityWarning, Subject: prod + "/" + oldest.Repo, Since: oldest.QueuedAt,
			Message: "job " + oldest.ID + " has been queued for 31m0s"},
		noFactory(younger),
		{Kind: fleet.AlertDeadLetter, Severity: fleet.SeverityCritical, Subject: prod + "/" + dead.ID, Since: deadAt,
			Message: "dead-lettered after 1 attempt(s); requeue or cancel it"},
	}, m.Alerts)

	e.clock.Advance(coord.DeadLetterAlertWindow)
	m, err = e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	for _, a := range m.Alerts {
		require.NotEqual(t, fleet.AlertDeadLetter, a.Kind, "a day-old dead letter is no longer an alert")
	}
}

// TestMetricsFailedAndNoFactoryAlerts: a job no enrolled factory can run is
// an alert from its submit on (with or without a dispatch transport), not
// after the starvation window; a job
// that failed is one for DeadLetterAlertWindow, naming the failure that
// ended it, and then no longer.
func TestMetricsFailedAndNoFactoryAlerts(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // no dispatch transport: the alert needs none
	e.factory("f1")
	gpu := e.submit("capabilities: [gpu:h100]", "title: needs a GPU")
	m, err := e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Equal(t, []fleet.Alert{{Kind: fleet.AlertNoFactory, Severity: fleet.SeverityWarning, Subject: prod + "/" + gpu.ID, Since: gpu.QueuedAt,
		Message: "no enrolled factory can run job " + gpu.ID + " (no factory has capability gpu:h100); enroll one that can, or change the job"}}, m.Alerts,
		"said at once, not after %s", coord.StarvationAge)

	doomed := e.submit("title: doomed")
	cl := e.claim("f1")
	require.Equal(t, doomed.ID, cl.Job.ID)
	_, err = e.c.Fail(e.ctx, "f1", prod, doomed.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "tests fail\nFAIL: TestX\n", Retryable: false})
	require.NoError(t, err)
	failedAt := e.clock.Now()
	e.clock.Advance(time.Hour)
	m, err = e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Contains(t, m.Alerts, fleet.Alert{Kind: fleet.AlertFailed, Severity: fleet.SeverityWarning, Subject: prod + "/" + doomed.ID, Since: failedAt,
		Message: "job " + doomed.ID + " failed on f1: tests fail; requeue it to try again"})

	e.clock.Advance(coord.DeadLetterAlertWindow)
	m, err = e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	for _, a := range m.Alerts {
		require.NotEqual(t, fleet.AlertFailed, a.Kind, "a day-old failure is no longer an alert")
	}
}
