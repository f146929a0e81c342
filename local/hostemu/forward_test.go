package hostemu

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
)

// TestHTTPFrontMarksForwardedRequests: forwarding appends the host's
// product token to the client's User-Agent and adds the host version and
// an invocation id (DefaultHttpWorkerService.AddHeaders); proxying adds the
// two headers and leaves the User-Agent as the client sent it
// (AddProxyingHeaders). The handler tells a buffered path by that token.
func TestHTTPFrontMarksForwardedRequests(t *testing.T) {
	t.Parallel()
	guid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, tc := range []struct {
		name, ua string
		mode     HTTPMode
		want     string
	}{
		{"forward", "fleetctl/1.0", ModeForward, "fleetctl/1.0 Azure-Functions-Host/" + emulatedHostVersion},
		{"forward without a User-Agent", "", ModeForward, "Azure-Functions-Host/" + emulatedHostVersion},
		{"proxy", "fleetctl/1.0", ModeProxy, "fleetctl/1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan http.Header, 1)
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Header.Clone()
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(fake.Close)
			front := newHTTPFront("api", []*httpRoute{routeIn(t, `{"route":"{*path}"}`, tc.mode)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
			emu := httptest.NewServer(front)
			t.Cleanup(emu.Close)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, emu.URL+"/api/fleet/events/stream", nil)
			require.NoError(t, err)
			req.Header.Set("User-Agent", tc.ua) // "" sends none
			req.Header.Set(headerInvocationID, "client-chosen")
			resp, err := emu.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode)
			h := <-seen
			require.Equal(t, tc.want, h.Get("User-Agent"))
			require.Equal(t, emulatedHostVersion, h.Get(headerHostVersion))
			require.Regexp(t, guid, h.Get(headerInvocationID), "the host's invocation id replaces the client's")
		})
	}
}

// TestHTTPModeSetting: FLEET_HOST_HTTP_MODE=forward makes the emulator
// forward although host.json enables proxying (a host without proxying);
// auto follows host.json; anything else fails at start, naming it.
func TestHTTPModeSetting(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "host.json"), []byte(`{"version":"2.0",
		"customHandler":{"description":{"defaultExecutablePath":"handler"},"enableForwardingHttpRequest":true,"enableProxyingHttpRequest":true}}`), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "functions", "api"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "functions", "api", "function.json"), []byte(`{"bindings":[
		{"type":"httpTrigger","direction":"in","name":"req","route":"{*path}"},{"type":"http","direction":"out","name":"res"}]}`), 0o644))
	for setting, want := range map[string]HTTPMode{"": ModeProxy, "auto": ModeProxy, "forward": ModeForward, "Proxy": ModeProxy, "envelope": ModeEnvelope} {
		e, err := New(Options{Root: root, Settings: func(name string) string {
			if name == config.HostHTTPMode { // the name the configuration documents
				return setting
			}
			return ""
		}})
		require.NoError(t, err, setting)
		require.Len(t, e.front.routes, 1)
		require.Equal(t, want, e.front.routes[0].mode, "%s=%q", config.HostHTTPMode, setting)
	}
	_, err := New(Options{Root: root, Settings: func(string) string { return "buffered" }})
	require.ErrorContains(t, err, config.HostHTTPMode)
}
