// Command benchscale measures how the coordinator's cost grows with the
// work (`make bench-scale`): for each queue size it builds a fresh SQLite
// store with one product, -factories enrolled factories and that many
// queued jobs, then measures a poll claim (latency p50/p99, store
// operations and bytes read per claim, memory allocated per claim) and the
// dispatch of one new job (latency p50/p99), and prints one table row per
// size. It runs the coordinator in process over the real SQLite store, so
// the figures are the use case's own, without HTTP.
//
// Beside them, the two timer sweeps that read the backlog, -ticks ticks
// each (means per tick): "redisp" is the redispatch sweep over that queue,
// whose jobs no dispatch has routed yet (so every tick has a full page to
// route, its worst case); "reap" is the reaper with as many jobs again
// holding live leases, and -expired more whose leases expired written
// before each tick (so each tick reaps that many). Each prints store
// operations per tick and milliseconds per tick: with bounded pages both
// stay flat from 1k to 100k.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

func main() {
	sizes := flag.String("sizes", "1000,10000,100000", "queued jobs per run, comma-separated")
	factories := flag.Int("factories", 1000, "enrolled factories")
	claims := flag.Int("claims", 20, "claims measured per size")
	dispatches := flag.Int("dispatches", 20, "dispatches measured per size")
	ticks := flag.Int("ticks", 3, "ticks of each sweep measured per size")
	expired := flag.Int("expired", 64, "leases expired before each reaper tick")
	flag.Parse()
	fmt.Printf("benchscale: %d factories, %d claims, %d dispatches, %d ticks of each sweep per size (%d leases expired before each reaper tick), SQLite, %s/%s, %d CPUs\n\n",
		*factories, *claims, *dispatches, *ticks, *expired, runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Printf("%9s | %11s %11s | %9s %13s %11s | %11s %11s | %12s %13s | %10s %11s | %9s\n",
		"queued", "claim p50", "claim p99", "ops/claim", "KiB read/claim", "KiB alloc", "disp p50", "disp p99",
		"redisp ops/t", "redisp ms/t", "reap ops/t", "reap ms/t", "heap MiB")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fail(fmt.Errorf("-sizes: %q is not a number", s))
		}
		r, err := measure(params{queued: n, factories: *factories, claims: *claims, dispatches: *dispatches, ticks: *ticks, expired: *expired})
		if err != nil {
			fail(err)
		}
		fmt.Printf("%9d | %11s %11s | %9.1f %13.1f %11.1f | %11s %11s | %12.1f %13.1f | %10.1f %11.1f | %9.1f\n", n,
			r.claimP50, r.claimP99, r.opsPerClaim, r.kibPerClaim, r.allocKiBPerClaim, r.dispP50, r.dispP99,
			r.redispatch.ops, r.redispatch.ms, r.reap.ops, r.reap.ms, r.heapMiB)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchscale:", err)
	os.Exit(1)
}

// params are one size's run.
type params struct {
	queued, factories, claims, dispatches, ticks, expired int
}

type row struct {
	claimP50, claimP99, dispP50, dispP99 time.Duration
	opsPerClaim, kibPerClaim             float64
	allocKiBPerClaim, heapMiB            float64
	redispatch, reap                     perTick
}

// perTick is a sweep's mean cost per tick.
type perTick struct{ ops, ms float64 }

// bytesStore counts the document bytes the store hands back.
type bytesStore struct {
	store.Store
	read atomic.Int64
}

func (s *bytesStore) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	it, err := s.Store.Read(ctx, container, pk, id)
	s.read.Add(int64(len(it.Body)))
	return it, err
}

func (s *bytesStore) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	p, err := s.Store.Query(ctx, container, q)
	for _, it := range p.Items {
		s.read.Add(int64(len(it.Body)))
	}
	return p, err
}

func (s *bytesStore) ReadChanges(ctx context.Context, container, continuation string, max int) (store.ChangePage, error) {
	p, err := s.Store.ReadChanges(ctx, container, continuation, max)
	for _, it := range p.Items {
		s.read.Add(int64(len(it.Body)))
	}
	return p, err
}

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, protocol.DispatchMessage) error { return nil }

