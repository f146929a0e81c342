package coord_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// requireSecretNotStored scans every container: the token's secret is in
// no document, id or partition key.
func (e *env) requireSecretNotStored(secret string) {
	e.t.Helper()
	for _, c := range store.Containers {
		q := store.Query{Limit: 1000}
		for {
			page, err := e.raw.Query(e.ctx, c.Name, q)
			require.NoError(e.t, err)
			for _, it := range page.Items {
				for _, s := range []string{it.ID, it.PartitionKey, string(it.Body)} {
					require.NotContains(e.t, s, secret, "the token secret is stored in %s/%s", c.Name, it.ID)
					require.NotContains(e.t, s, strings.TrimPrefix(secret, catalog.FactoryTokenPrefix), "the token secret is stored in %s/%s", c.Name, it.ID)
				}
			}
			if page.Continuation == "" {
				break
			}
			q.Continuation = page.Continuation
		}
	}
}

// TestEnrollToken: the token is returned once, starts fft_, and only its
// hash is stored; it authenticates as its factory with its scope.
func TestEnrollToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Products: []string{prod}, Capabilities: baseCaps, SeatLimit: 2})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(secret, catalog.FactoryTokenPrefix), secret)
	require.Greater(t, len(secret), len(catalog.FactoryTokenPrefix)+32, "enough entropy")
	require.Equal(t, fleet.KindStatic, f.Kind)
	require.Equal(t, fleet.HealthOK, f.Health)
	require.Equal(t, prod, f.ProductID)
	require.NotEmpty(t, f.TokenID)
	require.NotContains(t, f.TokenID, secret)

	page, err := e.raw.Query(e.ctx, store.Tokens, store.Query{})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, f.TokenID, page.Items[0].ID, "tokens are stored under their hash")
	e.requireSecretNotStored(secret)

	tok, err := e.c.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)
	require.Equal(t, "f1", tok.FactoryID)
	require.Equal(t, []string{prod}, tok.Products)
	require.Equal(t, baseCaps, tok.Capabilities)
	require.False(t, tok.Revoked)

	for _, bad := range []string{"", "fft_", secret + "x", strings.TrimPrefix(secret, catalog.FactoryTokenPrefix), f.TokenID} {
		_, err := e.c.AuthenticateFactory(e.ctx, bad)
		require.ErrorIs(t, err, catalog.ErrUnauthenticated, "%q", bad)
		requireCode(t, err, fleet.CodeUnauthenticated, "")
	}

	_, _, err = e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1"})
	require.ErrorIs(t, err, fleet.ErrConflict, "enrolled twice")
}

func TestEnrollRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name  string
		req   catalog.EnrollRequest
		field string
	}{
		{"no id", catalog.EnrollRequest{}, "factoryId"},
		{"bad id", catalog.EnrollRequest{FactoryID: "../f"}, "factoryId"},
		{"bad kind", catalog.EnrollRequest{FactoryID: "f", Kind: "spot"}, "kind"},
		{"bad product", catalog.EnrollRequest{FactoryID: "f", Products: []string{"ok", "no/pe"}}, "products[1]"},
		{"bad capability", catalog.EnrollRequest{FactoryID: "f", Capabilities: []string{"os:linux", "gpu"}}, "capabilities[1]"},
		{"seats", catalog.EnrollRequest{FactoryID: "f", SeatLimit: -1}, "seatLimit"},
		{"cost", catalog.EnrollRequest{FactoryID: "f", CostPerHourUSD: -1}, "costPerHourUsd"},
	}
	for _, tc := range tests {
		_, _, err := e.c.Enroll(e.ctx, tc.req)
		requireCode(t, err, fleet.CodeInvalid, tc.field)
	}
	fs, err := e.c.ListFactories(e.ctx, "")
	require.NoError(t, err)
	require.Empty(t, fs)
	page, err := e.raw.Query(e.ctx, store.Tokens, store.Query{})
	require.NoError(t, err)
	require.Empty(t, page.Items)
}

