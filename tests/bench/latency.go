package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

const latencyProduct = "bench-latency"

// latencyResult is phase 1: submit -> dispatch message received.
type latencyResult struct {
	Jobs         int     `json:"jobs"`
	Factories    int     `json:"factories"`
	RateAsked    float64 `json:"rateAskedPerSec"`
	RateAchieved float64 `json:"rateAchievedPerSec"`
	P50Ms        float64 `json:"p50Ms"`
	P90Ms        float64 `json:"p90Ms"`
	P99Ms        float64 `json:"p99Ms"`
	MaxMs        float64 `json:"maxMs"`
	MeanMs       float64 `json:"meanMs"`
	// SubmitP50Ms is the median time the submit POST itself took.
	SubmitP50Ms float64 `json:"submitP50Ms"`
	// Warmup is the jobs submitted at the same rate just before the
	// measured ones, which the figures above leave out.
	Warmup     *warmupResult  `json:"warmup,omitempty"`
	PerFactory map[string]int `json:"jobsPerFactory"`
	// Redeliveries are deliveries of a job after its first; AcceptConflicts
	// are accepts answered 409.
	Redeliveries    int `json:"redeliveries"`
	AcceptConflicts int `json:"acceptConflicts"`
	// Stages is the same path by stage (stages.go), Tail the slowest jobs'
	// time by segment.
	Stages []stageResult `json:"stages"`
	Tail   *tailSegments `json:"tail,omitempty"`
	// CPU is each process's CPU time from the first measured job's submit
	// to the last job's accept: at 100 jobs/s no batch carries more than a
	// job or two, so each job pays every wake and invocation itself, and
	// the CPUs' share busy is how likely a hand-over is to find its CPU
	// taken (what the tail is made of).
	CPU *cpuUse `json:"cpu,omitempty"`
}

// warmupResult is the warm-up's jobs: a fresh stack's first jobs find code
// not yet paged in, an empty heap and cold caches in every process, and
// the ones after them queue behind them (the change feed handles one batch
// at a time), for about the first 50 ms.
type warmupResult struct {
	Jobs    int     `json:"jobs"`
	FirstMs float64 `json:"firstMs"`
	P50Ms   float64 `json:"p50Ms"`
	MaxMs   float64 `json:"maxMs"`
}

// latencyRecorder joins submit and receive times by job id: a message may
// arrive before its submit POST has answered, so neither side waits for the
// other.
type latencyRecorder struct {
	mu        sync.Mutex
	want      int
	submitted map[string]time.Time
	warm      map[string]bool // the warm-up's jobs
	submitDur []time.Duration
	received  map[string]time.Time
	stored    map[string]time.Time // the broker's storing time of each first delivery
	factoryOf map[string]string
	epochs    map[string]int64 // accepted jobs
	redeliver int
	conflicts int
	done      chan struct{} // closed when want jobs are accepted
}

func newLatencyRecorder(want int) *latencyRecorder {
	return &latencyRecorder{want: want, submitted: map[string]time.Time{}, warm: map[string]bool{}, received: map[string]time.Time{}, stored: map[string]time.Time{},
		factoryOf: map[string]string{}, epochs: map[string]int64{}, done: make(chan struct{})}
}

func (r *latencyRecorder) submit(id string, at time.Time, took time.Duration, warm bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.submitted[id] = at
	if warm {
		r.warm[id] = true
		return
	}
	r.submitDur = append(r.submitDur, took)
}

// handler is the receiver loop's work: timestamp, accept, complete.
func (r *latencyRecorder) handler(f *factory) handler {
	return func(ctx context.Context, at time.Time, d bus.Delivery, m protocol.DispatchMessage) error {
		r.mu.Lock()
		if _, seen := r.received[m.JobID]; seen {
			r.redeliver++
		} else {
			r.received[m.JobID], r.factoryOf[m.JobID] = at, f.id
			r.stored[m.JobID] = d.EnqueuedAt
		}
		r.mu.Unlock()
		epoch, ok, err := f.acceptAndComplete(ctx, d, m)
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if !ok {
			r.conflicts++
			return nil
		}
		if _, dup := r.epochs[m.JobID]; dup {
			return fmt.Errorf("accepted twice")
		}
		r.epochs[m.JobID] = epoch
		if len(r.epochs) == r.want {
			close(r.done)
		}
		return nil
	}
}

