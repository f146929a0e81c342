package schedule

import (
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/stretchr/testify/require"
)

func TestHardFilterReasons(t *testing.T) {
	t.Parallel()
	codex := func(j *fleet.Job) { j.Capabilities = []string{"engine:codex"} }
	tests := []struct {
		name   string
		job    *fleet.Job
		mod    func(*fleet.Factory)
		reason string // "" means eligible
	}{
		{"eligible", newJob("j"), func(*fleet.Factory) {}, ""},
		{"missing capability", newJob("j", codex), func(*fleet.Factory) {}, "missing capability engine:codex"},
		{"missing repo", newJob("j", func(j *fleet.Job) { j.Repo = "learning_ai_notes" }), func(*fleet.Factory) {},
			"missing repo:learning_ai_notes"},
		{"missing an explicit repo token", newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"repo:other"} }), func(*fleet.Factory) {},
			"missing repo:other"},
		{"missing several", newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"node:20", "engine:codex"}; j.Repo = "x" }),
			func(*fleet.Factory) {}, "missing capabilities engine:codex, node:20; missing repo:x"},
		{"down", newJob("j"), withHealth(fleet.HealthDown), "factory is down"},
		{"stale is not filtered", newJob("j"), withHealth(fleet.HealthStale), ""},
		{"draining", newJob("j"), func(f *fleet.Factory) { f.Draining = true }, "factory is draining"},
		{"not scoped", newJob("j"), func(f *fleet.Factory) { f.Products = []string{"p2", "p3"} }, "not scoped to product p1"},
		{"scoped", newJob("j"), func(f *fleet.Factory) { f.Products = []string{"p2", "p1"} }, ""},
		{"no free seat", newJob("j"), withLoad(2), "no free seat (leases 0, reported 2 of 2)"},
		{"over the seat limit", newJob("j"), withLoad(3), "no free seat (leases 0, reported 3 of 2)"},
		{"no seats at all", newJob("j"), func(f *fleet.Factory) { f.SeatLimit = 0 }, "no free seat (leases 0, reported 0 of 0)"},
		{"last free seat", newJob("j"), withLoad(1), ""},
		// Counted seats: the leases the coordinator granted fill seats the
		// factory has not reported yet; the larger count wins either way.
		{"leases fill the seats, none reported", newJob("j"), withLeases(2), "no free seat (leases 2, reported 0 of 2)"},
		{"leases and a dispatch", newJob("j"), func(f *fleet.Factory) { f.Leases, f.Offers = 1, 1 },
			"no free seat (leases 1, dispatched 1, reported 0 of 2)"},
		{"reported above the leases", newJob("j"), func(f *fleet.Factory) { f.Leases, f.Load = 1, 2 },
			"no free seat (leases 1, reported 2 of 2)"},
		{"one lease of two seats", newJob("j"), withLeases(1), ""},
		// Order: capability, then down, then product, then seat.
		{"capability before down", newJob("j", codex), func(f *fleet.Factory) { f.Health = fleet.HealthDown; f.Load = 2 },
			"missing capability engine:codex"},
		{"down before product", newJob("j"), func(f *fleet.Factory) { f.Health = fleet.HealthDown; f.Products = []string{"p2"} },
			"factory is down"},
		{"down before draining", newJob("j"), func(f *fleet.Factory) { f.Health = fleet.HealthDown; f.Draining = true },
			"factory is down"},
		{"draining before product and seat", newJob("j"), func(f *fleet.Factory) { f.Draining = true; f.Products = []string{"p2"}; f.Load = 2 },
			"factory is draining"},
		{"product before seat", newJob("j"), func(f *fleet.Factory) { f.Products = []string{"p2"}; f.Load = 2 },
			"not scoped to product p1"},
		// Cooldowns: a rate-limited account's engine, until the time given.
		{"cooling for the job's engine", newJob("j"), coolingFor("engine:claude", t0.Add(10*time.Minute)),
			"cooling down for engine:claude until 2026-05-31T12:10:00Z (rate limited)"},
		{"a cooldown that is over binds no longer", newJob("j"), coolingFor("engine:claude", t0), ""},
		{"cooling for an engine the job does not need", newJob("j"), coolingFor("engine:codex", t0.Add(time.Hour)), ""},
		{"draining before cooling", newJob("j"), func(f *fleet.Factory) {
			f.Draining = true
			coolingFor("engine:claude", t0.Add(time.Hour))(f)
		}, "factory is draining"},
		{"cooling before product and seat", newJob("j"), func(f *fleet.Factory) {
			f.Products, f.Load = []string{"p2"}, 2
			coolingFor("engine:claude", t0.Add(time.Hour))(f)
		}, "cooling down for engine:claude until 2026-05-31T13:00:00Z (rate limited)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFactory("f", tt.mod)
			c := only(Explain(tt.job, []*fleet.Factory{f}, t0, DefaultWeights))
			require.Equal(t, tt.reason, c.Reason)
			require.Equal(t, tt.reason == "", c.Eligible)
			if tt.reason != "" {
				require.Zero(t, c.Terms, "an ineligible factory is not scored")
			}
			best, _ := BestFactory(tt.job, []*fleet.Factory{f}, t0, DefaultWeights)
			require.Equal(t, tt.reason == "", best != nil, "BestFactory must agree with Explain")
		})
	}
}

