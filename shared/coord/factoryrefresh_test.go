package coord_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// listDueForRefresh returns an env whose factory list (f1 alone) is three
// quarters of its TTL old, with its factory query gated, and a queued job.
func listDueForRefresh(t *testing.T) (*env, *containerGate, *fleet.Job) {
	gate := newContainerGate(store.Factories)
	e := newEnv(t, gate.onStore())
	e.factory("f1")
	j := e.submit()
	e.candidate(j.ID, "f1") // the list, read
	e.clock.Advance(coord.DefaultFactoryCacheTTL * 8 / 10)
	gate.armed.Store(true)
	return e, gate, j
}

// TestFactoryListRefreshedAhead (issue 25): a factory list past three
// quarters of its TTL is refreshed in the background while callers are served the cached
// one at once (one dispatch in a hundred used to wait 2 to 5 ms for the
// refresh); and a refresh that read the store before a factory enrolled
// here does not put its list, without that factory, back.
func TestFactoryListRefreshedAhead(t *testing.T) {
	t.Parallel()
	e, gate, j := listDueForRefresh(t)
	served := make(chan error, 1)
	go func() {
		_, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, j.ID)
		served <- err
	}()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		close(gate.release)
		t.Fatal("a caller waited for the refresh of a list still within its TTL")
	}
	select {
	case <-gate.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no refresh began for a list past three quarters of its TTL")
	}

	// f2 enrols while the refresh holds a list read before it.
	e.factory("f2")
	close(gate.release)
	require.Equal(t, "f2", e.candidate(j.ID, "f2").FactoryID, "the refresh read before f2 enrolled was kept")
}

// TestFactoryListRefreshSurvivesHeartbeats: a heartbeat while the dropped
// list is being read again does not throw that read away: a fleet
// heartbeating faster than one read takes would have kept the caller
// reading for ever.
func TestFactoryListRefreshSurvivesHeartbeats(t *testing.T) {
	t.Parallel()
	gate := newContainerGate(store.Factories)
	e := newEnv(t, gate.onStore())
	tok := e.factory("f1")
	j := e.submit()
	e.factory("f2") // enrolling drops the list
	gate.armed.Store(true)
	before := gate.queries.Load()
	read := make(chan error, 1)
	go func() {
		_, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, j.ID)
		read <- err
	}()
	select {
	case <-gate.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the dropped list was not read again")
	}
	e.beat(tok)
	close(gate.release)
	require.NoError(t, <-read)
	require.Equal(t, int64(1), gate.queries.Load()-before, "factory queries for one caller and a heartbeat")
	require.Equal(t, "f2", e.candidate(j.ID, "f2").FactoryID)
}

// panickyFactories panics on a query of the factories once armed.
type panickyFactories struct {
	store.Store
	armed atomic.Bool
}

func (p *panickyFactories) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	if container == store.Factories && p.armed.Load() {
		panic("a bug reading the factories")
	}
	return p.Store.Query(ctx, container, q)
}

// TestFactoryListRefreshPanics: a panic while the list is read is that
// read's error, in the background (where it would end the process) as in
// a caller's read; the cached list is still served while it is fresh.
func TestFactoryListRefreshPanics(t *testing.T) {
	t.Parallel()
	panicky := &panickyFactories{}
	e := newEnv(t, withStore(func(s store.Store) store.Store {
		panicky.Store = s
		return panicky
	}))
	e.factory("f1")
	j := e.submit()
	e.candidate(j.ID, "f1")
	panicky.armed.Store(true)

	e.clock.Advance(coord.DefaultFactoryCacheTTL * 8 / 10)
	e.candidate(j.ID, "f1") // served; the refresh ahead panics in the background
	e.clock.Advance(coord.DefaultFactoryCacheTTL)
	_, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, j.ID)
	require.ErrorContains(t, err, "panic: a bug reading the factories")
}

// TestFactoryListRefreshKeepsADrainMadeMeanwhile: a refresh that read the
// factories before a drain made here does not put the undrained factory
// back. A drain set here takes effect at once (Draining and the scheduler
// read the list): with the refresh's copy, the drained factory was routable,
// and its accept allowed, for up to the list's TTL.
func TestFactoryListRefreshKeepsADrainMadeMeanwhile(t *testing.T) {
	t.Parallel()
	e, gate, j := listDueForRefresh(t)
	e.candidate(j.ID, "f1") // served; the refresh ahead reads f1 undrained and waits
	select {
	case <-gate.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no refresh began for a list past three quarters of its TTL")
	}
	_, err := e.c.SetDraining(e.ctx, "f1", true)
	require.NoError(t, err)
	close(gate.release)

	// Past the TTL of the list before the refresh: a caller takes the
	// refresh's list, waiting for it if it is still under way.
	e.clock.Advance(coord.DefaultFactoryCacheTTL * 3 / 10)
	ex, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, "no eligible factory: 1 is draining", ex.Schedule.Reason, "the refresh put f1 back undrained")
}
