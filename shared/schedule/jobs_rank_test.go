package schedule

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestRankJobsOrder: the ranking holds only eligible jobs, in priority
// order, the same whatever the input order.
func TestRankJobsOrder(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	f := &fleet.Factory{ID: "f", SeatLimit: 4, Health: fleet.HealthOK, Capabilities: []string{"os:linux"}, Repos: []string{"r"}}
	prios := []fleet.Priority{fleet.PriorityLow, fleet.PriorityNormal, fleet.PriorityHigh, fleet.PriorityCritical}
	var jobs []*fleet.Job
	for i := range 60 {
		j := &fleet.Job{ID: string(rune('a'+i%26)) + string(rune('a'+i/26)), Repo: "r", Stage: fleet.StageQueued,
			Priority: prios[i%4], QueuedAt: now.Add(-time.Duration(i) * time.Minute), Capabilities: []string{"os:linux"}}
		switch i % 7 {
		case 0:
			j.Capabilities = []string{"gpu:a100"} // not eligible
		case 1:
			j.Stage = fleet.StageBuilding // not queued
		case 2:
			j.NotBefore = now.Add(time.Minute) // backing off
		}
		jobs = append(jobs, j)
	}
	want := RankJobs(f, jobs, now, DefaultWeights)
	require.NotEmpty(t, want)
	for i := 1; i < len(want); i++ {
		require.GreaterOrEqual(t, want[i-1].Priority.Rank(), want[i].Priority.Rank(), "priority order at %d", i)
	}
	for _, j := range want {
		require.Equal(t, fleet.StageQueued, j.Stage)
		require.False(t, j.NotBefore.After(now))
		require.Equal(t, []string{"os:linux"}, j.Capabilities)
	}
	for range 10 {
		shuffled := append([]*fleet.Job(nil), jobs...)
		rand.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		require.Equal(t, want, RankJobs(f, shuffled, now, DefaultWeights))
	}
	// Removing the best makes the second the best.
	require.Same(t, want[1], RankJobs(f, without(jobs, want[0]), now, DefaultWeights)[0])
}

func without(js []*fleet.Job, drop *fleet.Job) []*fleet.Job {
	var out []*fleet.Job
	for _, j := range js {
		if j != drop {
			out = append(out, j)
		}
	}
	return out
}

// TestTransient: only "could run it, but not now" reasons are transient;
// the dispatcher rewrites a job's stored reason on every change otherwise.
func TestTransient(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	job := &fleet.Job{ID: "j", Repo: "r", Stage: fleet.StageQueued, Capabilities: []string{"os:linux"}}
	full := &fleet.Factory{ID: "f", SeatLimit: 1, Load: 1, Health: fleet.HealthOK, Capabilities: []string{"os:linux"}, Repos: []string{"r"}}
	_, busy := BestFactory(job, []*fleet.Factory{full}, now, DefaultWeights)
	require.True(t, busy.Transient(), busy)
	require.Equal(t, fleet.UnroutableBusy, busy.Kind)
	_, none := BestFactory(job, nil, now, DefaultWeights)
	require.False(t, none.Transient(), none)
	require.Equal(t, fleet.UnroutableNoFactory, none.Kind)
	gpu := *job
	gpu.Capabilities = []string{"gpu:a100"}
	_, missing := BestFactory(&gpu, []*fleet.Factory{full}, now, DefaultWeights)
	require.False(t, missing.Transient(), missing)
	require.Equal(t, Reason{Kind: fleet.UnroutableNoFactory, Text: UnroutablePrefix + "no factory has capability gpu:a100"}, missing)
}

// TestCoolingFactory: a factory cooling down for the job's engine is not
// chosen, neither by the dispatcher nor by its own polls, while another
// account's factory is; once the cooldown is over it is eligible again.
// Cooling is a passing state (transient), never "unroutable".
func TestCoolingFactory(t *testing.T) {
	t.Parallel()
	cooling := newFactory("a-cooling", coolingFor("engine:claude", t0.Add(5*time.Minute)))
	other := newFactory("b-other", withLoad(1))
	job := newJob("j")

	best, _ := BestFactory(job, []*fleet.Factory{cooling, other}, t0, DefaultWeights)
	require.Equal(t, "b-other", best.ID, "the cooling factory is idle and first by id, yet not chosen")
	require.Empty(t, RankJobs(cooling, []*fleet.Job{job}, t0, DefaultWeights))

	best, reason := BestFactory(job, []*fleet.Factory{cooling}, t0, DefaultWeights)
	require.Nil(t, best)
	require.True(t, reason.Transient(), reason)
	require.Equal(t, NoEligiblePrefix+"1 is cooling down for engine:claude", reason.Text)

	later := t0.Add(5 * time.Minute)
	best, _ = BestFactory(job, []*fleet.Factory{cooling, other}, later, DefaultWeights)
	require.Equal(t, "a-cooling", best.ID, "the cooldown is over at its until")
	require.Equal(t, []*fleet.Job{job}, RankJobs(cooling, []*fleet.Job{job}, later, DefaultWeights))
}
