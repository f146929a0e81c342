package schedule

import (
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// t0 is the fixed "now" of the tests; nothing reads the wall clock.
var t0 = time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)

// newFactory is an idle, healthy static factory with the notes repo, serving
// every product, with two seats; mods adjust it.
func newFactory(id string, mods ...func(*fleet.Factory)) *fleet.Factory {
	f := &fleet.Factory{
		ID:           id,
		Kind:         fleet.KindStatic,
		Capabilities: []string{"os:linux", "engine:claude", "has:git"},
		Repos:        []string{"notes"},
		SeatLimit:    2,
		Health:       fleet.HealthOK,
	}
	for _, m := range mods {
		m(f)
	}
	return f
}

// newJob is a queued normal job of product p1 on notes needing engine:claude,
// queued at t0; mods adjust it.
func newJob(id string, mods ...func(*fleet.Job)) *fleet.Job {
	j := &fleet.Job{
		ID:           id,
		ProductID:    "p1",
		Repo:         "notes",
		Capabilities: []string{"engine:claude"},
		Priority:     fleet.PriorityNormal,
		Stage:        fleet.StageQueued,
		QueuedAt:     t0,
		CreatedAt:    t0,
	}
	for _, m := range mods {
		m(j)
	}
	return j
}

// otherProducts is a factory serving only products other than the test
// jobs' p1.
func otherProducts(id string, mods ...func(*fleet.Factory)) *fleet.Factory {
	return newFactory(id, append(mods, func(f *fleet.Factory) { f.Products = []string{"other", "p3"} })...)
}

func withLoad(load int) func(*fleet.Factory) { return func(f *fleet.Factory) { f.Load = load } }

// withLeases sets the leases the coordinator counted for the factory.
func withLeases(n int) func(*fleet.Factory) { return func(f *fleet.Factory) { f.Leases = n } }

func withHealth(h fleet.Health) func(*fleet.Factory) {
	return func(f *fleet.Factory) { f.Health = h }
}

func withCaps(caps ...string) func(*fleet.Factory) {
	return func(f *fleet.Factory) { f.Capabilities = caps }
}

func withRepos(repos ...string) func(*fleet.Factory) {
	return func(f *fleet.Factory) { f.Repos = repos }
}

func withPriority(p fleet.Priority) func(*fleet.Job) { return func(j *fleet.Job) { j.Priority = p } }

func queuedAgo(d time.Duration) func(*fleet.Job) {
	return func(j *fleet.Job) { j.QueuedAt = t0.Add(-d) }
}

func inStage(s fleet.Stage) func(*fleet.Job) { return func(j *fleet.Job) { j.Stage = s } }

// only returns the sole candidate of an explanation over one factory.
func only(e Explanation) Candidate {
	if len(e.Candidates) != 1 {
		panic("expected exactly one candidate")
	}
	return e.Candidates[0]
}

func ids(fs []*fleet.Factory) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

// coolingFor sets cooldowns on the factory: capability -> until.
func coolingFor(c string, until time.Time) func(*fleet.Factory) {
	return func(f *fleet.Factory) {
		if f.Cooldowns == nil {
			f.Cooldowns = map[string]time.Time{}
		}
		f.Cooldowns[c] = until
	}
}
