package schedule

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/stretchr/testify/require"
)

func TestBestFactoryTieBreaks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fs   []*fleet.Factory
		w    Weights
		want string
	}{
		{"identical factories: lowest ID", []*fleet.Factory{newFactory("c"), newFactory("a"), newFactory("b")}, DefaultWeights, "a"},
		{
			// busy: load 0.5 + health 1; idle: load 1 + health 0.5. Equal
			// totals, exactly: every term is a dyadic fraction.
			"equal totals: lower load beats lower ID",
			[]*fleet.Factory{
				newFactory("a-busy", withCaps("engine:claude"), withLoad(1)),
				newFactory("b-idle", withCaps("engine:claude"), withHealth(fleet.HealthDegraded)),
			},
			DefaultWeights, "b-idle",
		},
		{
			// busy: 0.5 + 1 = 1.5; idle but stale: 1 + 0.25 = 1.25.
			"higher total beats lower load",
			[]*fleet.Factory{newFactory("b-stale", withHealth(fleet.HealthStale)), newFactory("a-busy", withLoad(1))},
			DefaultWeights, "a-busy",
		},
		{
			"zero weights: ranking is load then ID",
			[]*fleet.Factory{newFactory("a", withLoad(1)), newFactory("c"), newFactory("b")},
			Weights{}, "b",
		},
		{
			// A lease the factory has not reported yet scores as load.
			"counted leases score as load: the unreported lease loses",
			[]*fleet.Factory{newFactory("a-leased", withLeases(1)), newFactory("b-idle")},
			DefaultWeights, "b-idle",
		},
		{
			"zero weights: counted leases break the tie as load does",
			[]*fleet.Factory{newFactory("a-leased", withLeases(1)), newFactory("b-idle")},
			Weights{}, "b-idle",
		},
		{
			"affinity decides between otherwise equal factories",
			[]*fleet.Factory{newFactory("a"), newFactory("b", withCaps("os:linux", "engine:claude", "persona:builder"))},
			DefaultWeights, "b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := newJob("j", func(j *fleet.Job) { j.Persona = "builder" })
			// Every input order must give the same answer.
			for range 20 {
				fs := slices.Clone(tt.fs)
				rand.Shuffle(len(fs), func(a, b int) { fs[a], fs[b] = fs[b], fs[a] })
				best, reason := BestFactory(j, fs, t0, tt.w)
				require.Zero(t, reason)
				require.Equal(t, tt.want, best.ID, "order %v", ids(fs))
				require.Equal(t, tt.want, Explain(j, fs, t0, tt.w).Best, "order %v", ids(fs))
			}
		})
	}
}

func TestExplainCandidateOrder(t *testing.T) {
	t.Parallel()
	// Capability fit 1 everywhere keeps every term a dyadic fraction, so the
	// equal totals below are equal exactly.
	fit := withCaps("engine:claude")
	fs := []*fleet.Factory{
		newFactory("z-down", fit, withHealth(fleet.HealthDown)),
		newFactory("m-degraded", fit, withHealth(fleet.HealthDegraded)),
		nil,
		newFactory("a-full", fit, withLoad(2)),
		newFactory("y-busy", fit, withLoad(1)),
		newFactory("b-codex", withCaps("engine:codex")),
		newFactory("x-idle", fit),
	}
	e := Explain(newJob("j"), fs, t0, DefaultWeights)
	require.True(t, e.Routable)
	require.Empty(t, e.Reason)
	require.Equal(t, "x-idle", e.Best)
	got := make([]string, len(e.Candidates))
	for i, c := range e.Candidates {
		got[i] = c.FactoryID
	}
	// Eligible best first (x-idle 2.25 > y-busy 1.75 = m-degraded 1.75, the
	// latter idle), then ineligible by ID.
	require.Equal(t, []string{"x-idle", "m-degraded", "y-busy", "a-full", "b-codex", "z-down"}, got)
	require.Equal(t, []bool{true, true, true, false, false, false},
		[]bool{e.Candidates[0].Eligible, e.Candidates[1].Eligible, e.Candidates[2].Eligible,
			e.Candidates[3].Eligible, e.Candidates[4].Eligible, e.Candidates[5].Eligible})
}

