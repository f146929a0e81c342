package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// The raw CAS phase's shape: a few writers on a store that already holds
// earlier jobs, as the coordinator's use cases are.
const (
	casDocs    = 1000 // shipped jobs in the store before the writers start
	casWriters = 4
	casProduct = "bench-cas"
)

// casWrite is one of a lifecycle's job writes: the stage the job has after
// it, and whether it then holds a lease (holder, leaseExpiresAt).
type casWrite struct {
	stage  fleet.Stage
	leased bool
}

// lifecycleWrites are the job writes of one phase-2 lifecycle, in order:
// the submit's create, the dispatch stamp, the accept (which takes the
// lease), building, and shipped (which releases it). The store indexes the
// stage and the lease's expiry, so a write that moves them rewrites index
// pages that one changing neither leaves alone (in SQLite two to three
// times the pages): the yardstick has to make the lifecycle's own writes.
var lifecycleWrites = []casWrite{
	{fleet.StageQueued, false},
	{fleet.StageQueued, false},
	{fleet.StageAssigned, true},
	{fleet.StageBuilding, true},
	{fleet.StageShipped, false},
}

// casRun is one timed run of the writers.
type casRun struct {
	Seconds   float64 `json:"seconds"`
	Cycles    int64   `json:"cycles"` // lifecycles, or same-document writes
	Writes    int64   `json:"writes"`
	Conflicts int64   `json:"conflicts"`
	PerSec    float64 `json:"writesPerSec"`
	// CPUSeconds is this process's CPU time over the run (the stack is
	// idle meanwhile: casResult.Window); 0 where the OS does not tell.
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
}

// casResult is phase 5: a lifecycle's job writes straight on a SQLite
// store, no HTTP, no coordinator (the embedded run, which the throughput
// target is held to), and beside it the yardstick used before 2026-11-28.
type casResult struct {
	casRun
	Writers   int `json:"writers"`
	Docs      int `json:"docs"`
	BodyBytes int `json:"bodyBytes"`
	// SameDocument is read -> Replace(ifRev) on random existing jobs, no
	// indexed field changing: cheaper writes than a lifecycle makes.
	SameDocument casRun `json:"sameDocument"`
	// Window is the CPU time by process over phase 5, its set-up
	// included: the stack's is what the idle stack took beside the
	// writers. Nil where the OS does not tell.
	Window *cpuUse `json:"window,omitempty"`
}

// runCAS is phase 5 with the stack idle beside it: runCAS on a store of
// its own in the run's scratch directory, and each process's CPU
// meanwhile.
func (s *session) runCAS(ctx context.Context, template []byte) (*casResult, error) {
	st, err := s.op.hostStatus(ctx)
	if err != nil {
		return nil, err
	}
	cpu0, ok0 := s.sampleCPU(st.Handler.PID)
	res, err := runCAS(ctx, filepath.Join(s.tmp, "cas"), template, s.cfg.CAS)
	if err != nil {
		return nil, err
	}
	if cpu1, ok1 := s.sampleCPU(st.Handler.PID); ok0 && ok1 {
		res.Window = cpuBetween(cpu0, cpu1, runtime.NumCPU())
	}
	return res, nil
}

