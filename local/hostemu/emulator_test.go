package hostemu

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

func TestTimerTriggerFires(t *testing.T) {
	t.Parallel()
	got := make(chan *funchost.TimerInfo, 4)
	handler := funchost.NewServer(nil, "", nil)
	handler.Handle("reaper", func(_ context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		info, err := funchost.Timer(inv.Data["tick"])
		if err != nil {
			return nil, err
		}
		got <- info
		return &funchost.Result{}, nil
	})
	fake := newTestServer(t, handler)

	fn := &Function{Name: "reaper", Bindings: []Binding{{Type: "timerTrigger", Direction: "in", Name: "tick",
		Props: map[string]json.RawMessage{"schedule": json.RawMessage(`"%EVERY_SECOND%"`)}}}}
	trig, _ := fn.Trigger()
	get := Settings(func(name string) string { return map[string]string{"EVERY_SECOND": "* * * * * *"}[name] })
	tt, err := newTimerTrigger(fn, trig, get, nil, readyChild(fake), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); tt.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// On the wall clock, through the real loop (timers_test.go drives the
	// schedule on a fake clock). Every second is faster than once a minute:
	// no schedule monitor, so no ScheduleStatus.
	for range 2 {
		select {
		case info := <-got:
			require.False(t, info.IsPastDue)
			require.True(t, info.Schedule.AdjustForDST)
			require.Nil(t, info.ScheduleStatus)
		case <-time.After(within):
			t.Fatalf("timer did not fire within %s", within)
		}
	}

	_, err = newTimerTrigger(fn, trig, Settings(func(string) string { return "*/5 * * * *" }), nil, readyChild(fake), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "function reaper")
	require.ErrorContains(t, err, "six NCRONTAB fields")
}

func newTestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// emuToken is the operator token the end-to-end test configures.
const emuToken = "fop_hostemu-e2e-operator-token-0123456789"