// TestExplainAgreesWithBestFactory checks on random fleets that the fast path
// and the explained path never disagree: same factory, same reason, and the
// same answer for every order of the input.
func TestExplainAgreesWithBestFactory(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	routable := 0
	for i := range 2000 {
		// Small fleets over few repos make ties, full fleets and missing
		// capabilities common.
		fs := genFactories(rng, rng.IntN(12), 6)
		j := genJob(rng, i, 6)
		now := t0.Add(time.Duration(rng.IntN(40)) * time.Minute)

		e := Explain(j, fs, now, DefaultWeights)
		best, reason := BestFactory(j, fs, now, DefaultWeights)
		require.Equal(t, e.Reason, reason.Text, "case %d", i)
		if best == nil {
			require.False(t, e.Routable, "case %d", i)
			require.NotEmpty(t, reason.Text, "case %d", i)
			continue
		}
		routable++
		require.Equal(t, e.Best, best.ID, "case %d", i)
		require.Equal(t, best.ID, e.Candidates[0].FactoryID, "case %d", i)

		rng.Shuffle(len(fs), func(a, b int) { fs[a], fs[b] = fs[b], fs[a] })
		again, _ := BestFactory(j, fs, now, DefaultWeights)
		require.Equal(t, best.ID, again.ID, "case %d: input order changed the answer", i)
	}
	// Both branches must actually have been exercised.
	require.Greater(t, routable, 200)
	require.Less(t, routable, 1800)
}

func TestRankJobsFirst(t *testing.T) {
	t.Parallel()
	codex := func(j *fleet.Job) { j.Capabilities = []string{"engine:codex"} }
	notBefore := func(d time.Duration) func(*fleet.Job) { return func(j *fleet.Job) { j.NotBefore = t0.Add(d) } }
	persona := func(j *fleet.Job) { j.Persona = "builder" }
	tests := []struct {
		name    string
		factory *fleet.Factory
		jobs    []*fleet.Job
		want    string // "" means nil
	}{
		{"aging: a 31-minute-old job beats a fresh one",
			newFactory("f"), []*fleet.Job{newJob("a-fresh"), newJob("b-old", queuedAgo(31*time.Minute))}, "b-old"},
		{"a fresh critical job beats an aged normal one",
			newFactory("f"), []*fleet.Job{
				newJob("a-fresh"), newJob("b-old", queuedAgo(31*time.Minute)),
				newJob("c-critical", withPriority(fleet.PriorityCritical)),
			}, "c-critical"},
		{"a fresh high job beats an aged low one",
			newFactory("f"), []*fleet.Job{newJob("a-low", withPriority(fleet.PriorityLow), queuedAgo(time.Hour)), newJob("b-high", withPriority(fleet.PriorityHigh))}, "b-high"},
		{"total before queue time: affinity beats seniority once both are aged",
			newFactory("f", withCaps("engine:claude", "persona:builder")),
			[]*fleet.Job{newJob("a-older", queuedAgo(50*time.Minute)), newJob("b-persona", queuedAgo(40*time.Minute), persona)}, "b-persona"},
		{"equal totals: earlier queue time",
			newFactory("f"), []*fleet.Job{newJob("a", queuedAgo(35*time.Minute)), newJob("b", queuedAgo(40*time.Minute))}, "b"},
		{"equal totals and queue time: lower ID",
			newFactory("f"), []*fleet.Job{newJob("b"), newJob("c"), newJob("a")}, "a"},
		{"not before now is skipped",
			newFactory("f"), []*fleet.Job{newJob("a-later", queuedAgo(time.Hour), notBefore(time.Second)), newJob("b-now")}, "b-now"},
		{"not before exactly now is due",
			newFactory("f"), []*fleet.Job{newJob("a-due", queuedAgo(time.Hour), notBefore(0)), newJob("b")}, "a-due"},
		{"only future jobs",
			newFactory("f"), []*fleet.Job{newJob("a", notBefore(time.Minute))}, ""},
		{"only queued jobs are claimable",
			newFactory("f"), []*fleet.Job{
				newJob("a", inStage(fleet.StageBlocked), withPriority(fleet.PriorityCritical)),
				newJob("b", inStage(fleet.StageAssigned), withPriority(fleet.PriorityCritical)),
				newJob("c", inStage(fleet.StageBuilding), withPriority(fleet.PriorityCritical)),
				newJob("d", inStage(fleet.StageFailed), withPriority(fleet.PriorityCritical)),
				newJob("e", inStage(fleet.StageCancelled), withPriority(fleet.PriorityCritical)),
				newJob("z-queued"),
			}, "z-queued"},
		{"jobs the factory cannot run are skipped",
			newFactory("f", func(f *fleet.Factory) { f.Products = []string{"p1"} }), []*fleet.Job{
				newJob("a-codex", codex, withPriority(fleet.PriorityCritical)),
				newJob("b-other-product", func(j *fleet.Job) { j.ProductID = "p2" }, withPriority(fleet.PriorityCritical)),
				newJob("c-other-repo", func(j *fleet.Job) { j.Repo = "elsewhere" }, withPriority(fleet.PriorityCritical)),
				newJob("d-runnable", withPriority(fleet.PriorityLow)),
			}, "d-runnable"},
		{"down factory takes nothing", newFactory("f", withHealth(fleet.HealthDown)), []*fleet.Job{newJob("a")}, ""},
		{"draining factory takes nothing", newFactory("f", func(f *fleet.Factory) { f.Draining = true }), []*fleet.Job{newJob("a")}, ""},
		{"full factory takes nothing", newFactory("f", withLoad(2)), []*fleet.Job{newJob("a")}, ""},
		{"stale factory still takes work", newFactory("f", withHealth(fleet.HealthStale)), []*fleet.Job{newJob("a")}, "a"},
		{"nil factory", nil, []*fleet.Job{newJob("a")}, ""},
		{"empty queue", newFactory("f"), nil, ""},
		{"nil jobs are skipped", newFactory("f"), []*fleet.Job{nil, newJob("a"), nil}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for range 20 {
				jobs := slices.Clone(tt.jobs)
				rand.Shuffle(len(jobs), func(a, b int) { jobs[a], jobs[b] = jobs[b], jobs[a] })
				ranked := RankJobs(tt.factory, jobs, t0, DefaultWeights)
				if tt.want == "" {
					require.Empty(t, ranked)
					continue
				}
				require.NotEmpty(t, ranked)
				require.Equal(t, tt.want, ranked[0].ID)
			}
		})
	}
}

