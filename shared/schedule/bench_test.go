package schedule

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// The generators model a fleet as agent-queue's detect_capabilities reports
// it: one os, one engine, one node, has:git and a persona per factory, a few
// repos checked out each, a mix of loads and health, some product scoping.

var (
	genOS       = []string{"os:linux", "os:linux", "os:macos", "os:windows"}
	genEngines  = []string{"engine:claude", "engine:codex", "engine:gemini"}
	genNodes    = []string{"node:18", "node:20", "node:22"}
	genPersonas = []string{"builder", "reviewer", "tester"}
	genProducts = []string{"p1", "p2", "p3", "p4", "p5"}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func genRepo(i int) string { return "repo-" + strconv.Itoa(i) }

// genFactories makes n factories, each with up to five repos of repoPool.
func genFactories(rng *rand.Rand, n, repoPool int) []*fleet.Factory {
	fs := make([]*fleet.Factory, n)
	for i := range fs {
		seats := 1 + rng.IntN(4)
		f := &fleet.Factory{
			ID:   fmt.Sprintf("factory-%05d", i),
			Kind: fleet.KindStatic,
			Capabilities: []string{
				pick(rng, genOS), pick(rng, genEngines), pick(rng, genNodes), "has:git",
				"persona:" + pick(rng, genPersonas),
			},
			SeatLimit: seats,
			Load:      rng.IntN(seats + 1),
			Health:    fleet.HealthOK,
		}
		for _, r := range rng.Perm(repoPool)[:min(5, repoPool)] {
			f.Repos = append(f.Repos, genRepo(r))
		}
		switch x := rng.IntN(100); {
		case x < 5:
			f.Health = fleet.HealthDown
		case x < 10:
			f.Health = fleet.HealthStale
		case x < 20:
			f.Health = fleet.HealthDegraded
		}
		if rng.IntN(10) < 3 {
			f.Products = []string{pick(rng, genProducts)}
		}
		if rng.IntN(5) > 0 {
			f.CostPerHourUSD = float64(rng.IntN(300)) / 100
		}
		fs[i] = f
	}
	return fs
}

// genJob makes a queued job on one of repoPool repos, queued up to an hour
// before t0.
func genJob(rng *rand.Rand, i, repoPool int) *fleet.Job {
	j := &fleet.Job{
		ID:           fmt.Sprintf("job-%06d", i),
		ProductID:    pick(rng, genProducts),
		Repo:         genRepo(rng.IntN(repoPool)),
		Capabilities: []string{"os:linux", pick(rng, genEngines), "has:git"},
		Priority:     pick(rng, []fleet.Priority{fleet.PriorityLow, fleet.PriorityNormal, fleet.PriorityNormal, fleet.PriorityHigh, fleet.PriorityCritical}),
		Stage:        fleet.StageQueued,
		Budget:       fleet.Budget{USD: float64(rng.IntN(500)) / 100, Wall: fleet.Duration(30+rng.IntN(90)) * fleet.Duration(time.Minute)},
		CreatedAt:    t0.Add(-time.Hour),
	}
	j.QueuedAt = t0.Add(-time.Duration(rng.IntN(3600)) * time.Second)
	if rng.IntN(2) == 0 {
		j.Persona = pick(rng, genPersonas)
	}
	return j
}

const benchRepos = 40

func BenchmarkBestFactory(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, uint64(n)))
			fs := genFactories(rng, n, benchRepos)
			jobs := make([]*fleet.Job, 64)
			for i := range jobs {
				jobs[i] = genJob(rng, i, benchRepos)
			}
			routed := 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if f, _ := BestFactory(jobs[i%len(jobs)], fs, t0, DefaultWeights); f != nil {
					routed++
				}
			}
			if routed == 0 {
				b.Fatal("no job was routable: the benchmark measures nothing")
			}
		})
	}
}

// BenchmarkBestFactoryUnroutable is the slow path: nothing fits, so the
// reason is worded from a full second pass.
func BenchmarkBestFactoryUnroutable(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 10_000))
	fs := genFactories(rng, 10_000, benchRepos)
	j := genJob(rng, 0, benchRepos)
	j.Capabilities = append(j.Capabilities, "build")
	b.ReportAllocs()
	for b.Loop() {
		if f, _ := BestFactory(j, fs, t0, DefaultWeights); f != nil {
			b.Fatal("routed an unroutable job")
		}
	}
}

func BenchmarkRankJobs(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 13))
	jobs := make([]*fleet.Job, 10_000)
	for i := range jobs {
		jobs[i] = genJob(rng, i, benchRepos)
	}
	f := genFactories(rng, 1, benchRepos)[0]
	f.Capabilities = []string{"os:linux", "engine:claude", "node:22", "has:git", "persona:builder"}
	f.Health, f.Products, f.SeatLimit, f.Load = fleet.HealthOK, nil, 4, 1
	b.ReportAllocs()
	for b.Loop() {
		if len(RankJobs(f, jobs, t0, DefaultWeights)) == 0 {
			b.Fatal("no job was eligible: the benchmark measures nothing")
		}
	}
}

func BenchmarkExplain(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 1_000))
	fs := genFactories(rng, 1_000, benchRepos)
	jobs := make([]*fleet.Job, 64)
	for i := range jobs {
		jobs[i] = genJob(rng, i, benchRepos)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Explain(jobs[i%len(jobs)], fs, t0, DefaultWeights)
	}
}
