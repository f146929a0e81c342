package layering

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWireSeams: the wire package (shared/api) links the domain and
// nothing of the server, so a client of the API links neither the use
// cases nor the adapters; the use cases link the views they build
// (shared/api/view, types only) but neither the API client nor net/http
// (DESIGN.md: the use cases do no HTTP).
func TestWireSeams(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pkg       string
		forbidden []string // package path prefixes
		exact     []string // packages whose subpackages are allowed
		noHTTP    bool     // net/http is forbidden too
		why       string
	}{
		{pkg: "./shared/api/...", why: "the contract and its client link none of the server",
			forbidden: []string{"/shared/coord", "/shared/httpapi", "/shared/store", "/shared/blob", "/shared/bus", "/shared/schedule", "/shared/app"}},
		{pkg: "./shared/api/view", why: "the views are types on the domain, which the use cases link",
			forbidden: []string{"/shared/coord", "/shared/httpapi", "/shared/store", "/shared/schedule"}, noHTTP: true},
		{pkg: "./shared/coord/...", why: "the use cases do no HTTP, so they do not link the API client",
			forbidden: []string{"/shared/httpapi"}, exact: []string{"/shared/api"}, noHTTP: true},
	} {
		t.Run(strings.TrimPrefix(tt.pkg, "./"), func(t *testing.T) {
			t.Parallel()
			for _, dep := range goListDeps(t, tt.pkg) {
				for _, f := range tt.forbidden {
					require.False(t, dep == module+f || strings.HasPrefix(dep, module+f+"/"), "%s links %s: %s", tt.pkg, dep, tt.why)
				}
				for _, f := range tt.exact {
					require.NotEqual(t, module+f, dep, "%s links %s: %s", tt.pkg, dep, tt.why)
				}
				if tt.noHTTP {
					require.NotEqual(t, "net/http", dep, "%s links net/http: %s", tt.pkg, tt.why)
				}
			}
		})
	}
}
