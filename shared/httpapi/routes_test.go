package httpapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoutesThatNeedAProduct: a route the table says needsProduct refuses
// a token of every product that names none, 400 naming x-product-id, and
// its description says so; no other route's description does.
func TestRoutesThatNeedAProduct(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	for _, rt := range routes {
		key := rt.method + " " + rt.pattern
		if !rt.needsProduct {
			require.NotContains(t, rt.description, "Needs a product", key)
			continue
		}
		require.Contains(t, rt.description, "Needs a product", key)
		path := strings.NewReplacer("{name}", "backend").Replace(rt.pattern)
		require.NotContains(t, path, "{", "%s: fill in its path parameters here", key)
		res := f.call(rt.method, path, rootToken, nil)
		require.Equal(t, 400, res.status, "%s: %s", key, res)
		require.Equal(t, productField, res.errorOf(t).Field, key)
	}
}