// TestTokenRevokeRotate: a revoked token stops working; rotating issues a
// new one and kills the old one; the scope survives rotation.
func TestTokenRevokeRotate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	scope := []string{"os:linux", "engine:claude", "gpu:a100"}
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: scope})
	require.NoError(t, err)
	tok, err := e.c.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)
	// The factory reports less than its scope for a while (its GPU is busy).
	_, err = e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: scope[:2], Repos: []string{repo}})
	require.NoError(t, err)

	rotated, err := e.c.RotateToken(e.ctx, "f1")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rotated, catalog.FactoryTokenPrefix))
	require.NotEqual(t, secret, rotated)
	_, err = e.c.AuthenticateFactory(e.ctx, secret)
	require.ErrorIs(t, err, catalog.ErrUnauthenticated, "the old token dies with the rotation")
	tok2, err := e.c.AuthenticateFactory(e.ctx, rotated)
	require.NoError(t, err)
	require.Equal(t, "f1", tok2.FactoryID)
	require.Equal(t, scope, tok2.Capabilities, "rotation keeps the enrolled scope, not the last heartbeat")
	_, err = e.c.Heartbeat(e.ctx, tok2, catalog.Heartbeat{Capabilities: scope, Repos: []string{repo}})
	require.NoError(t, err, "the GPU is back: still inside the scope")
	e.requireSecretNotStored(secret)
	e.requireSecretNotStored(rotated)

	require.NoError(t, e.c.RevokeToken(e.ctx, "f1"))
	_, err = e.c.AuthenticateFactory(e.ctx, rotated)
	require.ErrorIs(t, err, catalog.ErrUnauthenticated)
	require.NoError(t, e.c.RevokeToken(e.ctx, "f1"), "revoking twice is fine")

	// A revoked factory stays enrolled and can be given a new token.
	again, err := e.c.RotateToken(e.ctx, "f1")
	require.NoError(t, err)
	tok3, err := e.c.AuthenticateFactory(e.ctx, again)
	require.NoError(t, err)
	require.Equal(t, scope, tok3.Capabilities)

	require.ErrorIs(t, e.c.RevokeToken(e.ctx, "nobody"), fleet.ErrNotFound)
	_, err = e.c.RotateToken(e.ctx, "nobody")
	require.ErrorIs(t, err, fleet.ErrNotFound)
}

// TestHeartbeat: the report is stored; capabilities outside the token's
// scope are forbidden naming the field; bad values are invalid.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.enrollOnly("f1")
	e.clock.Advance(time.Second)
	f, err := e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo, "api", repo}, Load: 1, Health: fleet.HealthDegraded, SeatLimit: 3})
	require.NoError(t, err)
	require.Equal(t, []string{repo, "api"}, f.Repos)
	require.Equal(t, 1, f.Load)
	require.Equal(t, 3, f.SeatLimit)
	require.Equal(t, fleet.HealthDegraded, f.Health)
	require.Equal(t, e.clock.Now(), f.LastHeartbeatAt)
	stored, err := e.c.GetFactory(e.ctx, "f1")
	require.NoError(t, err)
	require.Equal(t, f.Repos, stored.Repos)
	require.Equal(t, f.LastHeartbeatAt, stored.LastHeartbeatAt)

	tests := []struct {
		name  string
		hb    catalog.Heartbeat
		code  fleet.Code
		field string
	}{
		{"capability outside scope", catalog.Heartbeat{Capabilities: []string{"os:linux", "gpu:a100"}}, fleet.CodeForbidden, "capabilities[1]"},
		{"repo capability outside scope", catalog.Heartbeat{Capabilities: []string{"repo:secret"}}, fleet.CodeForbidden, "capabilities[0]"},
		{"bad capability", catalog.Heartbeat{Capabilities: []string{"nocolon"}}, fleet.CodeInvalid, "capabilities[0]"},
		{"bad repo", catalog.Heartbeat{Repos: []string{"ok", "../etc"}}, fleet.CodeInvalid, "repos[1]"},
		{"claims stale", catalog.Heartbeat{Health: fleet.HealthStale}, fleet.CodeInvalid, "health"},
		{"negative load", catalog.Heartbeat{Load: -1}, fleet.CodeInvalid, "load"},
		{"seat limit", catalog.Heartbeat{SeatLimit: 5000}, fleet.CodeInvalid, "seatLimit"},
	}
	for _, tc := range tests {
		before, err := e.raw.Read(e.ctx, store.Factories, "f1", "f1")
		require.NoError(t, err)
		_, err = e.c.Heartbeat(e.ctx, tok, tc.hb)
		requireCode(t, err, tc.code, tc.field)
		after, err := e.raw.Read(e.ctx, store.Factories, "f1", "f1")
		require.NoError(t, err)
		require.Equal(t, before, after, tc.name)
	}

	require.NoError(t, e.c.Deregister(e.ctx, "f1"))
	_, err = e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{})
	require.ErrorIs(t, err, fleet.ErrNotFound, "a deregistered factory cannot heartbeat itself back")
}

