package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

const lifecycleProduct = "bench-lifecycle"

// Phase 2's shape: a small pool of submitters, and per factory a receiver
// feeding a few no-op workers (a factory runs several jobs at once).
const (
	lifecycleFactories = 8
	lifecycleSubmitter = 8
	workersPerFactory  = 8
)

// lifecycleResult is phases 2 and 3.
type lifecycleResult struct {
	Lifecycles        int     `json:"lifecycles"`
	Factories         int     `json:"factories"`
	Submitters        int     `json:"submitters"`
	WorkersPerFactory int     `json:"workersPerFactory"`
	Seconds           float64 `json:"seconds"` // first submit -> last shipped
	PerSec            float64 `json:"lifecyclesPerSec"`
	// Ops are both processes' store operations from before the first
	// submit to after the change feed settled past the last shipped job.
	Ops             ops            `json:"ops"`
	PerLifecycle    perLifecycle   `json:"perLifecycle"`
	WritesPerSec    float64        `json:"storeWritesPerSec"` // the writes that wrote (not refused) per lifecycle x PerSec
	Coord           coordStats     `json:"coordinator"`       // the handler's counters over the phase
	FeedBatches     int64          `json:"feedBatches"`
	FeedDocuments   int64          `json:"feedDocuments"`
	PerFactory      map[string]int `json:"jobsPerFactory"`
	AcceptConflicts int            `json:"acceptConflicts"`
	// CPU is each process's CPU time from the first submit to the last
	// shipped job; nil where the OS does not tell.
	CPU *cpuUse `json:"cpu,omitempty"`
}

// perLifecycle is operations per lifecycle by process and kind.
type perLifecycle struct {
	Handler  kinds `json:"handler"`
	Emulator kinds `json:"emulator"`
	Total    kinds `json:"total"`
}

type kinds struct {
	Reads  float64 `json:"reads"`
	Writes float64 `json:"writes"`
	// Refused are the writes among Writes the store declined: a lost
	// compare-and-swap race, or a conditional increment whose condition did
	// not hold (the ledger's bumps no sweep armed). They are asked for, so
	// they count as operations and the request-unit estimate prices them as
	// writes (the cautious side), but they write no page: SQLite checks the
	// increment's condition on a reader.
	Refused   float64 `json:"refused"`
	Queries   float64 `json:"queries"`
	FeedReads float64 `json:"feedReads"`
	All       float64 `json:"all"`
}

// Written is the writes that wrote, what the raw CAS rate is divided by.
func (k kinds) Written() float64 { return k.Writes - k.Refused }

func per(c storecount.Counts, n int) kinds {
	d := float64(n)
	return kinds{Reads: float64(c.Reads) / d, Writes: float64(c.Writes) / d, Refused: float64(c.Conflicts) / d,
		Queries: float64(c.Queries) / d, FeedReads: float64(c.FeedReads) / d, All: float64(c.Total()) / d}
}

// lifecycleRecorder counts what the workers did, per job.
type lifecycleRecorder struct {
	mu        sync.Mutex
	want      int
	accepted  map[string]int
	shipped   map[string]int
	factory   map[string]string
	conflicts int
	last      time.Time
	done      chan struct{} // closed when want distinct jobs are shipped
}

// delivered is a dispatch waiting for a worker.
type delivered struct {
	d bus.Delivery
	m protocol.DispatchMessage
}

// work runs one job's factory side: accept, complete, building, shipped.
func (r *lifecycleRecorder) work(ctx context.Context, f *factory, it delivered) error {
	f.inflight.Add(1)
	defer f.inflight.Add(-1)
	epoch, ok, err := f.acceptAndComplete(ctx, it.d, it.m)
	if err != nil {
		return err
	}
	id := it.m.JobID
	r.mu.Lock()
	if !ok {
		r.conflicts++
	} else {
		r.accepted[id]++
	}
	r.mu.Unlock()
	if !ok {
		return nil
	}
	for _, stage := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
		if err := f.api.patchStage(ctx, it.m.ProductID, id, stage, epoch); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shipped[id]++
	r.factory[id] = f.id
	r.last = time.Now()
	if len(r.shipped) == r.want && r.shipped[id] == 1 {
		close(r.done)
	}
	return nil
}