func startedAgo(d time.Duration) func(*fleet.Job) {
	return func(j *fleet.Job) { j.LeaseAcquiredAt = t0.Add(-d) }
}

func TestPreemptionVictim(t *testing.T) {
	t.Parallel()
	critical := newJob("crit", withPriority(fleet.PriorityCritical))
	running := func(id string, p fleet.Priority, mods ...func(*fleet.Job)) *fleet.Job {
		return newJob(id, append([]func(*fleet.Job){withPriority(p), inStage(fleet.StageBuilding)}, mods...)...)
	}
	tests := []struct {
		name      string
		preemptor *fleet.Job
		running   []*fleet.Job
		want      string // "" means no victim
	}{
		{"nothing running", critical, nil, ""},
		{"only critical jobs running", critical, []*fleet.Job{running("a", fleet.PriorityCritical), running("b", fleet.PriorityCritical)}, ""},
		{"a high job may not preempt", newJob("h", withPriority(fleet.PriorityHigh)), []*fleet.Job{running("a", fleet.PriorityLow)}, ""},
		{"a normal job may not preempt", newJob("n"), []*fleet.Job{running("a", fleet.PriorityLow)}, ""},
		{"lowest priority is chosen", critical, []*fleet.Job{
			running("a-high", fleet.PriorityHigh), running("b-low", fleet.PriorityLow),
			running("c-normal", fleet.PriorityNormal), running("d-crit", fleet.PriorityCritical),
		}, "b-low"},
		{"an unknown priority ranks as normal", critical, []*fleet.Job{running("a-high", fleet.PriorityHigh), running("b-odd", "urgent")}, "b-odd"},
		{"only leased jobs are running", critical, []*fleet.Job{
			running("a-queued", fleet.PriorityLow, inStage(fleet.StageQueued)),
			running("b-review", fleet.PriorityLow, inStage(fleet.StageReview)),
			running("c-testing", fleet.PriorityLow, inStage(fleet.StageTesting)),
			running("d-building", fleet.PriorityHigh),
		}, "d-building"},
		{"most recently started run among equals", critical, []*fleet.Job{
			running("a-early", fleet.PriorityLow, startedAgo(time.Hour)),
			running("b-late", fleet.PriorityLow, startedAgo(time.Minute)),
			running("c-mid", fleet.PriorityLow, startedAgo(10*time.Minute)),
		}, "b-late"},
		{"started, not queued, decides", critical, []*fleet.Job{
			running("a-queued-late-started-early", fleet.PriorityLow, queuedAgo(time.Minute), startedAgo(time.Hour)),
			running("b-queued-early-started-late", fleet.PriorityLow, queuedAgo(2*time.Hour), startedAgo(time.Second)),
		}, "b-queued-early-started-late"},
		{"lower priority beats a later start", critical, []*fleet.Job{
			running("a-low-early", fleet.PriorityLow, startedAgo(time.Hour)),
			running("b-normal-late", fleet.PriorityNormal, startedAgo(time.Second)),
		}, "a-low-early"},
		{"a job already asked to stop is not chosen again", critical, []*fleet.Job{
			running("a-preempted", fleet.PriorityLow, func(j *fleet.Job) { j.PreemptRequested = true }),
			running("b-cancelling", fleet.PriorityLow, func(j *fleet.Job) { j.CancelRequested = true }),
			running("c-high", fleet.PriorityHigh),
		}, "c-high"},
		{"without a start, the queue time", critical, []*fleet.Job{
			running("a", fleet.PriorityLow, queuedAgo(time.Hour)),
			running("b", fleet.PriorityLow, queuedAgo(time.Minute)),
		}, "b"},
		{"falls back to CreatedAt", critical, []*fleet.Job{
			running("a", fleet.PriorityLow, func(j *fleet.Job) { j.QueuedAt, j.CreatedAt = time.Time{}, t0.Add(-time.Hour) }),
			running("b", fleet.PriorityLow, func(j *fleet.Job) { j.QueuedAt, j.CreatedAt = time.Time{}, t0 }),
		}, "b"},
		{"then lowest ID", critical, []*fleet.Job{running("c", fleet.PriorityLow), running("a", fleet.PriorityLow), running("b", fleet.PriorityLow)}, "a"},
		{"never itself", newJob("x", withPriority(fleet.PriorityCritical), inStage(fleet.StageBuilding)),
			[]*fleet.Job{running("x", fleet.PriorityLow)}, ""},
		{"nil entries are skipped", critical, []*fleet.Job{nil, running("a", fleet.PriorityNormal), nil}, "a"},
		{"nil preemptor", nil, []*fleet.Job{running("a", fleet.PriorityLow)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for range 20 {
				jobs := slices.Clone(tt.running)
				rand.Shuffle(len(jobs), func(a, b int) { jobs[a], jobs[b] = jobs[b], jobs[a] })
				got, ok := PreemptionVictim(tt.preemptor, jobs)
				require.Equal(t, tt.want != "", ok)
				if tt.want == "" {
					require.Nil(t, got)
					continue
				}
				require.Equal(t, tt.want, got.ID)
			}
		})
	}
}