// latencySplit is the recorder's jobs cut into what phase 1 reports: the
// measured jobs' latencies, instants and receive stage, and the warm-up
// apart.
type latencySplit struct {
	latency    []time.Duration
	tail       []tailJob // sorted by latency
	receive    []time.Duration
	perFactory map[string]int
	warmup     *warmupResult // nil without warm-up jobs
}

// split cuts the recorded jobs (r.mu held). A job submitted and never
// received is an error.
func (r *latencyRecorder) split() (latencySplit, error) {
	sp := latencySplit{perFactory: map[string]int{}}
	var warm []time.Duration
	var first time.Time
	var firstLat time.Duration
	for id, t0 := range r.submitted {
		at, ok := r.received[id]
		if !ok {
			return sp, fmt.Errorf("job lost: %s was accepted by nobody", id)
		}
		if r.warm[id] {
			warm = append(warm, at.Sub(t0))
			if first.IsZero() || t0.Before(first) {
				first, firstLat = t0, at.Sub(t0)
			}
			continue
		}
		sp.latency = append(sp.latency, at.Sub(t0))
		sp.tail = append(sp.tail, tailJob{id: id, sent: t0, stored: r.stored[id], received: at})
		// broker stored -> Receive returned, first deliveries
		sp.receive = append(sp.receive, at.Sub(r.stored[id]))
		sp.perFactory[r.factoryOf[id]]++
	}
	slices.SortFunc(sp.tail, func(a, b tailJob) int { return cmp.Compare(a.received.Sub(a.sent), b.received.Sub(b.sent)) })
	if len(warm) > 0 {
		sp.warmup = &warmupResult{Jobs: len(warm), FirstMs: ms(firstLat), P50Ms: ms(percentile(warm, 50)), MaxMs: ms(slices.Max(warm))}
	}
	return sp, nil
}