// TestEmulatorEndToEnd runs the real handler binary under the emulator on
// the repository's host.json and function.json files: the forwarded API,
// the change feed into the dispatch function, and a crash of the handler,
// which the emulator must survive by restarting it with no state lost.
func TestEmulatorEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the handler binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "handler")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/gigafactory/fleet/functions")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	dataDir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dataDir, "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	// The feed is woken by the store's change marker, as in `make run`,
	// rather than polled every feedPollDelay (a literal in function.json).
	emu, err := New(Options{
		Root: repoRoot, Handler: bin, Listen: "127.0.0.1:0", Settings: config.Default,
		Env: []string{
			config.DataDir + "=" + dataDir,
			config.OperatorToken + "=" + emuToken,
			config.LogLevel + "=error",
		},
		Store: st, Log: slog.New(slog.DiscardHandler),
		Changed: func(container string) <-chan struct{} {
			return WatchFiles(t.Context(), 2*time.Millisecond, st.ChangeMarker(container))
		},
	})
	require.NoError(t, err)

	base, ctx := runEmulator(t, emu)

	client := &http.Client{Timeout: 10 * time.Second}
	call := func(method, path, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+emuToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	status, body := call("GET", "/api/healthz", "")
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"status":"ok"}`, body)
	status, body = call("GET", "/elsewhere", "")
	require.Equal(t, http.StatusNotFound, status, "only /api is served: %s", body)
	// The host forwards a request for the bare route prefix at its own path,
	// /api, which is also where it would POST an envelope to a function named
	// api: the API answers it, as it answers any path it has no route for.
	for _, method := range []string{"GET", "POST"} {
		status, body = call(method, "/api", `{"a":1}`)
		require.Equal(t, http.StatusNotFound, status, "%s /api: %s", method, body)
		require.Contains(t, body, `"code":"not_found"`, "%s /api must reach the API: %s", method, body)
	}

	status, body = call("PUT", "/api/fleet/products/p1", `{"name":"Product one","repos":["notes"]}`)
	require.Equal(t, http.StatusOK, status, body)

	// A submitted job reaches the dispatch function through the change
	// feed: the emulator checkpoints past its revision.
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/api/fleet/jobs",
		strings.NewReader("---\nrepo: notes\ntitle: e2e\ncapabilities: [engine:claude]\n---\nDo it.\n"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+emuToken)
	req.Header.Set("Content-Type", "text/markdown")
	req.Header.Set("X-Product-Id", "p1")
	resp, err := client.Do(req)
	require.NoError(t, err)
	jobBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(jobBody))
	var job struct{ ID string }
	require.NoError(t, json.Unmarshal(jobBody, &job))
	leaseID := "hostemu.dispatch." + store.Jobs
	require.Eventually(t, func() bool {
		it, err := st.Read(ctx, store.Leases, leaseID, leaseID)
		if err != nil {
			return false
		}
		var cp Checkpoint
		if json.Unmarshal(it.Body, &cp) != nil || cp.Continuation == "" {
			return false
		}
		// Checkpointed past the job: the feed from the lease no longer
		// holds it.
		page, err := st.ReadChanges(ctx, store.Jobs, cp.Continuation, 100)
		return err == nil && !slices.ContainsFunc(page.Items, func(it store.Item) bool { return it.ID == job.ID })
	}, within, 10*time.Millisecond, "the dispatch function never took the job's change")

	// kill -9 the handler: the emulator restarts it, and the API answers
	// again from the same store.
	pid := emu.Child().PID()
	require.NotZero(t, pid)
	restarts := emu.Child().Restarts()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		p := emu.Child().PID()
		return emu.Child().Restarts() > restarts && p != 0 && p != pid
	}, 30*time.Second, 10*time.Millisecond, "the handler was not restarted")
	require.Eventually(t, func() bool {
		status, _ := call("GET", "/api/healthz", "")
		return status == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond, "healthz does not answer after the restart")

	status, body = call("GET", "/api/fleet/products/p1", "")
	require.Equal(t, http.StatusOK, status, body)
	var product struct{ Repos []string }
	require.NoError(t, json.Unmarshal([]byte(body), &product))
	require.Equal(t, []string{"notes"}, product.Repos, "state written before the crash must survive it")
}

// runEmulator runs emu until the test ends, and then checks that it
// stopped cleanly with its handler. It returns the emulator's base URL and
// the context of its run.
func runEmulator(t *testing.T, emu *Emulator) (base string, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	runErr := make(chan error, 1)
	go func() { runErr <- emu.Run(ctx, func(addr string) { ready <- addr }) }()
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-runErr:
		cancel()
		t.Fatalf("emulator stopped before it was ready: %v", err)
	case <-time.After(StartTimeout):
		cancel()
		t.Fatal("emulator not ready")
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-runErr)
		require.Zero(t, emu.Child().PID(), "the handler must be stopped with the emulator")
	})
	return base, ctx
}

// TestAdminRunsTimer: POST /admin/functions/{name} runs a timer function
// once, as the host's admin API does, and answers 202 once the run is
// over; a name no timer has is 404.
func TestAdminRunsTimer(t *testing.T) {
	t.Parallel()
	runs := make(chan *funchost.TimerInfo, 4)
	handler := funchost.NewServer(nil, "", nil)
	handler.Handle("reaper", func(_ context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		info, err := funchost.Timer(inv.Data["tick"])
		if err != nil {
			return nil, err
		}
		runs <- info
		return &funchost.Result{}, nil
	})
	child := readyChild(newTestServer(t, handler))
	fn := &Function{Name: "reaper", Bindings: []Binding{{Type: "timerTrigger", Direction: "in", Name: "tick",
		Props: map[string]json.RawMessage{"schedule": json.RawMessage(`"0 0 0 1 1 *"`)}}}}
	trig, _ := fn.Trigger()
	tt, err := newTimerTrigger(fn, trig, Settings(func(string) string { return "" }), nil, child, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	e := &Emulator{timers: []*timerTrigger{tt}}
	front := newHTTPFront("api", nil, child)
	front.runTimer = e.RunTimer
	base := "http://" + newTestServer(t, front)

	post := func(path string) int {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(`{"input":""}`))
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusAccepted, post("/admin/functions/reaper"))
	require.Len(t, runs, 1, "the run is over when the answer comes")
	require.False(t, (<-runs).IsPastDue)
	require.Equal(t, http.StatusNotFound, post("/admin/functions/nope"))
	require.Empty(t, runs)
}