// runCAS opens a SQLite store in dir and creates casDocs shipped jobs
// shaped like template (a real job as the API served it). Then, for d,
// casWriters goroutines each create a job and move it through
// lifecycleWrites by read -> Replace(ifRev), one lifecycle after another;
// then, for d again, they run read -> Replace(ifRev) cycles on random
// shipped jobs (timedWrites). A lost race is retried with a fresh read, as mutateJob does.
func runCAS(ctx context.Context, dir string, template []byte, d time.Duration) (*casResult, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "cas.db"))
	if err != nil {
		return nil, err
	}
	defer st.Close()

	rests, err := writeBodies(template)
	if err != nil {
		return nil, fmt.Errorf("job template: %w", err)
	}
	shipped := rests[len(rests)-1]
	ids := make([]string, casDocs)
	for i := range ids {
		ids[i] = fmt.Sprintf("jcas%06d", i)
		if _, err := st.Create(ctx, store.Jobs, casProduct, ids[i], body(0, ids[i], shipped)); err != nil {
			return nil, err
		}
	}
	res := &casResult{Writers: casWriters, Docs: casDocs, BodyBytes: len(body(0, ids[0], shipped))}

	var seq atomic.Int64
	res.casRun, err = timedWrites(ctx, d, len(rests), func(ctx context.Context, conflicts *atomic.Int64) error {
		id := fmt.Sprintf("jlife%08d", seq.Add(1))
		if _, err := st.Create(ctx, store.Jobs, casProduct, id, body(0, id, rests[0])); err != nil {
			return err
		}
		for _, rest := range rests[1:] {
			if err := casOnce(ctx, st, id, func(n int64) []byte { return body(n, id, rest) }, conflicts); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.SameDocument, err = timedWrites(ctx, d, 1, func(ctx context.Context, conflicts *atomic.Int64) error {
		id := ids[rand.IntN(casDocs)]
		return casOnce(ctx, st, id, func(n int64) []byte { return body(n, id, shipped) }, conflicts)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// timedWrites runs cycle, which makes writesPerCycle writes, from
// casWriters goroutines, each starting cycles until d has passed: every
// cycle runs whole, so the run counts no half lifecycle, and each writer
// runs at least one. It stops at the first error.
func timedWrites(ctx context.Context, d time.Duration, writesPerCycle int, cycle func(context.Context, *atomic.Int64) error) (casRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cycles, conflicts atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	cpu0, cpuErr := procCPU(os.Getpid())
	start := time.Now()
	end := start.Add(d)
	for range casWriters {
		wg.Go(func() {
			for {
				if err := cycle(ctx, &conflicts); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
				cycles.Add(1)
				if ctx.Err() != nil || !time.Now().Before(end) {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, cpuErr1 := procCPU(os.Getpid())
	if p := firstErr.Load(); p != nil {
		return casRun{}, *p
	}
	n := cycles.Load()
	writes := n * int64(writesPerCycle)
	run := casRun{Seconds: elapsed.Seconds(), Cycles: n, Writes: writes, Conflicts: conflicts.Load(), PerSec: float64(writes) / elapsed.Seconds()}
	if cpuErr == nil && cpuErr1 == nil {
		run.CPUSeconds = (cpu1 - cpu0).Seconds()
	}
	return run, nil
}

// writeBodies is, for each of lifecycleWrites, the template job with that
// write's stage and lease, without its id and opening brace (body adds
// them).
func writeBodies(template []byte) ([][]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(template, &fields); err != nil {
		return nil, err
	}
	delete(fields, "id")
	fields["productId"], _ = json.Marshal(casProduct)
	now := time.Now().UTC()
	rests := make([][]byte, len(lifecycleWrites))
	for i, w := range lifecycleWrites {
		fields["stage"], _ = json.Marshal(w.stage)
		for _, f := range []string{"holderFactoryId", "leaseExpiresAt", "leaseAcquiredAt"} {
			delete(fields, f)
		}
		if w.leased {
			fields["holderFactoryId"], _ = json.Marshal("cas-factory")
			fields["leaseAcquiredAt"], _ = json.Marshal(now)
			fields["leaseExpiresAt"], _ = json.Marshal(now.Add(time.Minute))
		}
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, err
		}
		rests[i] = b[1:]
	}
	return rests, nil
}

// casOnce reads a document and replaces it at the revision read, retrying
// a lost race with a fresh read (bounded, as the coordinator's CAS loop is).
func casOnce(ctx context.Context, st *sqlite.Store, id string, next func(n int64) []byte, conflicts *atomic.Int64) error {
	for range 16 {
		it, err := st.Read(ctx, store.Jobs, casProduct, id)
		if err != nil {
			return err
		}
		rev, _ := strconv.ParseInt(it.Rev, 10, 64)
		_, err = st.Replace(ctx, store.Jobs, casProduct, id, next(rev), it.Rev)
		if errors.Is(err, store.ErrPrecondition) {
			conflicts.Add(1)
			continue
		}
		return err
	}
	return fmt.Errorf("document %s: 16 lost races in a row", id)
}

// body is a job document: a field that changes on every write, the id,
// then rest.
func body(n int64, id string, rest []byte) []byte {
	b := make([]byte, 0, len(rest)+len(id)+40)
	b = append(b, `{"benchWrite":`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, `,"id":`...)
	b = strconv.AppendQuote(b, id) // ids here are ASCII letters and digits
	b = append(b, ',')
	return append(b, rest...)
}