const (
	product = "p1"
	repo    = "r1"
)

func measure(p params) (row, error) {
	queued, factories, claims, dispatches := p.queued, p.factories, p.claims, p.dispatches
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "benchscale")
	if err != nil {
		return row{}, err
	}
	defer os.RemoveAll(dir)
	raw, err := sqlite.Open(ctx, filepath.Join(dir, "fleet.db"))
	if err != nil {
		return row{}, err
	}
	defer raw.Close()
	bytes := &bytesStore{Store: raw}
	counted := storecount.New(bytes)
	c, err := coord.New(coord.Config{}, coord.Deps{Store: counted, Clock: clock.System{}, Publisher: nopPublisher{}})
	if err != nil {
		return row{}, err
	}
	if _, err := c.PutProduct(ctx, product, product, []string{repo}); err != nil {
		return row{}, err
	}
	caps := []string{"os:linux", "engine:claude"}
	toks := make([]*fleet.Token, 0, factories)
	for i := range factories {
		_, secret, err := c.Enroll(ctx, catalog.EnrollRequest{FactoryID: fmt.Sprintf("f%04d", i), Products: []string{product}, Capabilities: caps, SeatLimit: 4})
		if err != nil {
			return row{}, err
		}
		tok, err := c.AuthenticateFactory(ctx, secret)
		if err != nil {
			return row{}, err
		}
		if _, err := c.Heartbeat(ctx, tok, catalog.Heartbeat{Capabilities: caps, Repos: []string{repo}}); err != nil {
			return row{}, err
		}
		toks = append(toks, tok)
	}
	// The queue is written straight to the store: submitting 100,000 jobs
	// through the use case would measure submit, not the claim.
	now := time.Now().UTC()
	for i := range queued {
		if err := writeJob(ctx, raw, fmt.Sprintf("j%07d", i), now.Add(-time.Duration(queued-i)*time.Second), nil); err != nil {
			return row{}, err
		}
	}

	var r row
	lat := make([]time.Duration, 0, claims)
	ops0, bytes0 := counted.Snapshot(), bytes.read.Load()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for range claims {
		tok := toks[rand.IntN(len(toks))]
		start := time.Now()
		got, err := c.Claim(ctx, coord.ClaimRequest{Token: tok})
		lat = append(lat, time.Since(start))
		if err != nil {
			return row{}, fmt.Errorf("claim: %w", err)
		}
		if got == nil {
			return row{}, fmt.Errorf("claim by %s found no job in a queue of %d", tok.FactoryID, queued)
		}
	}
	runtime.ReadMemStats(&m1)
	ops := counted.Snapshot().Sub(ops0)
	r.claimP50, r.claimP99 = percentile(lat, 50), percentile(lat, 99)
	r.opsPerClaim = float64(ops.Total()) / float64(claims)
	r.kibPerClaim = float64(bytes.read.Load()-bytes0) / 1024 / float64(claims)
	r.allocKiBPerClaim = float64(m1.TotalAlloc-m0.TotalAlloc) / 1024 / float64(claims)
	r.heapMiB = float64(m1.HeapAlloc) / (1 << 20)

	lat = lat[:0]
	manifest := []byte("---\ntitle: new job\nrepo: " + repo + "\ncapabilities: [engine:claude]\n---\nDo it.\n")
	for range dispatches {
		j, _, err := c.Submit(ctx, product, manifest)
		if err != nil {
			return row{}, fmt.Errorf("submit: %w", err)
		}
		it, err := raw.Read(ctx, store.Jobs, product, j.ID)
		if err != nil {
			return row{}, err
		}
		start := time.Now()
		ds, err := c.DispatchChanged(ctx, []store.Item{it})
		lat = append(lat, time.Since(start))
		if err != nil {
			return row{}, fmt.Errorf("dispatch: %w", err)
		}
		if len(ds) != 1 || ds[0].Skipped != "" {
			return row{}, fmt.Errorf("dispatch of %s: %+v", j.ID, ds)
		}
	}
	r.dispP50, r.dispP99 = percentile(lat, 50), percentile(lat, 99)

	// The redispatch sweep over the queue: none of it routed yet, so each
	// tick routes a full page (or, once the seats are spoken for, records
	// why not).
	if r.redispatch, err = sweepTicks(ctx, counted, p.ticks, 0, c.Redispatch, nil); err != nil {
		return row{}, fmt.Errorf("redispatch: %w", err)
	}
	// The reaper over as many live leases, with p.expired expired ones
	// written before each tick.
	for i := range queued {
		if err := writeJob(ctx, raw, fmt.Sprintf("l%07d", i), now, &lease{holder: toks[i%len(toks)].FactoryID, expires: now.Add(time.Hour)}); err != nil {
			return row{}, err
		}
	}
	expire := func(tick int) error {
		for i := range p.expired {
			id := fmt.Sprintf("x%03d-%04d", tick, i)
			if err := writeJob(ctx, raw, id, now, &lease{holder: toks[i%len(toks)].FactoryID, expires: time.Now().Add(-time.Minute)}); err != nil {
				return err
			}
		}
		return nil
	}
	if r.reap, err = sweepTicks(ctx, counted, p.ticks, p.expired, c.Reap, expire); err != nil {
		return row{}, fmt.Errorf("reap: %w", err)
	}
	return r, nil
}

