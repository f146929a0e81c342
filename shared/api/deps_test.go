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
// (a client of the API links neither the use cases nor the adapters), and
// the use cases do not link the wire package's HTTP client.
func TestSeams(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pkg       string
		forbidden []string
		why       string
	}{
		{pkg: "./shared/api", why: "the contract and its client link none of the server",
			forbidden: []string{"/shared/coord", "/shared/httpapi", "/shared/store", "/shared/blob", "/shared/bus", "/shared/schedule", "/shared/app"}},
		{pkg: "./shared/coord", why: "the use cases do no HTTP (DESIGN.md), so they do not link the API client",
			forbidden: []string{"/shared/api", "/shared/httpapi"}},
	} {
		for _, dep := range goListDeps(t, tt.pkg) {
			for _, f := range tt.forbidden {
				require.False(t, dep == module+f || strings.HasPrefix(dep, module+f+"/"), "%s links %s: %s", tt.pkg, dep, tt.why)
			}
		}
	}
}