// TestSilentFactoryHealth: a static factory is stale StaleAfter and down
// DownAfter after its last heartbeat, on every read and with no timer run;
// a heartbeat makes it ok again; a silent elastic pool stays ok. Reading
// health writes nothing.
func TestSilentFactoryHealth(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	e := newEnv(t, countingStore(&counted))
	static := e.factory("static")
	e.factory("pool", kind(fleet.KindElastic))
	health := func() map[string]fleet.Health {
		fs, err := e.c.ListFactories(e.ctx, "")
		require.NoError(t, err)
		out := map[string]fleet.Health{}
		for _, f := range fs {
			out[f.ID] = f.Health
			one, err := e.c.GetFactory(e.ctx, f.ID)
			require.NoError(t, err)
			require.Equal(t, f.Health, one.Health, "GetFactory agrees with the list")
		}
		return out
	}
	e.clock.Advance(89 * time.Second)
	before := counted.Snapshot()
	require.Equal(t, map[string]fleet.Health{"static": fleet.HealthOK, "pool": fleet.HealthOK}, health())
	require.Zero(t, counted.Snapshot().Sub(before).Writes, "deriving health writes nothing")

	e.clock.Advance(time.Second) // 90s of silence
	require.Equal(t, map[string]fleet.Health{"static": fleet.HealthStale, "pool": fleet.HealthOK}, health())

	e.beat(static)
	require.Equal(t, fleet.HealthOK, health()["static"], "back to ok on a heartbeat")

	e.clock.Advance(10*time.Minute - time.Second)
	require.Equal(t, fleet.HealthStale, health()["static"])
	e.clock.Advance(time.Second)
	require.Equal(t, map[string]fleet.Health{"static": fleet.HealthDown, "pool": fleet.HealthOK}, health())

	// A down factory gets no job; the silent pool still does.
	e.submit()
	none, err := e.c.Claim(e.ctx, e.as("static"))
	require.NoError(t, err)
	require.Nil(t, none)
	e.clock.Advance(24 * time.Hour)
	require.Equal(t, fleet.HealthOK, health()["pool"])
	e.claim("pool")

	e.beat(static)
	require.Equal(t, fleet.HealthOK, health()["static"])

	m, err := e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Equal(t, 2, m.Factories.Total)
	require.Equal(t, map[string]int{"ok": 2}, m.Factories.ByHealth)
	require.Equal(t, 1, m.Jobs["assigned"])
}