// runLifecycles is phases 2 and 3: eight factories, each with one of the
// product's eight repos, a receiver and no-op workers; N jobs submitted as
// fast as the submitters can. It returns a shipped job's id.
func (s *session) runLifecycles(ctx context.Context) (*lifecycleResult, string, error) {
	n := s.cfg.Lifecycles
	repos := make([]string, lifecycleFactories)
	for i := range repos {
		repos[i] = fmt.Sprintf("life-r%d", i)
	}
	if err := s.op.putProduct(ctx, lifecycleProduct, repos); err != nil {
		return nil, "", err
	}
	rec := &lifecycleRecorder{want: n, accepted: map[string]int{}, shipped: map[string]int{},
		factory: map[string]string{}, done: make(chan struct{})}
	for i := range lifecycleFactories {
		f, err := s.addFactory(ctx, fmt.Sprintf("life-%d", i), lifecycleProduct, repos[i], 64, workersPerFactory+2)
		if err != nil {
			return nil, "", err
		}
		queue := make(chan delivered, 2*workersPerFactory)
		s.background(func(ctx context.Context) error {
			return f.receiveLoop(ctx, func(ctx context.Context, _ time.Time, d bus.Delivery, m protocol.DispatchMessage) error {
				select {
				case queue <- delivered{d, m}:
				case <-ctx.Done():
				}
				return nil
			})
		})
		for range workersPerFactory {
			s.background(func(ctx context.Context) error {
				for {
					select {
					case <-ctx.Done():
						return nil
					case it := <-queue:
						if err := rec.work(ctx, f, it); err != nil {
							return fmt.Errorf("factory %s: job %s: %w", f.id, it.m.JobID, err)
						}
					}
				}
			})
		}
	}

	if err := settle(ctx, s.op); err != nil {
		return nil, "", err
	}
	before, err := s.probe.take(ctx)
	if err != nil {
		return nil, "", err
	}
	ids := make([]string, n)
	cpu0, cpuOK := s.sampleCPU(before.PID)
	start := time.Now()
	err = parallel(ctx, n, lifecycleSubmitter, func(ctx context.Context, i int) error {
		id, err := s.op.submit(ctx, lifecycleProduct, manifest(fmt.Sprintf("lifecycle %d", i), repos[i%len(repos)], jobCaps))
		ids[i] = id
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("submit: %w", err)
	}
	wait := 60*time.Second + time.Duration(n)*100*time.Millisecond
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	select {
	case <-rec.done:
	case <-ctx.Done():
		return nil, "", context.Cause(ctx)
	case <-deadline.C:
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return nil, "", fmt.Errorf("job lost: %d of %d jobs shipped within %s (%d accepted)", len(rec.shipped), n, wait, len(rec.accepted))
	}
	cpu1, cpuOK1 := s.sampleCPU(before.PID)
	rec.mu.Lock()
	elapsed := rec.last.Sub(start)
	rec.mu.Unlock()
	if err := settle(ctx, s.op); err != nil {
		return nil, "", err
	}
	after, err := s.probe.take(ctx)
	if err != nil {
		return nil, "", err
	}
	o, err := s.probe.between(before, after)
	if err != nil {
		return nil, "", err
	}
	if err := s.verifyShipped(ctx, rec, ids); err != nil {
		return nil, "", err
	}

	t := o.Total()
	res := &lifecycleResult{
		Lifecycles: n, Factories: lifecycleFactories, Submitters: lifecycleSubmitter, WorkersPerFactory: workersPerFactory,
		Seconds: elapsed.Seconds(), PerSec: float64(n) / elapsed.Seconds(),
		Ops:          o,
		PerLifecycle: perLifecycle{Handler: per(o.Handler, n), Emulator: per(o.Emulator, n), Total: per(t, n)},
		Coord: coordStats{
			CASConflicts:    after.Coord.CASConflicts - before.Coord.CASConflicts,
			Claims:          after.Coord.Claims - before.Coord.Claims,
			ClaimConflicts:  after.Coord.ClaimConflicts - before.Coord.ClaimConflicts,
			Dispatched:      after.Coord.Dispatched - before.Coord.Dispatched,
			PublishFailed:   after.Coord.PublishFailed - before.Coord.PublishFailed,
			EventsDeferred:  after.Coord.EventsDeferred - before.Coord.EventsDeferred,
			EventsRepaired:  after.Coord.EventsRepaired - before.Coord.EventsRepaired,
			BumpsSkipped:    after.Coord.BumpsSkipped - before.Coord.BumpsSkipped,
			SeatFeedDecoded: after.Coord.SeatFeedDecoded - before.Coord.SeatFeedDecoded,
			SeatFeedNoted:   after.Coord.SeatFeedNoted - before.Coord.SeatFeedNoted,
		},
		FeedBatches:     after.Feed.Batches - before.Feed.Batches,
		FeedDocuments:   after.Feed.Documents - before.Feed.Documents,
		PerFactory:      map[string]int{},
		AcceptConflicts: rec.conflicts,
	}
	res.WritesPerSec = res.PerLifecycle.Total.Written() * res.PerSec
	for _, f := range rec.factory {
		res.PerFactory[f]++
	}
	if cpuOK && cpuOK1 {
		res.CPU = cpuBetween(cpu0, cpu1, runtime.NumCPU())
	}
	return res, ids[0], nil
}

// verifyShipped checks that every submitted job was accepted and shipped
// exactly once by the workers, and that the store has every job of the
// product shipped and no other.
func (s *session) verifyShipped(ctx context.Context, rec *lifecycleRecorder, ids []string) error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, id := range ids {
		if rec.accepted[id] != 1 || rec.shipped[id] != 1 {
			return fmt.Errorf("job %s: accepted %d times, shipped %d times; want once each", id, rec.accepted[id], rec.shipped[id])
		}
	}
	if len(rec.shipped) != len(ids) {
		return fmt.Errorf("%d jobs shipped, %d submitted", len(rec.shipped), len(ids))
	}
	jobs, err := s.op.listJobs(ctx, lifecycleProduct)
	if err != nil {
		return err
	}
	if len(jobs) != len(ids) {
		return fmt.Errorf("the store holds %d jobs of %s, %d were submitted", len(jobs), lifecycleProduct, len(ids))
	}
	for _, j := range jobs {
		if j.Stage != "shipped" || rec.shipped[j.ID] != 1 {
			return fmt.Errorf("job %s ended %s (shipped by workers %d times)", j.ID, j.Stage, rec.shipped[j.ID])
		}
	}
	return nil
}
