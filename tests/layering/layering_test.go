// Package layering checks what each shipped binary links: the worker and
// the Functions handler carry only what they run, so a dependency that
// creeps in through an import is caught here rather than in a binary's size
// or start-up time.
package layering

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/gigafactory/fleet"

func TestBinariesLinkOnlyWhatTheyRun(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		binary    string
		forbidden []string // package path prefixes
		why       string
	}{
		{
			binary:    "./functions",
			forbidden: []string{"github.com/nats-io/nats-server"},
			why:       "only the local stack embeds the NATS server",
		},
		{
			binary:    "./infra/lambda",
			forbidden: []string{"github.com/nats-io/nats-server"},
			why:       "only the local stack embeds the NATS server",
		},
		{
			binary: "./infra/factory",
			forbidden: []string{
				"github.com/nats-io/nats-server",
				module + "/shared/schedule",
				module + "/shared/coord",
				module + "/shared/store",
			},
			why: "the worker speaks the wire protocol; the scheduler, use cases and stores are the coordinator's",
		},
		{
			binary: "./infra/fleetctl",
			forbidden: []string{
				"github.com/nats-io",
				module + "/shared/schedule",
				module + "/shared/coord",
				module + "/shared/store",
				module + "/shared/httpapi",
			},
			why: "fleetctl is a client of the HTTP API like any other; it links none of the coordinator",
		},
	} {
		t.Run(strings.TrimPrefix(tt.binary, "./"), func(t *testing.T) {
			t.Parallel()
			deps := goListDeps(t, tt.binary)
			for _, dep := range deps {
				for _, f := range tt.forbidden {
					require.False(t, dep == f || strings.HasPrefix(dep, f+"/"),
						"%s links %s: %s", tt.binary, dep, tt.why)
				}
			}
		})
	}
}

// goListDeps lists the packages a main package links, from the module root.
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", pkg)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %s", pkg)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, module+strings.TrimSuffix(strings.TrimPrefix(pkg, "."), "/..."), "go list ran on the module")
	return deps
}

// TestAdaptersImplementThePorts: the store and blob backends, their
// conformance suites and wrappers import the port packages (shared/store,
// shared/blob), never the use cases, so an adapter cannot reach into the
// coordinator and a change to a use case rebuilds no adapter.
func TestAdaptersImplementThePorts(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"./shared/store/...", "./shared/blob/..."} {
		t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
			t.Parallel()
			for _, dep := range goListDeps(t, pkg) {
				for _, f := range []string{module + "/shared/coord", module + "/shared/httpapi", module + "/shared/app"} {
					require.False(t, dep == f || strings.HasPrefix(dep, f+"/"),
						"%s links %s: adapters implement the ports and depend on nothing above them", pkg, dep)
				}
			}
		})
	}
}