// TestDeregister: the factory and its token are gone; jobs it held are
// left to the reaper.
func TestDeregister(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps})
	require.NoError(t, err)
	tok, err := e.c.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)
	e.toks.Store("f1", tok)
	_, err = e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}})
	require.NoError(t, err)
	j := e.submit()
	cl := e.claim("f1")

	require.NoError(t, e.c.Deregister(e.ctx, "f1"))
	_, err = e.c.GetFactory(e.ctx, "f1")
	require.ErrorIs(t, err, fleet.ErrNotFound)
	_, err = e.c.AuthenticateFactory(e.ctx, secret)
	require.ErrorIs(t, err, catalog.ErrUnauthenticated)
	fs, err := e.c.ListFactories(e.ctx, "")
	require.NoError(t, err)
	require.Empty(t, fs)
	require.ErrorIs(t, e.c.Deregister(e.ctx, "f1"), fleet.ErrNotFound)
	_, err = e.c.Claim(e.ctx, coord.ClaimRequest{Token: tok})
	require.ErrorIs(t, err, fleet.ErrNotFound)

	e.clock.Advance(e.c.Config().LeaseTTL)
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := e.job(j.ID)
	require.Equal(t, fleet.StageQueued, got.Stage)
	require.Equal(t, cl.LeaseEpoch+1, got.LeaseEpoch)

	// The id is free again.
	_, _, err = e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1"})
	require.NoError(t, err)
}

// TestFactoryScopes: a factory scoped to products sees only their jobs.
func TestFactoryScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.c.PutProduct(e.ctx, "p2", "", []string{"docs"})
	require.NoError(t, err)
	e.factory("only-p2", products("p2"), repos(repo, "docs"))
	e.submit()
	none, err := e.c.Claim(e.ctx, e.as("only-p2"))
	require.NoError(t, err)
	require.Nil(t, none, "a job of p1 is not for a factory of p2")
	j2, _, err := e.c.Submit(e.ctx, "p2", manifest("repo: docs"))
	require.NoError(t, err)
	cl := e.claim("only-p2")
	require.Equal(t, j2.ID, cl.Job.ID)

	fs, err := e.c.ListFactories(e.ctx, prod)
	require.NoError(t, err)
	require.Empty(t, fs)
	fs, err = e.c.ListFactories(e.ctx, "p2")
	require.NoError(t, err)
	require.Len(t, fs, 1)

	rs, err := e.c.Repos(e.ctx, nil, "")
	require.NoError(t, err)
	require.Equal(t, []catalog.RepoInfo{
		{Repo: "api", Products: []string{prod}, Factories: []string{}},
		{Repo: "docs", Products: []string{"p2"}, Factories: []string{"only-p2"}},
		{Repo: repo, Products: []string{prod}, Factories: []string{"only-p2"}},
	}, rs)
}

// tokenWriteFails fails every token write, and every delete of a factory
// (the store going away between an enrollment's writes).
type tokenWriteFails struct{ store.Store }

var errStoreGone = errors.New("the store went away")

func (s tokenWriteFails) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Tokens {
		return "", errStoreGone
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

func (s tokenWriteFails) Delete(ctx context.Context, container, pk, id, rev string) error {
	if container == store.Factories {
		return errStoreGone
	}
	return s.Store.Delete(ctx, container, pk, id, rev)
}

// TestEnrollWritesTheTokenFirst: an enrollment whose second write fails
// leaves no factory behind, whatever the store does next: the token goes
// first, and alone it authenticates nothing. A factory written first, whose
// token then failed, stayed when its undo failed too: it could never
// authenticate, and its id could not be enrolled again (409).
func TestEnrollWritesTheTokenFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStore(func(s store.Store) store.Store { return tokenWriteFails{s} }))
	_, _, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Products: []string{prod}, Capabilities: baseCaps})
	require.ErrorIs(t, err, errStoreGone)
	_, err = e.raw.Read(e.ctx, store.Factories, "f1", "f1")
	require.ErrorIs(t, err, store.ErrNotFound, "no factory without its token")
}
