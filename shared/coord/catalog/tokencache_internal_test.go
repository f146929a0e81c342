package catalog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestTokenCacheRefusesReadsOlderThanARevocation: a lookup that read the
// token before a revocation cannot put its stale copy back in the cache.
func TestTokenCacheRefusesReadsOlderThanARevocation(t *testing.T) {
	t.Parallel()
	tc := &tokenCache{entries: map[string]tokenEntry{}}
	now := time.Unix(1000, 0)
	tok := &fleet.Token{ID: "h", FactoryID: "f1"}

	gen := tc.generation() // a lookup starts reading the store...
	tc.drop("h")           // ...a revocation lands meanwhile...
	tc.put("h", tok, now.Add(time.Minute), gen)
	_, ok := tc.get("h", now)
	require.False(t, ok, "the stale read was not cached")

	tc.put("h", tok, now.Add(time.Minute), tc.generation())
	got, ok := tc.get("h", now)
	require.True(t, ok)
	require.Same(t, tok, got)
	_, ok = tc.get("h", now.Add(time.Minute))
	require.False(t, ok, "entries expire")
}