// runLatency is phase 1: one product, four factories (each with one of the
// product's four repos checked out, so the scheduler spreads the jobs), each
// with a receiver blocked in Receive; jobs submitted at a steady rate, the
// first Warmup of them reported apart.
func (s *session) runLatency(ctx context.Context) (*latencyResult, error) {
	const nf = 4
	repos := make([]string, nf)
	for i := range repos {
		repos[i] = fmt.Sprintf("lat-r%d", i)
	}
	if err := s.op.putProduct(ctx, latencyProduct, repos); err != nil {
		return nil, err
	}
	total := s.cfg.Warmup + s.cfg.Jobs
	rec := newLatencyRecorder(total)
	st, err := s.op.hostStatus(ctx)
	if err != nil {
		return nil, err
	}
	var cpu0 cpuSample
	cpuOK := false
	for i := range nf {
		// Every job keeps its lease until the phase ends, and a lease holds
		// a seat: each factory has a seat for every job it will be sent.
		f, err := s.addFactory(ctx, fmt.Sprintf("lat-%d", i), latencyProduct, repos[i], (total+nf-1)/nf, 4)
		if err != nil {
			return nil, err
		}
		s.background(func(ctx context.Context) error { return f.receiveLoop(ctx, rec.handler(f)) })
	}

	// Open loop: job i is due at start + i/rate whatever happened to the
	// ones before, so a slow answer does not slow the offered load.
	start := time.Now()
	interval := float64(time.Second) / s.cfg.Rate
	inflight := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var submitErr atomic.Pointer[error]
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range total {
		due := start.Add(time.Duration(math.Round(float64(i) * interval)))
		timer.Reset(max(time.Until(due), 0))
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		select {
		case <-ctx.Done():
		case inflight <- struct{}{}:
		}
		if ctx.Err() != nil || submitErr.Load() != nil {
			break
		}
		if i == s.cfg.Warmup {
			cpu0, cpuOK = s.sampleCPU(st.Handler.PID)
		}
		wg.Go(func() {
			defer func() { <-inflight }()
			m := manifest(fmt.Sprintf("latency %d", i), repos[i%nf], jobCaps)
			t0 := time.Now()
			id, err := s.op.submit(ctx, latencyProduct, m)
			if err != nil {
				submitErr.CompareAndSwap(nil, &err)
				return
			}
			rec.submit(id, t0, time.Since(t0), i < s.cfg.Warmup)
		})
	}
	offered := time.Since(start) // when the last submit was due and sent
	wg.Wait()
	if p := submitErr.Load(); p != nil {
		return nil, *p
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}

	wait := 60 * time.Second
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	select {
	case <-rec.done:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-deadline.C:
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return nil, fmt.Errorf("job lost: %d of %d jobs accepted %s after the last submit (%d received)",
			len(rec.epochs), total, wait, len(rec.received))
	}
	cpu1, cpuOK1 := s.sampleCPU(st.Handler.PID)

	rec.mu.Lock()
	sp, err := rec.split()
	if err != nil {
		rec.mu.Unlock()
		return nil, err
	}
	lat, tail := sp.latency, sp.tail
	res := &latencyResult{
		Jobs: s.cfg.Jobs, Factories: nf, RateAsked: s.cfg.Rate,
		RateAchieved:    float64(total-1) / max(offered.Seconds(), 1e-9),
		PerFactory:      sp.perFactory,
		Redeliveries:    rec.redeliver,
		AcceptConflicts: rec.conflicts,
		SubmitP50Ms:     ms(percentile(rec.submitDur, 50)),
		Warmup:          sp.warmup,
	}
	if cpuOK && cpuOK1 {
		res.CPU = cpuBetween(cpu0, cpu1, runtime.NumCPU())
	}
	epochs, holders := rec.epochs, maps.Clone(rec.factoryOf)
	receive := sp.receive
	rec.mu.Unlock()
	cs, err := s.op.coordinatorStats(ctx)
	if err != nil {
		return nil, err
	}
	hs, err := s.op.hostStatus(ctx)
	if err != nil {
		return nil, err
	}
	res.Stages = dispatchStages(cs, hs.Feeds["dispatch"], receive)
	if res.Tail, err = cutTail(ctx, s.op.jobInstants, tail); err != nil {
		return nil, fmt.Errorf("the slowest jobs' segments: %w", err)
	}
	if len(lat) != s.cfg.Jobs {
		return nil, fmt.Errorf("%d jobs submitted, %d answered with an id", s.cfg.Jobs, len(lat))
	}
	res.P50Ms, res.P90Ms, res.P99Ms = ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99))
	res.MaxMs, res.MeanMs = ms(slices.Max(lat)), ms(mean(lat))

	// The jobs hold leases now; cancel them so none expires into a later
	// phase (the reaper would requeue and re-dispatch it). Each holder
	// acknowledges at once as a factory does (releases with the outcome
	// cancelled): a cancel left to its grace would keep 2,000 jobs leased,
	// and every later phase's scans would page through them.
	ids := make([]string, 0, len(epochs))
	for id := range epochs {
		ids = append(ids, id)
	}
	byID := map[string]*factory{}
	for _, f := range s.factories {
		byID[f.id] = f
	}
	err = parallel(ctx, len(ids), 8, func(ctx context.Context, i int) error {
		id := ids[i]
		if err := s.op.cancel(ctx, latencyProduct, id); err != nil {
			return err
		}
		epoch := epochs[id]
		_, err := byID[holders[id]].api.fleet.Release(ctx, latencyProduct, id,
			api.ReleaseRequest{LeaseEpoch: &epoch, Outcome: api.Ptr(fleet.ReleaseCancelled)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel the phase's jobs: %w", err)
	}
	return res, nil
}

// percentile is the nearest-rank p-th percentile of ds (which it sorts).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*100) / 100 }

// parallel runs fn(i) for every i in [0, n) on up to workers goroutines and
// returns the first error, after which no new i starts.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
