package coord_test

import (
	"encoding/json"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// TestTokenCacheBoundsRevocation: a revoked token is refused at once by the
// coordinator that revoked it, and by every other within TokenCacheTTL.
func TestTokenCacheBoundsRevocation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps})
	require.NoError(t, err)
	other := e.peer()
	_, err = other.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)

	require.NoError(t, e.c.RevokeToken(e.ctx, "f1"))
	_, err = e.c.AuthenticateFactory(e.ctx, secret)
	require.ErrorIs(t, err, catalog.ErrUnauthenticated, "the revoking process refuses it at once")

	ttl := e.c.Config().TokenCacheTTL
	e.clock.Advance(ttl / 2)
	_, err = other.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err, "another process may trust its cached copy within the TTL")
	e.clock.Advance(ttl / 2)
	_, err = other.AuthenticateFactory(e.ctx, secret)
	require.ErrorIs(t, err, catalog.ErrUnauthenticated, "and refuses it once the TTL has passed")
}

// TestSteadyHeartbeatReadsNothing: once a factory's token and document are
// known, a heartbeat costs one write and no read.
func TestSteadyHeartbeatReadsNothing(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	e := newEnv(t, countingStore(&counted))
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps})
	require.NoError(t, err)
	hb := catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}, Health: fleet.HealthOK}
	tok, err := e.c.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)
	_, err = e.c.Heartbeat(e.ctx, tok, hb)
	require.NoError(t, err)

	before := counted.Snapshot()
	for load := range 3 {
		tok, err := e.c.AuthenticateFactory(e.ctx, secret)
		require.NoError(t, err)
		hb.Load = load
		f, err := e.c.Heartbeat(e.ctx, tok, hb)
		require.NoError(t, err)
		require.Equal(t, load, f.Load)
	}
	d := counted.Snapshot().Sub(before)
	require.Zero(t, d.Reads+d.Queries, "steady heartbeats read nothing")
	require.EqualValues(t, 3, d.Writes)

	// Another writer's change is not lost: the cached revision fails its CAS
	// and the heartbeat re-reads.
	_, err = e.peer().Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo, "api"}, Health: fleet.HealthOK})
	require.NoError(t, err)
	hb.Load = 9
	f, err := e.c.Heartbeat(e.ctx, tok, hb)
	require.NoError(t, err)
	require.Equal(t, 9, f.Load)
	got, err := e.c.GetFactory(e.ctx, "f1")
	require.NoError(t, err)
	require.Equal(t, 9, got.Load)
	require.Equal(t, []string{repo}, got.Repos, "this heartbeat's report wins, written over the fresh revision")
}

// TestRedispatchUnblocksStrandedJobs: a dependant whose unblock was lost
// (its dependency shipped, but the pass after it never ran) is queued by the
// next sweep.
func TestRedispatchUnblocksStrandedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dep := e.submit("title: dep")
	waiter := e.submit("deps: ["+dep.ID+"]", "title: waiter")
	require.Equal(t, fleet.StageBlocked, waiter.Stage)

	// Ship the dependency behind the coordinator's back: nothing unblocks.
	it := e.rawJob(dep.ID)
	shipped := *e.job(dep.ID)
	shipped.Stage = fleet.StageShipped
	body, err := json.Marshal(&shipped)
	require.NoError(t, err)
	_, err = e.raw.Replace(e.ctx, store.Jobs, prod, dep.ID, body, it.Rev)
	require.NoError(t, err)
	require.Equal(t, fleet.StageBlocked, e.job(waiter.ID).Stage)

	_, err = e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	require.Equal(t, fleet.StageQueued, e.job(waiter.ID).Stage)
	n, err := e.c.UnblockReady(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "idempotent")
}
