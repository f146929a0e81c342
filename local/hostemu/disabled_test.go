package hostemu

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/syncbuf"
)

func TestSettingsDisabled(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		settings map[string]string
		off      bool
		err      string
	}{
		"unset":                {nil, false, ""},
		"true":                 {map[string]string{"AzureWebJobs.echo.Disabled": "true"}, true, ""},
		"True, as in Azure":    {map[string]string{"AzureWebJobs.echo.Disabled": "True"}, true, ""},
		"1":                    {map[string]string{"AzureWebJobs.echo.Disabled": "1"}, true, ""},
		"false":                {map[string]string{"AzureWebJobs.echo.Disabled": "false"}, false, ""},
		"the environment form": {map[string]string{"AzureWebJobs_echo_Disabled": "true"}, true, ""},
		"either one disables":  {map[string]string{"AzureWebJobs.echo.Disabled": "false", "AzureWebJobs_echo_Disabled": "1"}, true, ""},
		"another function's":   {map[string]string{"AzureWebJobs.dispatch.Disabled": "true"}, false, ""},
		"not a boolean":        {map[string]string{"AzureWebJobs_echo_Disabled": "yes"}, false, `app setting AzureWebJobs_echo_Disabled is "yes"`},
	} {
		get := Settings(func(n string) string { return tc.settings[n] })
		off, err := get.Disabled("echo")
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, name)
			continue
		}
		require.NoError(t, err, name)
		require.Equal(t, tc.off, off, name)
	}
	off, err := Settings(nil).Disabled("echo")
	require.NoError(t, err)
	require.False(t, off)
}

// TestDisabledFunctions: AzureWebJobs.<name>.Disabled stops a function's
// trigger as in Azure: a disabled timer does not fire on its schedule
// (though the admin API still runs it), a disabled feed has no reader (so
// it does not split the feed with another function on the same lease), and
// a disabled HTTP function is not served. A function whose setting is
// false runs.
func TestDisabledFunctions(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(path, body string) {
		p := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	write("host.json", `{"version": "2.0", "customHandler": {"description": {"defaultExecutablePath": "handler"}}}`)
	write("functions/web/function.json", `{"bindings": [{"type": "httpTrigger", "direction": "in", "name": "req", "authLevel": "anonymous", "route": "web"},
		{"type": "http", "direction": "out", "name": "res"}]}`)
	for _, name := range []string{"tick", "tock"} {
		write("functions/"+name+"/function.json", `{"bindings": [{"type": "timerTrigger", "direction": "in", "name": "timer", "schedule": "* * * * * *"}]}`)
	}
	for _, name := range []string{"feeda", "feedb"} {
		write("functions/"+name+"/function.json", `{"bindings": [{"type": "cosmosDBTrigger", "direction": "in", "name": "documents",
			"containerName": "jobs", "leaseContainerName": "leases", "feedPollDelay": 50}]}`)
	}
	settings := map[string]string{
		"AzureWebJobs.web.Disabled":   "true",
		"AzureWebJobs_tick_Disabled":  "1",
		"AzureWebJobs.feeda.Disabled": "true",
		"AzureWebJobs.tock.Disabled":  "false",
	}
	logs := &syncbuf.Buffer{}
	emu, err := New(Options{
		Root: root, Handler: os.Args[0], Env: []string{fakeHandlerEnv + "=1"}, Listen: "127.0.0.1:0",
		Settings: func(n string) string { return settings[n] },
		Store:    idleFeed{},
		Log:      slog.New(slog.NewJSONHandler(logs, nil)),
	})
	require.NoError(t, err, "a disabled feed reads nothing, so it shares its lease with no one")

	base, ctx := runEmulator(t, emu)

	st := emu.Status()
	require.Equal(t, []string{"feeda", "tick", "web"}, st.Disabled)
	require.Contains(t, st.Feeds, "feedb")
	require.NotContains(t, st.Feeds, "feeda")

	resp, err := http.Get(base + "/api/web")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(body))
	require.Contains(t, string(body), "no function serves")

	// The fake handler serves no function, so every timer run is logged
	// as failed, naming its function: tock runs every second, tick never.
	require.Eventually(t, func() bool { return failedRuns(logs, "tock") >= 2 }, 30*time.Second, 10*time.Millisecond)
	require.Zero(t, failedRuns(logs, "tick"), "a disabled timer fired on its schedule")
	found, err := emu.RunTimer(ctx, "tick")
	require.True(t, found, "the admin API still runs a disabled timer")
	require.Error(t, err, "it reached the handler, which has no such function")
	require.Equal(t, 1, failedRuns(logs, "tick"))
}

// failedRuns counts the "timer invocation failed" records of function fn
// in a JSON log.
func failedRuns(log *syncbuf.Buffer, fn string) int {
	return strings.Count(log.String(), `"msg":"timer invocation failed","function":"`+fn+`"`)
}
