package coord_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/pulls"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge"
	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// TestWebhookProductsCached: a forge webhook finds the product of its
// repository in the list of products the catalog caches for
// FactoryCacheTTL, so deliveries cost one products query per TTL however
// many arrive; a product declared through this coordinator is used by the
// next delivery at once, one declared through another within the TTL.
func TestWebhookProductsCached(t *testing.T) {
	t.Parallel()
	ttl := coord.DefaultFactoryCacheTTL
	// declareNew declares product p2, whose forge maps repo new to acme/new.
	declareNew := func(t *testing.T, e *env, c *coord.Coordinator) {
		_, err := c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p2", Repos: []string{"new"},
			Forge: &catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{"new": "acme/new"}}}})
		require.NoError(t, err)
	}
	here := func(t *testing.T, e *env, _ *coord.Coordinator) { declareNew(t, e, e.c) }
	elsewhere := func(t *testing.T, e *env, peer *coord.Coordinator) { declareNew(t, e, peer) }

	type step struct {
		write   func(t *testing.T, e *env, peer *coord.Coordinator) // before the delivery
		advance time.Duration                                       // the clock, before the delivery
		repo    string                                              // the delivery's, on GitHub
		mapped  bool                                                // a product's forge maps it
		queries int64                                               // what the delivery costs
	}
	burst := []step{{repo: "acme/notes", mapped: true, queries: 1}}
	for range 9 {
		burst = append(burst, step{repo: "acme/notes", mapped: true})
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a burst within the TTL is one query", append(burst,
			step{advance: ttl - time.Nanosecond, repo: "acme/other"},
			step{advance: time.Nanosecond, repo: "acme/other", queries: 1})},
		{"a product declared here is used at once", []step{
			{repo: "acme/new", queries: 1},
			{repo: "acme/new"},
			{write: here, repo: "acme/new", mapped: true, queries: 1},
			{repo: "acme/new", mapped: true},
		}},
		{"a product declared elsewhere is used after the TTL", []step{
			{repo: "acme/new", queries: 1},
			{write: elsewhere, repo: "acme/new"},
			{advance: ttl / 2, repo: "acme/new"},
			{advance: ttl / 2, repo: "acme/new", mapped: true, queries: 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var counted *storecount.Store
			e := newEnv(t, countingStore(&counted))
			_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo},
				Forge: &catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}}}})
			require.NoError(t, err)
			peer := e.peer()
			for i, s := range tc.steps {
				if s.write != nil {
					s.write(t, e, peer)
				}
				e.clock.Advance(s.advance)
				owner, name, _ := strings.Cut(s.repo, "/")
				before := counted.Snapshot()
				// A branch that is no job's: past the product lookup, the
				// delivery reads nothing.
				out, why, err := e.c.ForgeWebhook(e.ctx, forge.Event{Kind: forge.EventChangesRequested,
					Repo: forge.Repo{Owner: owner, Name: name}, HeadRef: "main"}, pulls.Delivery{ID: fmt.Sprint(i)})
				require.NoError(t, err)
				require.Equal(t, pulls.Ignored, out)
				if s.mapped {
					require.Contains(t, why, "is no job's", "delivery %d: %s is mapped", i, s.repo)
				} else {
					require.Contains(t, why, "no product's forge maps", "delivery %d: %s is not mapped", i, s.repo)
				}
				require.Equal(t, storecount.Counts{Queries: s.queries}, counted.Snapshot().Sub(before),
					"delivery %d: the products queries it costs", i)
			}
		})
	}
}

// TestWebhookProductsReadInFlight: while the product list is being read, a
// delivery waits for that read instead of querying too (one giving up
// meanwhile queries nothing), and a product declared here meanwhile is
// not hidden by the read that began before it: the next delivery uses it.
func TestWebhookProductsReadInFlight(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	gate := newContainerGate(store.Products)
	e := newEnv(t, withStore(func(s store.Store) store.Store {
		counted = storecount.New(s)
		gate.Store = counted
		return gate
	}))
	deliver := func(ctx context.Context, ghRepo string) (string, error) {
		owner, name, _ := strings.Cut(ghRepo, "/")
		_, why, err := e.c.ForgeWebhook(ctx, forge.Event{Kind: forge.EventChangesRequested,
			Repo: forge.Repo{Owner: owner, Name: name}, HeadRef: "main"}, pulls.Delivery{})
		return why, err
	}
	before := counted.Snapshot()
	gate.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := deliver(e.ctx, "acme/new")
		first <- err
	}()
	<-gate.started

	gone, cancel := context.WithCancel(e.ctx)
	cancel()
	_, err := deliver(gone, "acme/new")
	require.ErrorIs(t, err, context.Canceled, "a delivery waiting for the read in flight gives up with its context")
	require.Equal(t, storecount.Counts{Queries: 1}, counted.Snapshot().Sub(before), "only the read in flight queried")

	_, err = e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p2", Repos: []string{"new"},
		Forge: &catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{"new": "acme/new"}}}})
	require.NoError(t, err)
	close(gate.release)
	require.NoError(t, <-first)

	why, err := deliver(e.ctx, "acme/new")
	require.NoError(t, err)
	require.Contains(t, why, "is no job's", "the product declared here is used, not the list read before it")
}

// TestProductCacheReadInFlight: a product declared here while submit was
// reading it is not hidden by that read: the next submit sees the repo the
// declaration added.
func TestProductCacheReadInFlight(t *testing.T) {
	t.Parallel()
	gate := newContainerGate(store.Products)
	e := newEnv(t, gate.onStore())
	gate.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		_, _, err := e.c.Submit(e.ctx, prod, manifest("repo: added"))
		first <- err
	}()
	<-gate.started
	_, err := e.c.PutProduct(e.ctx, prod, "Product one", []string{repo, "api", "added"})
	require.NoError(t, err)
	close(gate.release)
	var refused *fleet.Error
	require.ErrorAs(t, <-first, &refused, "the submit that read the product before the declaration")
	require.Equal(t, fleet.CodeRepoNotOwned, refused.Code)

	_, created, err := e.c.Submit(e.ctx, prod, manifest("repo: added"))
	require.NoError(t, err, "the declaration is seen by the next submit")
	require.True(t, created)
}

// containerGate holds the answer of the first read or query of one
// container after it is armed, until release is closed, saying when it has
// it; it counts that container's queries.
type containerGate struct {
	store.Store
	container        string
	armed            atomic.Bool
	started, release chan struct{}
	queries          atomic.Int64
}

func newContainerGate(container string) *containerGate {
	return &containerGate{container: container, started: make(chan struct{}), release: make(chan struct{})}
}

// onStore runs the coordinator on the store through g.
func (g *containerGate) onStore() envOpt {
	return withStore(func(s store.Store) store.Store {
		g.Store = s
		return g
	})
}

func (g *containerGate) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	page, err := g.Store.Query(ctx, container, q)
	if container == g.container {
		g.queries.Add(1)
	}
	g.hold(container)
	return page, err
}

func (g *containerGate) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	it, err := g.Store.Read(ctx, container, pk, id)
	g.hold(container)
	return it, err
}

func (g *containerGate) hold(container string) {
	if container == g.container && g.armed.CompareAndSwap(true, false) {
		close(g.started)
		<-g.release
	}
}
