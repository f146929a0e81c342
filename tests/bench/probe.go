package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gigafactory/fleet/shared/store/storecount"
)

// snapshot is both processes' store counters at one moment: the handler's
// (every coord use case, the dispatch function and the timers run there) and
// the host emulator's own (change-feed reads and checkpoints).
type snapshot struct {
	Handler  storecount.Counts
	Emulator storecount.Counts
	Coord    coordStats
	Restarts int64
	PID      int // the handler's
	Feed     struct{ Batches, Documents, Failed int64 }
}

// ops is the store operations of both processes over a window.
type ops struct {
	Handler  storecount.Counts `json:"handler"`
	Emulator storecount.Counts `json:"emulator"`
}

// Total is both processes' operations by kind.
func (o ops) Total() storecount.Counts { return add(o.Handler, o.Emulator) }

func add(a, b storecount.Counts) storecount.Counts {
	return storecount.Counts{
		Reads: a.Reads + b.Reads, Writes: a.Writes + b.Writes, Queries: a.Queries + b.Queries,
		FeedReads: a.FeedReads + b.FeedReads, Conflicts: a.Conflicts + b.Conflicts,
	}
}

// readOps is every operation that reads: point reads, query pages and
// change-feed pages.
func readOps(c storecount.Counts) int64 { return c.Reads + c.Queries + c.FeedReads }

// prober reads the counters. GET /api/fleet/metrics is itself served by the
// handler and runs store queries (the factory list, the active jobs, the bus
// section's factory list); probeQueries is how many one call adds, measured
// by calibrate and taken off every window.
type prober struct {
	op           *client
	probeQueries int64
}

// take reads both processes' counters. The emulator's status costs no store
// operation, so it is read first.
func (p *prober) take(ctx context.Context) (snapshot, error) {
	var s snapshot
	st, err := p.op.hostStatus(ctx)
	if err != nil {
		return s, err
	}
	s.Emulator, s.Restarts, s.PID = *st.Store, st.Handler.Restarts, st.Handler.PID
	s.Feed.Batches, s.Feed.Documents, s.Feed.Failed = st.feedTotals()
	if s.Handler, s.Coord, err = p.op.handlerMetrics(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// between returns the operations from a to b, less the metrics probes' own
// queries. Which side of its own snapshot a probe's bus section runs is up
// to map order in the handler, so handler queries are exact to ±1.
func (p *prober) between(a, b snapshot) (ops, error) {
	if b.Restarts != a.Restarts {
		return ops{}, fmt.Errorf("the handler restarted %d time(s) during the window: its counters were reset", b.Restarts-a.Restarts)
	}
	o := ops{Handler: b.Handler.Sub(a.Handler), Emulator: b.Emulator.Sub(a.Emulator)}
	o.Handler.Queries -= p.probeQueries
	return o, nil
}

// calibrate measures probeQueries: 20 probes back to back while the fleet is
// idle; the queries they add, over 20, rounded. A timer firing in between
// adds at most one query, which the rounding absorbs; a window with other
// operations in it is measured again.
func (p *prober) calibrate(ctx context.Context) error {
	const n = 20
	var perProbe float64
	for range 3 {
		if err := settle(ctx, p.op); err != nil {
			return err
		}
		first, err := p.take(ctx)
		if err != nil {
			return err
		}
		last := first
		for range n {
			if last, err = p.take(ctx); err != nil {
				return err
			}
		}
		d := last.Handler.Sub(first.Handler)
		perProbe = float64(d.Queries) / n
		if d.Reads == 0 && d.Writes == 0 && d.FeedReads == 0 {
			break
		}
	}
	p.probeQueries = int64(math.Round(perProbe))
	if p.probeQueries <= 0 {
		return errors.New("calibrate: a metrics probe ran no store query; the handler's metrics changed shape")
	}
	return nil
}

// settle waits until the emulator's store and feed counters have not moved
// for quietFor: the change feed has caught up with every write made so far
// (each write wakes it), so a snapshot taken now sees a step's whole cost.
func settle(ctx context.Context, op *client) error {
	const (
		quietFor = 150 * time.Millisecond
		poll     = 10 * time.Millisecond
		limit    = 30 * time.Second
	)
	read := func() (hostStatus, error) { return op.hostStatus(ctx) }
	prev, err := read()
	if err != nil {
		return err
	}
	same := func(a, b hostStatus) bool {
		ab, ad, af := a.feedTotals()
		bb, bd, bf := b.feedTotals()
		return *a.Store == *b.Store && ab == bb && ad == bd && af == bf
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	start, quietSince := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
		cur, err := read()
		if err != nil {
			return err
		}
		now := time.Now()
		if !same(prev, cur) {
			prev, quietSince = cur, now
		}
		if now.Sub(quietSince) >= quietFor {
			return nil
		}
		if now.Sub(start) > limit {
			return fmt.Errorf("the change feed did not settle within %s", limit)
		}
	}
}
