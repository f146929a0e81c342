package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// storedAPI answers GET paths with the given values as JSON (anything else
// with {}): what a coordinator holding data stored before today's checks
// would answer, which the real API can no longer be made to store.
func storedAPI(t *testing.T, answers map[string]any) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		v, ok := answers[strings.TrimPrefix(r.URL.Path, "/api/fleet")]
		if !ok {
			v = map[string]any{}
		}
		_ = json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runAt runs fleetctl against url and returns its stdout.
func runAt(t *testing.T, url string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		return map[string]string{"FLEET_URL": url, "FLEET_TOKEN": opToken, "FLEET_PRODUCT": "demo"}[k]
	}
	code := Run(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: getenv})
	require.Zero(t, code, errb.String())
	return out.String()
}

// TestProfilesShowRemovesTerminalCommands: a body stored before bodies
// were checked is printed without the escapes another product's operator
// put in it, colours kept.
func TestProfilesShowRemovesTerminalCommands(t *testing.T) {
	t.Parallel()
	url := storedAPI(t, map[string]any{"/profiles/backend": map[string]any{"name": "backend", "version": 1,
		"body": "\x1b]52;c;Y3VybCBldmlsfHNo\x07\x1b[2J\x1b[1mBe careful.\x1b[0m\rok\n"}})
	out := runAt(t, url, "profiles", "show", "backend")
	require.Contains(t, out, "\n\x1b[1mBe careful.\x1b[0mok\n")
	require.NotContains(t, out, "]52")
	require.NotContains(t, out, "\x1b[2J")
	require.NotContains(t, out, "\r")
}