// TestSeatBlocked: only factories that could run the job but for a free
// seat are places a preemption could make room on.
func TestSeatBlocked(t *testing.T) {
	t.Parallel()
	j := newJob("crit", withPriority(fleet.PriorityCritical))
	full := func(id string, mods ...func(*fleet.Factory)) *fleet.Factory {
		f := &fleet.Factory{ID: id, Capabilities: []string{"engine:claude"}, Repos: []string{"notes"}, SeatLimit: 1, Load: 1, Health: fleet.HealthOK}
		for _, m := range mods {
			m(f)
		}
		return f
	}
	fs := []*fleet.Factory{
		full("a-full"),
		full("b-free", func(f *fleet.Factory) { f.Load = 0 }),
		full("c-no-repo", func(f *fleet.Factory) { f.Repos = nil }),
		full("d-down", func(f *fleet.Factory) { f.Health = fleet.HealthDown }),
		full("e-other-product", func(f *fleet.Factory) { f.Products = []string{"p2"} }),
		nil,
		full("f-full"),
		full("g-cooling", coolingFor("engine:claude", t0.Add(time.Minute))),
		full("h-cooled", coolingFor("engine:claude", t0)),
	}
	var ids []string
	for _, f := range SeatBlocked(j, fs, t0) {
		ids = append(ids, f.ID)
	}
	require.Equal(t, []string{"a-full", "f-full", "h-cooled"}, ids)
}
