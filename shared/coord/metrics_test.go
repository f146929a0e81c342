package coord_test

import (
	"testing"
	"time"

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
	_, err := e.c.Heartbeat(e.ctx, tok, coord.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}, Load: 1, SeatLimit: 4})
	require.NoError(t, err)
	e.submit()
	e.claim("f1")
	stuck := e.submit("capabilities: [gpu:a100]")
	_, err = e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, stuck.ID))
	require.NoError(t, err)

	e.clock.Advance(coord.StarvationAge)
	m, err := e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Equal(t, e.clock.Now(), m.At)
	require.Equal(t, map[string]int{"queued": 1, "blocked": 0, "assigned": 1, "building": 0, "review": 0, "testing": 0}, m.Jobs)
	require.Equal(t, coord.FactoryMetrics{Total: 1, ByHealth: map[string]int{"ok": 1}, Seats: 4, Load: 1, Utilization: 0.25}, m.Factories)
	require.Len(t, m.Starving, 1)
	require.Equal(t, stuck.ID, m.Starving[0].JobID)
	require.Equal(t, "30m0s", m.Starving[0].WaitingFor)
	require.Equal(t, "unroutable: no factory has capability gpu:a100", m.Starving[0].Reason)
	require.Equal(t, []string{"queue_starvation: 1 job(s) queued for more than 30m"}, m.Alerts)
	require.Equal(t, int64(1), m.Coord.Claims)

	// f1 has been silent for 30 minutes: down once the prune has run.
	_, err = e.c.Prune(e.ctx)
	require.NoError(t, err)
	m, err = e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Contains(t, m.Alerts, "factories_unhealthy: 1 factory(ies) stale or down")
	require.Equal(t, map[string]int{string(fleet.HealthDown): 1}, m.Factories.ByHealth)
}

// TestMetricsStarvingOldestFirst: the starving list leads with the job that
// has waited longest since it was (re)queued, not the one created first.
func TestMetricsStarvingOldestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	first := e.submit("priority: high", "title: created first")
	e.clock.Advance(10 * time.Minute)
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