// lease makes writeJob's job held by holder until expires.
type lease struct {
	holder  string
	expires time.Time
}

// writeJob writes a queued job (or, with l, one building under that lease)
// shaped as Submit writes it, straight to the store.
func writeJob(ctx context.Context, s store.Store, id string, at time.Time, l *lease) error {
	priorities := []fleet.Priority{fleet.PriorityLow, fleet.PriorityNormal, fleet.PriorityNormal, fleet.PriorityHigh}
	j := fleet.Job{ID: id, ProductID: product, Title: "job", Repo: repo, Capabilities: []string{"engine:claude"},
		Priority: priorities[len(id)%len(priorities)], Stage: fleet.StageQueued, Body: "Do the thing.\n", MaxAttempts: 3, Deps: []string{},
		QueuedAt: at, CreatedAt: at, UpdatedAt: at}
	// Its submitted event is in the document, as Submit writes it.
	j.RecordEvent(fleet.Event{Type: fleet.EventSubmitted, To: j.Stage, Actor: fleet.ActorOperator})
	if l != nil {
		j.Stage, j.HolderFactoryID, j.LeaseEpoch, j.LeaseAcquiredAt, j.LeaseExpiresAt = fleet.StageBuilding, l.holder, 1, at, l.expires.UTC()
	}
	body, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = s.Create(ctx, store.Jobs, product, j.ID, body)
	return err
}

// sweepTicks runs ticks ticks of sweep, each after before (when set), and
// returns the mean store operations and milliseconds per tick. With want
// set, each tick must have handled that many jobs.
func sweepTicks(ctx context.Context, counted *storecount.Store, ticks, want int, sweep func(context.Context) (int, error), before func(tick int) error) (perTick, error) {
	var ops int64
	var took time.Duration
	for i := range ticks {
		if before != nil {
			if err := before(i); err != nil {
				return perTick{}, err
			}
		}
		ops0 := counted.Snapshot()
		start := time.Now()
		n, err := sweep(ctx)
		took += time.Since(start)
		ops += counted.Snapshot().Sub(ops0).Total()
		if err != nil {
			return perTick{}, err
		}
		if want > 0 && n != want {
			return perTick{}, fmt.Errorf("tick %d handled %d jobs, not %d", i, n, want)
		}
	}
	return perTick{ops: float64(ops) / float64(ticks), ms: float64(took.Microseconds()) / 1000 / float64(ticks)}, nil
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(10 * time.Microsecond)
}
