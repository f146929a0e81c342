package schedule

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/stretchr/testify/require"
)

// Each term is checked through Explain, the contract /explain shows, with a
// single eligible factory.

func TestCapabilityFitTerm(t *testing.T) {
	t.Parallel()
	many := make([]string, 63)
	for i := range many {
		many[i] = "has:tool" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	many[0] = "engine:claude"
	tests := []struct {
		name    string
		jobCaps []string
		fcaps   []string
		repos   []string
		want    float64
	}{
		{"exact fit is 1", []string{"engine:claude"}, []string{"engine:claude"}, []string{"notes"}, 1},
		{"repo-only job on repo-only factory is 1", nil, nil, []string{"notes"}, 1},
		{"two of four", []string{"engine:claude"}, []string{"os:linux", "engine:claude", "has:git"}, []string{"notes"}, 3.0 / 5},
		{"repo-only job on a generalist", nil, []string{"os:linux", "engine:claude", "has:git"}, []string{"notes"}, 2.0 / 5},
		{"repos count as offered capabilities", []string{"engine:claude"}, []string{"engine:claude"}, []string{"notes", "a", "b"}, 3.0 / 5},
		{"duplicates and an explicit repo token count once", []string{"engine:claude", "engine:claude", "repo:notes"}, []string{"os:linux", "engine:claude", "has:git"}, []string{"notes"}, 3.0 / 5},
		{"repo declared as a capability satisfies the repo", []string{"engine:claude"}, []string{"engine:claude", "repo:notes"}, nil, 1},
		{"a 64-capability factory", []string{"engine:claude"}, many, []string{"notes"}, 3.0 / 65},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := newJob("j", func(j *fleet.Job) { j.Capabilities = tt.jobCaps })
			f := newFactory("f", withCaps(tt.fcaps...), withRepos(tt.repos...))
			c := only(Explain(j, []*fleet.Factory{f}, t0, DefaultWeights))
			require.True(t, c.Eligible, c.Reason)
			require.InDelta(t, tt.want, c.Terms.CapabilityFit, 1e-12)
		})
	}
}

func TestTighterFitWins(t *testing.T) {
	t.Parallel()
	// The rare-capability factory (gpu) stays free for the jobs that need it.
	general := newFactory("a-gpu", withCaps("os:linux", "engine:claude", "has:git", "has:gpu"))
	tight := newFactory("b-plain")
	best, reason := BestFactory(newJob("j"), []*fleet.Factory{general, tight}, t0, DefaultWeights)
	require.Zero(t, reason)
	require.Equal(t, "b-plain", best.ID)

	gpuJob := newJob("g", func(j *fleet.Job) { j.Capabilities = []string{"has:gpu"} })
	best, reason = BestFactory(gpuJob, []*fleet.Factory{general, tight}, t0, DefaultWeights)
	require.Zero(t, reason)
	require.Equal(t, "a-gpu", best.ID)
}

func TestAffinityTerm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		persona string
		fcaps   []string
		want    float64
	}{
		{"advertised persona", "builder", []string{"engine:claude", "persona:builder"}, 1},
		{"no persona asked", "", []string{"engine:claude", "persona:builder"}, 0},
		{"other persona", "builder", []string{"engine:claude", "persona:reviewer"}, 0},
		{"persona is a prefix of the advertised one", "build", []string{"engine:claude", "persona:builder"}, 0},
		{"advertised persona is a prefix of the asked one", "builder-x", []string{"engine:claude", "persona:builder"}, 0},
		{"bare name is not a persona token", "builder", []string{"engine:claude", "builder"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := newJob("j", func(j *fleet.Job) { j.Persona = tt.persona })
			c := only(Explain(j, []*fleet.Factory{newFactory("f", withCaps(tt.fcaps...))}, t0, DefaultWeights))
			require.True(t, c.Eligible, c.Reason)
			require.Equal(t, tt.want, c.Terms.Affinity)
		})
	}
}

// TestSessionAffinity: the factory that holds the job's engine session
// (its newest ended run that reported one) wins affinity, so a retry goes
// where it can resume; a later run without a session does not move it,
// and a later run with one elsewhere does.
func TestSessionAffinity(t *testing.T) {
	t.Parallel()
	run := func(factory, session string) fleet.Run {
		return fleet.Run{FactoryID: factory, EngineFacts: fleet.EngineFacts{Session: session}}
	}
	tests := []struct {
		name string
		runs []fleet.Run
		want string
	}{
		{"no runs: the first by id", nil, "a"},
		{"the session's factory", []fleet.Run{run("b", "s1")}, "b"},
		{"a later run without a session keeps it", []fleet.Run{run("b", "s1"), run("a", "")}, "b"},
		{"the newest session wins", []fleet.Run{run("b", "s1"), run("c", "s2")}, "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := newJob("j", func(j *fleet.Job) { j.Runs = tt.runs })
			// All alike: without affinity a wins by its id.
			fs := []*fleet.Factory{newFactory("a"), newFactory("b"), newFactory("c")}
			best, reason := BestFactory(j, fs, t0, DefaultWeights)
			require.Zero(t, reason)
			require.Equal(t, tt.want, best.ID)
		})
	}
}

func TestLoadTerm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		load int
		want float64
	}{
		{-1, 1}, // a bad report reads as idle, not as a division by zero
		{0, 1},
		{1, 0.5},
		{3, 0.25},
		{99, 0.01},
	}
	for _, tt := range tests {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			f := newFactory("f", withLoad(tt.load), func(f *fleet.Factory) { f.SeatLimit = 100 })
			c := only(Explain(newJob("j"), []*fleet.Factory{f}, t0, DefaultWeights))
			require.True(t, c.Eligible, c.Reason)
			require.Equal(t, tt.want, c.Terms.Load)
		})
	}
}

