package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/explain"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestReadsStayInScope: a product-scoped operator reads nothing of another
// product: /explain scores only the factories it can see (and its reasons
// count only them), /repos names only those factories, and /metrics leaves
// out the fleet-wide sections (this process's counters over every product,
// the store's and the transport's figures). An unscoped operator still sees
// the whole fleet.
func TestReadsStayInScope(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	// fo serves only "other" but has p1's repo r1 checked out too.
	f.ok(200, nil, "POST", "/api/fleet/factories/heartbeat", w.foreign, map[string]any{
		"capabilities": []string{"os:linux", "engine:claude", "has:git"}, "repos": []string{"r1", "r2"},
	})

	var ex explain.Explanation
	f.ok(200, &ex, "GET", "/api/fleet/jobs/"+w.queued+"/explain", p1Token, nil)
	var seen []string
	for _, c := range ex.Schedule.Candidates {
		seen = append(seen, c.FactoryID)
	}
	require.ElementsMatch(t, []string{"f1", "f2"}, seen, "explain for p1 lists factories of other products")
	require.NotContains(t, ex.Schedule.Reason, "not scoped")
	f.ok(200, &ex, "GET", "/api/fleet/jobs/"+w.queued+"/explain", rootToken, nil)
	require.Len(t, ex.Schedule.Candidates, 4, "an unscoped operator sees every factory")

	var repos api.List[catalog.RepoInfo]
	f.ok(200, &repos, "GET", "/api/fleet/repos", p1Token, nil)
	require.Equal(t, []catalog.RepoInfo{{Repo: "r1", Products: []string{"p1"}, Factories: []string{"f1", "f2"}}}, repos.Items)
	f.ok(200, &repos, "GET", "/api/fleet/repos", multiToken, nil)
	require.Equal(t, []catalog.RepoInfo{
		{Repo: "r1", Products: []string{"p1"}, Factories: []string{"f1", "f2", "fo"}},
		{Repo: "r2", Products: []string{"other"}, Factories: []string{"fo", "fo2"}},
	}, repos.Items)

	for _, tok := range []string{p1Token, rootToken} {
		var m map[string]json.RawMessage
		f.ok(200, &m, "GET", "/api/fleet/metrics", tok, nil, product("p1"))
		_, coordinator := m["coordinator"]
		require.Equal(t, tok == rootToken, coordinator, "coordinator counters cover every product")
		_, adapters := m["adapters"]
		require.False(t, adapters && tok == p1Token, "adapter figures cover every product")
	}
}

// TestRepoTakeover: a product-scoped operator cannot take a repo another
// product owns (409 naming the owner), nor ask to move one (403); an
// unscoped operator moves it explicitly, and the old owner can no longer
// submit jobs for it.
func TestRepoTakeover(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("other", "r2")
	before := f.snapshot()

	res := f.call("PUT", "/api/fleet/products/other", otherToken, map[string]any{"repos": []string{"r2", "r1"}})
	require.Equal(t, http.StatusConflict, res.status, "%s", res)
	e := res.errorOf(t)
	require.Equal(t, fleet.CodeConflict, e.Code)
	require.Equal(t, "repos[1]", e.Field)
	require.Contains(t, e.Message, "p1")
	res = f.call("PUT", "/api/fleet/products/other", otherToken, map[string]any{"repos": []string{"r2", "r1"}, "moveRepos": true})
	require.Equal(t, http.StatusForbidden, res.status, "%s", res)
	res = f.call("PUT", "/api/fleet/products/other", rootToken, map[string]any{"repos": []string{"r2", "r1"}})
	require.Equal(t, http.StatusConflict, res.status, "an unscoped operator moves a repo only when asked to: %s", res)
	require.Equal(t, before, f.snapshot(), "refused claims changed stored state")
	res = f.call("POST", "/api/fleet/jobs", otherToken, manifest("r1"), contentType("text/markdown"))
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res)

	var p fleet.Product
	f.ok(200, &p, "PUT", "/api/fleet/products/other", rootToken, map[string]any{"repos": []string{"r2", "r1"}, "moveRepos": true})
	require.Equal(t, []string{"r2", "r1"}, p.Repos)
	f.ok(200, &p, "GET", "/api/fleet/products/p1", rootToken, nil)
	require.Empty(t, p.Repos)
	res = f.call("POST", "/api/fleet/jobs", p1Token, manifest("r1"), contentType("text/markdown"))
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res)
	f.ok(201, nil, "POST", "/api/fleet/jobs", otherToken, manifest("r1"), contentType("text/markdown"))
}