func TestUnroutableReasons(t *testing.T) {
	t.Parallel()
	// The seed's two hard-coded UI factories: what agent-queue's
	// detect_capabilities emits (os, engine, node, has), never "build".
	mac := func(id string) *fleet.Factory {
		return newFactory(id, withCaps("os:macos", "engine:claude", "engine:codex", "node:20", "has:git"),
			withRepos("tracker-web", "notes"))
	}
	tests := []struct {
		name string
		job  *fleet.Job
		fs   []*fleet.Factory
		want string
	}{
		{
			"tracker-web form default capabilities=[build]",
			newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"build"}; j.Repo = "tracker-web" }),
			[]*fleet.Factory{mac("mac-1"), mac("mac-2")},
			"unroutable: no factory has capability build",
		},
		{
			"several capabilities nobody has, repo included",
			newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"engine:claude", "test", "build"}; j.Repo = "ghost" }),
			[]*fleet.Factory{mac("mac-1")},
			"unroutable: no factory has capabilities build, repo:ghost, test",
		},
		{
			"a down or full factory still holds its capabilities",
			newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"has:gpu"} }),
			[]*fleet.Factory{
				newFactory("gpu", withHealth(fleet.HealthDown), withCaps("has:gpu", "engine:claude")),
				newFactory("plain", withLoad(2)),
			},
			"no eligible factory: 1 lacks has:gpu, 1 is down",
		},
		{"no factories", newJob("j"), nil, "unroutable: no factory serves product p1"},
		{"only nil factories", newJob("j"), []*fleet.Factory{nil, nil}, "unroutable: no factory serves product p1"},
		// Other products' factories are not judged: p1's reason says
		// nothing of them, neither that they exist nor what they hold.
		{"only other products' factories", newJob("j"), []*fleet.Factory{otherProducts("o1"), otherProducts("o2")},
			"unroutable: no factory serves product p1"},
		{
			"a capability only another product's factory holds",
			newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"gpu:h100"} }),
			[]*fleet.Factory{newFactory("f"), otherProducts("o", withCaps("gpu:h100"))},
			"unroutable: no factory has capability gpu:h100",
		},
		{
			"a repo only another product's factory has",
			newJob("j", func(j *fleet.Job) { j.Repo = "secret" }),
			[]*fleet.Factory{newFactory("f"), otherProducts("o", withRepos("secret"))},
			"unroutable: no factory has capability repo:secret",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := Explain(tt.job, tt.fs, t0, DefaultWeights)
			require.False(t, e.Routable)
			require.Empty(t, e.Best)
			require.Equal(t, tt.want, e.Reason)

			best, reason := BestFactory(tt.job, tt.fs, t0, DefaultWeights)
			require.Nil(t, best)
			require.Equal(t, tt.want, reason.Text)
		})
	}
}

func TestNoEligibleSummary(t *testing.T) {
	t.Parallel()
	full := func(id string) *fleet.Factory { return newFactory(id, withLoad(2)) }
	down := func(id string) *fleet.Factory { return newFactory(id, withHealth(fleet.HealthDown)) }
	draining := func(id string) *fleet.Factory { return newFactory(id, func(f *fleet.Factory) { f.Draining = true }) }
	tests := []struct {
		name string
		job  *fleet.Job
		fs   []*fleet.Factory
		want string
	}{
		{"most common reason first", newJob("j"), []*fleet.Factory{down("d"), full("a"), full("b")},
			"no eligible factory: 2 have no free seat, 1 is down"},
		{"singular forms, filter order on equal counts", newJob("j"), []*fleet.Factory{full("a"), draining("r"), down("d")},
			"no eligible factory: 1 is down, 1 is draining, 1 has no free seat"},
		{"draining counted by dimension", newJob("j"), []*fleet.Factory{draining("r1"), full("a"), draining("r2"), down("d")},
			"no eligible factory: 2 are draining, 1 is down, 1 has no free seat"},
		{"one draining", newJob("j"), []*fleet.Factory{draining("r1"), full("a")},
			"no eligible factory: 1 is draining, 1 has no free seat"},
		{"cooling counted by dimension and engine", newJob("j"),
			[]*fleet.Factory{newFactory("c1", coolingFor("engine:claude", t0.Add(time.Minute))),
				newFactory("c2", coolingFor("engine:claude", t0.Add(time.Hour))), full("a")},
			"no eligible factory: 2 are cooling down for engine:claude, 1 has no free seat"},
		{"plural forms", newJob("j"), []*fleet.Factory{down("d1"), down("d2"), draining("r1"), draining("r2")},
			"no eligible factory: 2 are down, 2 are draining"},
		// Other products' factories are neither counted nor named, down,
		// full or missing the job's capabilities as they may be.
		{"other products' factories not counted", newJob("j"),
			[]*fleet.Factory{full("a"), otherProducts("o1"), otherProducts("o2", withHealth(fleet.HealthDown)),
				otherProducts("o3", withCaps("os:linux"))},
			"no eligible factory: 1 has no free seat"},
		{
			"capability held, but never together with the repo",
			newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"engine:codex"} }),
			[]*fleet.Factory{
				newFactory("codex-elsewhere", withCaps("engine:codex"), withRepos("other")),
				newFactory("notes-1"), newFactory("notes-2"),
			},
			"no eligible factory: 2 lack engine:codex, 1 lacks repo:notes",
		},
		{
			"a factory missing two counts under each",
			newJob("j", func(j *fleet.Job) { j.Capabilities = []string{"engine:codex", "node:22"} }),
			[]*fleet.Factory{
				newFactory("bare", withCaps("os:linux")),
				newFactory("codex-full", withCaps("engine:codex", "node:22"), withLoad(2)),
			},
			"no eligible factory: 1 lacks engine:codex, 1 lacks node:22, 1 has no free seat",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Explain(tt.job, tt.fs, t0, DefaultWeights).Reason)
			_, reason := BestFactory(tt.job, tt.fs, t0, DefaultWeights)
			require.Equal(t, tt.want, reason.Text)
		})
	}
}