func TestCostFitTerm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		perHour float64
		usd     float64
		wall    time.Duration
		want    float64
	}{
		{"unknown factory cost", 0, 1, time.Hour, 1},
		{"unknown budget", 2, 0, time.Hour, 1},
		{"unknown wall", 2, 1, 0, 1},
		{"negative cost reads as unknown", -2, 1, time.Hour, 1},
		{"well within budget", 2, 5, 30 * time.Minute, 1},
		{"exactly on budget", 2, 1, 30 * time.Minute, 1},
		{"twice the budget", 2, 0.5, 30 * time.Minute, 0.5},
		{"four times the budget", 4, 1, time.Hour, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := newJob("j", func(j *fleet.Job) { j.Budget = fleet.Budget{USD: tt.usd, Wall: fleet.Duration(tt.wall)} })
			f := newFactory("f", func(f *fleet.Factory) { f.CostPerHourUSD = tt.perHour })
			c := only(Explain(j, []*fleet.Factory{f}, t0, DefaultWeights))
			require.True(t, c.Eligible, c.Reason)
			require.InDelta(t, tt.want, c.Terms.CostFit, 1e-12)
		})
	}
}

func TestHealthTerm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		health fleet.Health
		want   float64
	}{
		{fleet.HealthOK, 1},
		{"", 1},
		{fleet.HealthDegraded, 0.5},
		{fleet.HealthStale, 0.25},
		{"rebooting", 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.health), func(t *testing.T) {
			t.Parallel()
			c := only(Explain(newJob("j"), []*fleet.Factory{newFactory("f", withHealth(tt.health))}, t0, DefaultWeights))
			require.True(t, c.Eligible, c.Reason)
			require.Equal(t, tt.want, c.Terms.Health)
		})
	}
}

func TestStarvationTerm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*fleet.Job)
		want float64
	}{
		{"just queued", queuedAgo(0), -1},
		{"queued in the future (clock skew)", queuedAgo(-5 * time.Minute), -1},
		{"half aged", queuedAgo(15 * time.Minute), -0.5},
		{"one second short", queuedAgo(StarvationWindow - time.Second), -1.0 / 1800},
		{"fully aged", queuedAgo(StarvationWindow), 0},
		{"past the window", queuedAgo(31 * time.Minute), 0},
		{"falls back to CreatedAt", func(j *fleet.Job) { j.QueuedAt, j.CreatedAt = time.Time{}, t0.Add(-15*time.Minute) }, -0.5},
		{"QueuedAt wins over CreatedAt", func(j *fleet.Job) { j.QueuedAt, j.CreatedAt = t0, t0.Add(-time.Hour) }, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := only(Explain(newJob("j", tt.mod), []*fleet.Factory{newFactory("f")}, t0, DefaultWeights))
			require.True(t, c.Eligible, c.Reason)
			require.InDelta(t, tt.want, c.Terms.Starvation, 1e-12)
			require.False(t, math.Signbit(c.Terms.Starvation) && tt.want == 0, "a fully aged job must show 0, not -0")
		})
	}
}

func TestTotalIsWeightedSum(t *testing.T) {
	t.Parallel()
	terms := Terms{CapabilityFit: 0.5, Affinity: 1, Load: 0.25, CostFit: 0.5, Health: 0.5, Starvation: -0.5}
	// 1·0.5 + 0.5·1 + 1·0.25 + 0.75·0.5 + 1·0.5 + 1.5·(-0.5)
	require.InDelta(t, 1.375, DefaultWeights.Total(terms), 1e-12)
	require.Equal(t, 0.0, Weights{}.Total(terms))
	require.Equal(t, -0.5, Weights{Starvation: 1}.Total(terms))

	// The default job on the default factory, fresh: 0.6 + 0 + 1 + 0.75 + 1 - 1.5.
	c := only(Explain(newJob("j"), []*fleet.Factory{newFactory("f")}, t0, DefaultWeights))
	require.InDelta(t, 1.85, c.Total, 1e-12)
	require.Equal(t, DefaultWeights.Total(c.Terms), c.Total)
}

func TestWeightsValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultWeights.Validate())
	require.NoError(t, Weights{}.Validate())
	tests := []struct {
		name  string
		w     Weights
		field string
	}{
		{"negative", Weights{Starvation: -1.5}, "weights.starvation"},
		{"NaN", Weights{Load: math.NaN()}, "weights.load"},
		{"infinite", Weights{CostFit: math.Inf(1)}, "weights.costFit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.w.Validate()
			require.ErrorIs(t, err, fleet.ErrInvalid)
			var fe *fleet.Error
			require.True(t, errors.As(err, &fe))
			require.Equal(t, tt.field, fe.Field)
		})
	}
}

func TestExplanationJSON(t *testing.T) {
	t.Parallel()
	fs := []*fleet.Factory{newFactory("ok"), newFactory("down", withHealth(fleet.HealthDown))}
	b, err := json.Marshal(Explain(newJob("j"), fs, t0.Add(time.Hour), DefaultWeights))
	require.NoError(t, err)
	require.JSONEq(t, `{
		"jobId": "j", "routable": true, "best": "ok",
		"required": ["engine:claude", "repo:notes"],
		"candidates": [
			{"factoryId": "ok", "eligible": true, "load": 0, "leases": 0, "reported": 0, "total": 3.35,
			 "terms": {"capabilityFit": 0.6, "affinity": 0, "load": 1, "costFit": 1, "health": 1, "starvation": 0}},
			{"factoryId": "down", "eligible": false, "load": 0, "leases": 0, "reported": 0, "reason": "factory is down"}
		]}`, string(b))
}
