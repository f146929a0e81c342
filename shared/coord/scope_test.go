package coord_test

import (
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/coord/live"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestViewShowsOnlyTheScope (issue 23 item 8): a factory shared by two
// products shows a reader scoped to one of them only that product and the
// repos it owns (capabilities stay); a factory serving none of the reader's
// products is left out; a factory serving every product keeps saying so; an
// unscoped reader sees every factory as it is.
func TestViewShowsOnlyTheScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.c.PutProduct(e.ctx, "p2", "", []string{"secret-repo"})
	require.NoError(t, err)
	e.factory("shared", products(prod, "p2"), repos(repo, "secret-repo", "unowned"))
	e.factory("theirs", products("p2"), repos("secret-repo"))
	e.factory("anyone", repos(repo, "secret-repo"))
	all, err := e.c.ListFactories(e.ctx, "")
	require.NoError(t, err)

	byID := func(fs []*fleet.Factory) map[string]*fleet.Factory {
		m := map[string]*fleet.Factory{}
		for _, f := range fs {
			m[f.ID] = f
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		scope catalog.Scope
		want  map[string][2][]string // id -> products, repos
	}{
		{"scoped to one product", catalog.Scope{prod}, map[string][2][]string{
			"shared": {{prod}, {repo}},
			"anyone": {{}, {repo}},
		}},
		{"scoped to the other", catalog.Scope{"p2"}, map[string][2][]string{
			"shared": {{"p2"}, {"secret-repo"}},
			"theirs": {{"p2"}, {"secret-repo"}},
			"anyone": {{}, {"secret-repo"}},
		}},
		{"scoped to a product without a declaration", catalog.Scope{"p9"}, map[string][2][]string{
			"anyone": {{}, {}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := e.c.View(e.ctx, tc.scope)
			require.NoError(t, err)
			got := byID(v.Factories(all))
			require.Len(t, got, len(tc.want))
			for id, w := range tc.want {
				f := got[id]
				require.NotNil(t, f, id)
				require.ElementsMatch(t, w[0], f.Products, "%s: products", id)
				require.ElementsMatch(t, w[1], f.Repos, "%s: repos", id)
				require.Equal(t, baseCaps, f.Capabilities, "%s: capabilities stay", id)
				if len(f.Products) > 0 {
					require.Equal(t, f.Products[0], f.ProductID)
				}
			}
			// The stored documents are untouched.
			require.Equal(t, []string{prod, "p2"}, byID(all)["shared"].Products)
			ch := v.Change(live.Change{Type: live.ChangeFactory, Factory: byID(all)["shared"]})
			if f := got["shared"]; f != nil {
				require.Equal(t, f, ch.Factory, "a stream's factory change shows the same view")
			}
		})
	}
	v, err := e.c.View(e.ctx, nil)
	require.NoError(t, err)
	require.Equal(t, all, v.Factories(all), "an unscoped reader sees every factory as it is")
}

// TestUnroutableJudgedOnTheProductsFactories: what p1 is told of a job it
// submitted (the submit warning, the reason stored on its dispatch, the
// reason /explain gives) is judged on the factories serving p1 alone: the
// same whether or not another product's factory holds the capability or
// has the repo checked out, never counting that factory, and "no factory
// serves product p1" when only other products' factories are enrolled
// (catalog.Scope: a product-scoped operator learns nothing of the others).
func TestUnroutableJudgedOnTheProductsFactories(t *testing.T) {
	t.Parallel()
	type told struct {
		warnings          []string
		stored, explained string
	}
	// tell submits a p1 job of lines to a fleet of the factories fleet
	// enrolls, routes it and says what p1 is told.
	tell := func(t *testing.T, fleet func(e *env), lines ...string) told {
		e, _ := dispatchEnv(t)
		_, err := e.c.PutProduct(e.ctx, "p2", "", []string{"secret-repo"})
		require.NoError(t, err)
		fleet(e)
		j := e.submit(lines...)
		_, err = e.c.Redispatch(e.ctx)
		require.NoError(t, err)
		ex, err := e.c.Explain(e.ctx, catalog.Scope{prod}, prod, j.ID)
		require.NoError(t, err)
		return told{e.c.SubmitWarnings(e.ctx, j), e.job(j.ID).Dispatch.Unroutable, ex.Schedule.Reason}
	}
	ours := func(e *env) { e.factory("ours") }
	drained := func(e *env) {
		ours(e)
		_, err := e.c.SetDraining(e.ctx, "ours", true)
		require.NoError(e.t, err)
	}
	// Theirs holds everything the jobs below ask for, and every seat free.
	theirs := func(e *env) {
		e.factory("theirs", products("p2"), caps(append([]string{"gpu:h100"}, baseCaps...)...), repos(repo, "secret-repo"))
	}
	both := func(f func(e *env)) func(e *env) { return func(e *env) { f(e); theirs(e) } }

	for _, tc := range []struct {
		name  string
		ours  func(e *env)
		lines []string
		want  told
	}{
		{"a capability only their factory holds", ours, []string{"capabilities: [engine:claude, gpu:h100]"}, told{
			[]string{"no factory has capability gpu:h100"},
			"unroutable: no factory has capability gpu:h100", "unroutable: no factory has capability gpu:h100"}},
		{"a repo only their factory has checked out", ours, []string{"repo: " + repo, "capabilities: [engine:claude, repo:secret-repo]"}, told{
			[]string{"no factory has capability repo:secret-repo"},
			"unroutable: no factory has capability repo:secret-repo", "unroutable: no factory has capability repo:secret-repo"}},
		{"ours draining, theirs idle", drained, nil, told{nil,
			"no eligible factory: 1 is draining", "no eligible factory: 1 is draining"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tell(t, tc.ours, tc.lines...), "p1's fleet alone")
			require.Equal(t, tc.want, tell(t, both(tc.ours), tc.lines...), "with their factory beside it")
		})
	}

	t.Run("only their factory", func(t *testing.T) {
		t.Parallel()
		const why = "no factory serves product " + prod
		require.Equal(t, told{[]string{why}, "unroutable: " + why, "unroutable: " + why}, tell(t, theirs))
	})
}
