package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// The raw CAS phase's shape: a few writers over many job documents, as the
// coordinator's use cases are.
const (
	casDocs    = 1000
	casWriters = 4
	casProduct = "bench-cas"
)

// casResult is phase 5: read -> Replace(ifRev) cycles straight on a SQLite
// store, no HTTP, no coordinator.
type casResult struct {
	Seconds   float64 `json:"seconds"`
	Writers   int     `json:"writers"`
	Docs      int     `json:"docs"`
	BodyBytes int     `json:"bodyBytes"`
	Writes    int64   `json:"writes"`
	Conflicts int64   `json:"conflicts"`
	PerSec    float64 `json:"writesPerSec"`
	// CPUSeconds is this process's CPU time over the cycles (the stack is
	// stopped by then); 0 where the OS does not tell.
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
}

// runCAS opens a SQLite store in dir, creates casDocs job documents shaped
// like template (a real job as the API served it), and runs read ->
// Replace(ifRev) cycles on random documents from casWriters goroutines for
// d. A lost race is retried with a fresh read, as mutateJob does.
func runCAS(ctx context.Context, dir string, template []byte, d time.Duration) (*casResult, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "cas.db"))
	if err != nil {
		return nil, err
	}
	defer st.Close()

	var fields map[string]json.RawMessage
	if err := json.Unmarshal(template, &fields); err != nil {
		return nil, fmt.Errorf("job template: %w", err)
	}
	ids := make([]string, casDocs)
	rests := make([][]byte, casDocs) // each body without its opening brace
	for i := range ids {
		ids[i] = fmt.Sprintf("jcas%06d", i)
		fields["id"], _ = json.Marshal(ids[i])
		fields["productId"], _ = json.Marshal(casProduct)
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, err
		}
		rests[i] = b[1:]
		if _, err := st.Create(ctx, store.Jobs, casProduct, ids[i], body(0, rests[i])); err != nil {
			return nil, err
		}
	}

	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var writes, conflicts atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	cpu0, cpuErr := procCPU(os.Getpid())
	start := time.Now()
	for range casWriters {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := rand.IntN(casDocs)
				err := casOnce(ctx, st, ids[i], func(n int64) []byte { return body(n, rests[i]) }, &conflicts)
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, &err)
						cancel()
					}
					return
				}
				writes.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, cpuErr1 := procCPU(os.Getpid())
	if p := firstErr.Load(); p != nil {
		return nil, *p
	}
	res := &casResult{
		Seconds: elapsed.Seconds(), Writers: casWriters, Docs: casDocs, BodyBytes: len(rests[0]) + 1,
		Writes: writes.Load(), Conflicts: conflicts.Load(), PerSec: float64(writes.Load()) / elapsed.Seconds(),
	}
	if cpuErr == nil && cpuErr1 == nil {
		res.CPUSeconds = (cpu1 - cpu0).Seconds()
	}
	return res, nil
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

// body is a job document with a field that changes on every write.
func body(n int64, rest []byte) []byte {
	b := make([]byte, 0, len(rest)+32)
	b = append(b, `{"benchWrite":`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, ',')
	return append(b, rest...)
}
