package api_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/gigafactory/fleet"

// goListDeps lists the packages pkg links, from the module root.
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", pkg)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %s", pkg)
	return strings.Fields(string(out))
}

// TestSeams: the wire package links the domain and nothing of the server
// (a client of the API links neither the use cases nor the adapters); the
// use cases link the views they build (shared/api/view) but neither the
// API client nor net/http.
func TestSeams(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pkg       string
		forbidden []string // package path prefixes, below the module
		exact     []string // packages, below the module (their subpackages are allowed)
		noHTTP    bool     // net/http is forbidden too
		why       string
	}{
		{pkg: "./shared/api", why: "the contract and its client link none of the server",
			forbidden: []string{"/shared/coord", "/shared/httpapi", "/shared/store", "/shared/blob", "/shared/bus", "/shared/schedule", "/shared/app"}},
		{pkg: "./shared/api/view", why: "the views are types on the domain: the use cases link them and no HTTP",
			forbidden: []string{"/shared/coord", "/shared/httpapi", "/shared/store", "/shared/schedule"}, noHTTP: true},
		{pkg: "./shared/coord/...", why: "the use cases do no HTTP (DESIGN.md), so they do not link the API client",
			forbidden: []string{"/shared/httpapi"}, exact: []string{"/shared/api"}, noHTTP: true},
	} {
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
	}
}
