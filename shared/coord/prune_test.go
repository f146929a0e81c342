package coord_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// factoryIDs lists the enrolled factories by id.
func (e *env) factoryIDs() []string {
	e.t.Helper()
	fs, err := e.c.ListFactories(e.ctx, "")
	require.NoError(e.t, err)
	ids := make([]string, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.ID)
	}
	return ids
}

// prune runs one prune tick and requires it to succeed.
func (e *env) prune() int {
	e.t.Helper()
	n, err := e.c.Prune(e.ctx)
	require.NoError(e.t, err)
	return n
}

// TestPrune: a static factory silent for PruneAfter is deregistered as
// DELETE /fleet/factories/{id} does (record gone, token refused), logged
// and counted; one heard from since, an elastic pool and a factory holding
// a lease stay. The lease holder goes once its lease is reaped.
func TestPrune(t *testing.T) {
	t.Parallel()
	logs, mu := &bytes.Buffer{}, &sync.Mutex{}
	e := newEnv(t, withDeps(func(d *coord.Deps) { d.Log = slog.New(slog.NewJSONHandler(lockedWriter{mu, logs}, nil)) }))
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "gone", Capabilities: baseCaps})
	require.NoError(t, err)
	alive := e.factory("alive")
	e.factory("pool", kind(fleet.KindElastic))
	e.factory("busy")
	e.submit()
	held := e.claim("busy")

	e.clock.Advance(coord.DefaultPruneAfter - time.Second)
	e.beat(alive)
	require.Zero(t, e.prune(), "nobody silent for PruneAfter yet")
	e.clock.Advance(time.Second) // gone, pool and busy: silent exactly PruneAfter

	require.Equal(t, 1, e.prune())
	require.Equal(t, []string{"alive", "busy", "pool"}, e.factoryIDs())
	_, err = e.c.GetFactory(e.ctx, "gone")
	require.ErrorIs(t, err, fleet.ErrNotFound)
	_, err = e.c.AuthenticateFactory(e.ctx, secret)
	requireCode(t, err, fleet.CodeUnauthenticated, "")
	require.Equal(t, int64(1), e.c.Stats().FactoriesPruned)
	mu.Lock()
	line := pruneLog(t, logs)
	mu.Unlock()
	require.Equal(t, "gone", line["factory"])
	require.Equal(t, t0.Format(time.RFC3339Nano), line["lastSeen"], "never heard from: its enrolment")

	// busy's lease ran out long ago, but the job is still its until the
	// reaper takes it back; then the next look (a lease TTL on) prunes it.
	require.Equal(t, fleet.StageAssigned, e.job(held.Job.ID).Stage)
	reaped, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, reaped)
	e.clock.Advance(coord.DefaultLeaseTTL)
	require.Equal(t, 1, e.prune())
	require.Equal(t, []string{"alive", "pool"}, e.factoryIDs(), "an elastic pool is never pruned")
	require.Equal(t, int64(2), e.c.Stats().FactoriesPruned)

	m, err := e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Equal(t, int64(2), m.Coord.FactoriesPruned, "/fleet/metrics counts them")
}

// pruneLog is the one "pruned" log line in logs, decoded.
func pruneLog(t *testing.T, logs *bytes.Buffer) map[string]any {
	t.Helper()
	var found []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(logs.Bytes()))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		if line["msg"] == "pruned a silent static factory" {
			found = append(found, line)
		}
	}
	require.Len(t, found, 1)
	return found[0]
}

// TestPruneIdleTick: after a scan, a prune tick costs one point read and
// nothing else until the earliest time a factory could fall due, however
// many heartbeats and enrolments come meanwhile (heartbeats cost their one
// write and nothing for the prune); then it scans and prunes on time.
func TestPruneIdleTick(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	cfg := feedConfig
	cfg.PruneAfter = 30 * time.Minute // under QuietRescanAfter: the mark's own end is what is tested
	e := newEnv(t, withConfig(cfg), countingStore(&counted))
	tok := e.factory("f1")
	e.factory("pool", kind(fleet.KindElastic))
	tick := func() (int, storecount.Counts) {
		before := counted.Snapshot()
		n := e.prune()
		return n, counted.Snapshot().Sub(before)
	}

	n, first := tick()
	require.Zero(t, n)
	require.Positive(t, first.Queries, "the first tick scans")
	for range 3 {
		e.clock.Advance(time.Minute)
		n, got := tick()
		require.Zero(t, n)
		require.Equal(t, storecount.Counts{Reads: 1}, got, "an idle tick is one point read")
	}

	// f2 enrols at t0+3m and falls silent; f1 heartbeats twice more and
	// falls silent at t0+4m. Neither moves the mark.
	e.factory("f2")
	for range 2 {
		e.clock.Advance(30 * time.Second)
		before := counted.Snapshot()
		e.beat(tok)
		require.Equal(t, storecount.Counts{Writes: 1}, counted.Snapshot().Sub(before), "a heartbeat is one write, nothing for the prune")
		_, got := tick()
		require.Equal(t, storecount.Counts{Reads: 1}, got)
	}
	require.Equal(t, t0.Add(4*time.Minute), e.clock.Now())

	// The mark ends at t0+30m, f1's due time when the scan ran; it has
	// heartbeated since, so nothing is pruned and the new mark ends at f2's
	// (t0+33m).
	e.clock.Set(t0.Add(30*time.Minute - time.Second))
	_, got := tick()
	require.Equal(t, storecount.Counts{Reads: 1}, got)
	e.clock.Advance(time.Second)
	n, got = tick()
	require.Zero(t, n)
	require.Positive(t, got.Queries, "the mark ended: scan")
	e.clock.Set(t0.Add(33*time.Minute - time.Second))
	_, got = tick()
	require.Equal(t, storecount.Counts{Reads: 1}, got)
	e.clock.Advance(time.Second)
	require.Equal(t, 1, e.prune(), "f2, on time")
	require.Equal(t, []string{"f1", "pool"}, e.factoryIDs())
	e.clock.Set(t0.Add(34 * time.Minute))
	require.Equal(t, 1, e.prune(), "f1, on time")
	require.Equal(t, []string{"pool"}, e.factoryIDs())

	// Only the elastic pool left: it never falls due.
	for range 3 {
		e.clock.Advance(5 * time.Minute)
		_, got := tick()
		require.Equal(t, storecount.Counts{Reads: 1}, got)
	}
}
