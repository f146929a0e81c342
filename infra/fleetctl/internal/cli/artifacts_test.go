package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArtifactsGetChecksTheBytes: bytes that do not match the metadata's
// size and sha256 (a corrupt blob, a proxy that truncated them) fail the
// command and write nothing, to a file or to stdout.
func TestArtifactsGetChecksTheBytes(t *testing.T) {
	t.Parallel()
	good := []byte("the real bytes\n")
	sum := sha256.Sum256(good)
	for _, tt := range []struct {
		name   string
		served string
		ok     bool
	}{
		{"intact", string(good), true},
		{"corrupt", "the fake bytes\n", false},
		{"truncated", "the real", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/api/fleet/artifacts/j1.a1":
					fmt.Fprintf(w, `{"id": "j1.a1", "jobId": "j1", "name": "log", "kind": "log", "size": %d, "sha256": %q}`, len(good), hex.EncodeToString(sum[:]))
				case "/api/fleet/artifacts/j1.a1/content":
					_, _ = w.Write([]byte(tt.served))
				case "/api/fleet/products/demo": // fleetctl checks the product exists
					fmt.Fprint(w, `{"id": "demo"}`)
				default:
					http.NotFound(w, r)
				}
			}))
			t.Cleanup(srv.Close)
			file := filepath.Join(t.TempDir(), "out")
			for _, args := range [][]string{{"artifacts", "get", "j1.a1"}, {"artifacts", "get", "j1.a1", "-o", file}} {
				var out, errb bytes.Buffer
				env := map[string]string{"FLEET_URL": srv.URL, "FLEET_TOKEN": opToken, "FLEET_PRODUCT": "demo"}
				code := Run(context.Background(), args, Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
				_, statErr := os.Stat(file)
				if tt.ok {
					require.Equal(t, ExitOK, code, "%v: %s", args, errb.String())
					if len(args) == 3 {
						require.Equal(t, string(good), out.String())
					} else {
						require.NoError(t, statErr)
					}
					continue
				}
				require.Equal(t, ExitError, code, "%v", args)
				require.Contains(t, errb.String(), "nothing written")
				require.Empty(t, out.String(), "nothing on stdout")
				require.True(t, os.IsNotExist(statErr), "no file")
				entries, err := os.ReadDir(filepath.Dir(file))
				require.NoError(t, err)
				for _, e := range entries {
					require.False(t, strings.HasPrefix(e.Name(), ".fleetctl-artifact-"), "no temporary file left")
				}
			}
		})
	}
}
