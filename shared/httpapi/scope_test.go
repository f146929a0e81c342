package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
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

	var ex coord.Explanation
	f.ok(200, &ex, "GET", "/api/fleet/jobs/"+w.queued+"/explain", p1Token, nil)
	var seen []string
	for _, c := range ex.Schedule.Candidates {
		seen = append(seen, c.FactoryID)
	}
	require.ElementsMatch(t, []string{"f1", "f2"}, seen, "explain for p1 lists factories of other products")
	require.NotContains(t, ex.Schedule.Reason, "not scoped")
	f.ok(200, &ex, "GET", "/api/fleet/jobs/"+w.queued+"/explain", rootToken, nil)
	require.Len(t, ex.Schedule.Candidates, 4, "an unscoped operator sees every factory")

	var repos items[coord.RepoInfo]
	f.ok(200, &repos, "GET", "/api/fleet/repos", p1Token, nil)
	require.Equal(t, []coord.RepoInfo{{Repo: "r1", Products: []string{"p1"}, Factories: []string{"f1", "f2"}}}, repos.Items)
	f.ok(200, &repos, "GET", "/api/fleet/repos", multiToken, nil)
	require.Equal(t, []coord.RepoInfo{
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
