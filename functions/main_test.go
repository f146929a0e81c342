package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/storecount"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/local/hostemu"
	"github.com/gigafactory/fleet/shared/app"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/funchost"
)

// folders lists the function folders: every directory beside main.go that
// holds a function.json.
func folders(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("*", "function.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	names := make([]string, 0, len(paths))
	for _, p := range paths {
		names = append(names, filepath.Dir(p))
	}
	slices.Sort(names)
	return names
}

func TestEveryFolderHasAHandlerAndEveryHandlerAFolder(t *testing.T) {
	t.Parallel()
	// functions only wires handlers; nothing here is invoked.
	a := &app.App{Log: slog.New(slog.DiscardHandler)}
	handlers := functions(a)
	dirs := folders(t)

	var noHandler, noFolder []string
	for _, d := range dirs {
		if _, ok := handlers[d]; !ok {
			noHandler = append(noHandler, d)
		}
	}
	for name := range handlers {
		if !slices.Contains(dirs, name) {
			noFolder = append(noFolder, name)
		}
	}
	require.Empty(t, noHandler, "function folders with no handler in functions(a): the host would invoke them and get 404")
	require.Empty(t, noFolder, "handlers in functions(a) with no folder (functions/<name>/function.json): the host never invokes them")
	require.Equal(t, dirs, newServer(a, forwardHTTP).Functions(), "newServer must register exactly the folders")

	fa, err := hostemu.LoadApp("..")
	require.NoError(t, err)
	require.Equal(t, fa.Host.HTTPMode() != hostemu.ModeEnvelope, forwardHTTP,
		"forwardHTTP must say whether host.json's customHandler forwards or proxies HTTP requests")
	require.Equal(t, hostemu.ModeProxy, fa.Host.HTTPMode(), "the api function's event streams need enableProxyingHttpRequest")
}

// defaultsOnly resolves settings from their documented defaults alone: what
// a machine with no settings at all sees.
func defaultsOnly(name string) string { return config.Default(name) }

func TestFunctionJSONUsesDocumentedSettings(t *testing.T) {
	t.Parallel()
	fa, err := hostemu.LoadApp("..")
	require.NoError(t, err)
	var names []string
	for _, fn := range fa.Functions {
		names = append(names, fn.Name)
	}
	require.Equal(t, folders(t), names, "LoadApp must load every folder")

	refs := fa.SettingRefs()
	require.NotEmpty(t, refs)
	for _, r := range refs {
		documented := slices.ContainsFunc(config.Settings, func(s config.Setting) bool { return s.Name == r.Name })
		require.True(t, documented, "%s/function.json: %s.%s references %%%s%%, which is not in config.Settings", r.Function, r.Binding, r.Property, r.Name)
		require.NotEmpty(t, config.Default(r.Name), "%s/function.json: %s.%s references %%%s%%, which has no default: the app would not index without settings", r.Function, r.Binding, r.Property, r.Name)
	}

	// With only the defaults, the emulator accepts every function: every
	// schedule parses, every number is a number.
	_, err = hostemu.New(hostemu.Options{Root: "..", Settings: defaultsOnly, Store: idleStore{}})
	require.NoError(t, err)
}

// idleStore satisfies hostemu.FeedStore for configuration checks that never
// read the feed.
type idleStore struct{}

func (idleStore) ReadChanges(context.Context, string, string, int) (store.ChangePage, error) {
	return store.ChangePage{}, nil
}

func (idleStore) Read(context.Context, string, string, string) (store.Item, error) {
	return store.Item{}, store.ErrNotFound
}

func (idleStore) Upsert(context.Context, string, string, string, []byte) (string, error) {
	return "", nil
}

func (idleStore) ChangesHead(context.Context, string) (string, error) { return "", nil }

// sample is one invocation the host would make, and what must come back.
type sample struct {
	function string
	http     bool // an httpTrigger function: envelope only without forwarding
	body     []byte
	check    func(t *testing.T, res map[string]json.RawMessage)
}

// testdataValue reads Data[binding] of a sample envelope in testdata.
func testdataValue(t *testing.T, file, binding string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(t, err)
	var inv funchost.Invocation
	require.NoError(t, json.Unmarshal(b, &inv))
	v, ok := inv.Data[binding]
	require.True(t, ok, "%s has no Data.%s", file, binding)
	return v
}

// samples builds an invocation of every function of the app, with its
// binding names from its function.json. A trigger type with no sample fails
// the test, so a new kind of function cannot go untested.
func samples(t *testing.T) []sample {
	t.Helper()
	fa, err := hostemu.LoadApp("..")
	require.NoError(t, err)
	var out []sample
	for _, fn := range fa.Functions {
		trig, ok := fn.Trigger()
		require.True(t, ok)
		s := sample{function: fn.Name}
		var payload json.RawMessage
		switch strings.ToLower(trig.Type) {
		case "httptrigger":
			s.http = true
			payload = testdataValue(t, "api_healthz.json", "req")
			outName := ""
			for _, b := range fn.Bindings {
				if strings.EqualFold(b.Type, "http") && strings.EqualFold(b.Direction, "out") {
					outName = b.Name
				}
			}
			require.NotEmpty(t, outName, "%s has no http output binding", fn.Name)
			s.check = func(t *testing.T, res map[string]json.RawMessage) {
				var outputs map[string]funchost.HTTPResponse
				require.NoError(t, json.Unmarshal(res["Outputs"], &outputs))
				require.Equal(t, "200", outputs[outName].StatusCode, "GET /api/healthz in envelope mode: %s", outputs[outName].Body)
				require.JSONEq(t, `{"status":"ok"}`, outputs[outName].Body)
			}
		case "timertrigger":
			payload = testdataValue(t, "timer_first_run.json", "timer")
		case "cosmosdbtrigger":
			payload = testdataValue(t, "dispatch_empty.json", "documents")
			// Each change-feed function says what it did with the batch.
			want := map[string]string{"dispatch": `["batch of 0, 0 published"]`, "echo": `["batch without a tracked job"]`}[fn.Name]
			require.NotEmpty(t, want, "function %s: no expected answer to an empty batch", fn.Name)
			s.check = func(t *testing.T, res map[string]json.RawMessage) {
				require.JSONEq(t, want, string(res["Logs"]))
			}
		default:
			t.Fatalf("function %s: no sample invocation for trigger type %s", fn.Name, trig.Type)
		}
		s.body, err = json.Marshal(funchost.Invocation{
			Data:     map[string]json.RawMessage{trig.Name: payload},
			Metadata: map[string]json.RawMessage{"sys": json.RawMessage(`{"MethodName":"` + fn.Name + `"}`)},
		})
		require.NoError(t, err)
		out = append(out, s)
	}
	return out
}

// invokeAll makes every sample invocation against a handler at base and
// probes it, as the host does: with forwarding, HTTP requests go as they
// came and http functions get no envelope.
func invokeAll(t *testing.T, base string, forwarding bool) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(base + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "probe")

	for _, s := range samples(t) {
		if forwarding && s.http {
			continue
		}
		t.Run(s.function, func(t *testing.T) {
			resp, err := client.Post(base+"/"+s.function, "application/json", bytes.NewReader(s.body))
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, 2, resp.StatusCode/100, "%s: %s", s.function, body)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var res map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(body, &res))
			require.Contains(t, res, "Outputs")
			require.Contains(t, res, "Logs")
			if s.check != nil {
				s.check(t, res)
			}
		})
	}

	if !forwarding {
		return
	}
	// With enableForwardingHttpRequest the host sends the request as it came.
	resp, err = client.Get(base + "/api/healthz")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "forwarded GET /api/healthz: %s", body)
}

// TestServerInProcess runs every function through newServer on the real
// app, under the race detector.
func TestServerInProcess(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	a, err := app.Open(t.Context(), config.Lookup{Values: map[string]string{config.DataDir: t.TempDir()}}, log)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	for _, forwarding := range []bool{true, false} {
		srv := httptest.NewServer(newServer(a, forwarding))
		t.Cleanup(srv.Close)
		invokeAll(t, srv.URL, forwarding)
	}
}

// TestHandlerStartsAlone starts the built handler the way `func start` does
// with an empty local.settings.json: no settings but the port, in a working
// directory of its own. It must come up on the local defaults and serve
// every function.
func TestHandlerStartsAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the handler binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "handler")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	work := t.TempDir()
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "handler.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin)
	cmd.Dir = work
	cmd.Env = []string{PortVar + "=" + port, "HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("handler output:\n%s", b)
		}
	})

	base := "http://" + net.JoinHostPort("127.0.0.1", port)
	// The host gives the handler 60 s to answer its probe.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("handler exited before answering the probe: %v", waitErr)
		default:
		}
		resp, err := http.Get(base + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		require.True(t, time.Now().Before(deadline), "handler did not answer the probe within 60 s: %v", err)
		time.Sleep(20 * time.Millisecond)
	}

	invokeAll(t, base, forwardHTTP)

	// The local defaults: SQLite and a generated operator token in ./.fleet.
	require.FileExists(t, filepath.Join(work, ".fleet", "fleet.db"))
	require.FileExists(t, filepath.Join(work, ".fleet", app.OperatorTokenFile))
	select {
	case <-exited:
		t.Fatalf("handler exited: %v", waitErr)
	default:
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	return port
}

// TestEveryTimerIsFreeWhenIdle: every timer function of the app (each
// folder whose trigger is a timer, found as the host finds them), invoked
// through the handler on a fleet with nothing to do, costs at most one
// point read per tick once it has looked: no query, no write. A timer that
// scans on every idle tick, as the echo sweep did, fails here by name.
func TestEveryTimerIsFreeWhenIdle(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	a, err := app.Open(t.Context(), config.Lookup{Values: map[string]string{config.DataDir: t.TempDir()}}, log, app.WithChangeFeed())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	counted, ok := a.Store.(*storecount.Store)
	require.True(t, ok, "the app counts its store calls")
	srv := httptest.NewServer(newServer(a, true))
	t.Cleanup(srv.Close)

	var timers []sample
	for _, s := range samples(t) {
		if strings.Contains(string(s.body), `"timer"`) && !s.http {
			timers = append(timers, s)
		}
	}
	require.GreaterOrEqual(t, len(timers), 5, "reaper, redispatch, gcsweep, prune, echosweep at least")
	tick := func(s sample) storecount.Counts {
		before := counted.Snapshot()
		resp, err := srv.Client().Post(srv.URL+"/"+s.function, "application/json", bytes.NewReader(s.body))
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", s.function, body)
		return counted.Snapshot().Sub(before)
	}
	for _, s := range timers {
		tick(s) // the first look may scan and record that it found nothing
	}
	for range 3 {
		for _, s := range timers {
			got := tick(s)
			require.Zero(t, got.Queries, "%s: an idle tick queries nothing", s.function)
			require.Zero(t, got.Writes, "%s: an idle tick writes nothing", s.function)
			require.LessOrEqual(t, got.Reads, int64(1), "%s: an idle tick is at most one point read", s.function)
		}
	}
}

// TestLocalSettingsExampleResolvesEveryReference: `make func-app` copies
// local/local.settings.json.example next to the app for `func start`, and
// the Functions host knows only the app settings in it, not the handler's
// documented defaults: a %SETTING% in a function.json that the example does
// not set fails indexing that function. With only the example's values,
// the emulator (which refuses an unresolved reference as the host does)
// must accept every function, and every cosmosDBTrigger connection must be
// there, as a connection string or as <connection>__accountEndpoint.
func TestLocalSettingsExampleResolvesEveryReference(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "local", "local.settings.json.example"))
	require.NoError(t, err)
	var example struct {
		Values map[string]string `json:"Values"`
	}
	require.NoError(t, json.Unmarshal(b, &example))
	require.Equal(t, "custom", example.Values["FUNCTIONS_WORKER_RUNTIME"], "the host runs a custom handler only with FUNCTIONS_WORKER_RUNTIME=custom")

	fa, err := hostemu.LoadApp("..")
	require.NoError(t, err)
	for _, r := range fa.SettingRefs() {
		require.NotEmpty(t, example.Values[r.Name], "%s/function.json: %s.%s references %%%s%%, which local/local.settings.json.example does not set: `func start` would not index %s", r.Function, r.Binding, r.Property, r.Name, r.Function)
	}
	for _, fn := range fa.Functions {
		for _, bd := range fn.Bindings {
			if strings.EqualFold(bd.Type, "cosmosDBTrigger") {
				var conn string
				require.NoError(t, json.Unmarshal(bd.Props["connection"], &conn), "%s: connection", fn.Name)
				require.True(t, example.Values[conn] != "" || example.Values[conn+"__accountEndpoint"] != "",
					"%s: connection %s is neither a setting nor %s__accountEndpoint in local/local.settings.json.example", fn.Name, conn, conn)
			}
		}
	}
	_, err = hostemu.New(hostemu.Options{Root: "..", Settings: func(name string) string { return example.Values[name] }, Store: idleStore{}})
	require.NoError(t, err, "the emulator, with only the example's settings")
}

// TestChangeFeedTriggersUseTerraformsLeaseContainer: with an Entra identity
// the cosmosDBTrigger cannot create its lease container (that is a control
// plane write the data-plane role does not carry), so every trigger must
// leave createLeaseContainerIfNotExists false and name a lease container
// Terraform creates: one of store.Containers (terraform/cosmos.tf mirrors
// them, TestTerraformContainersMatchStore), partitioned on /id as the
// extension requires. The monitored container must be one of them too.
func TestChangeFeedTriggersUseTerraformsLeaseContainer(t *testing.T) {
	t.Parallel()
	fa, err := hostemu.LoadApp("..")
	require.NoError(t, err)
	partitionKey := map[string]string{}
	for _, c := range store.Containers {
		partitionKey[c.Name] = c.PartitionKey
	}
	str := func(b hostemu.Binding, key, def string) string {
		raw, ok := b.Props[key]
		if !ok {
			return def
		}
		var s string
		require.NoError(t, json.Unmarshal(raw, &s), "%s must be a string", key)
		return s
	}
	feeds := 0
	for _, fn := range fa.Functions {
		trig, ok := fn.Trigger()
		require.True(t, ok)
		if !strings.EqualFold(trig.Type, "cosmosDBTrigger") {
			continue
		}
		feeds++
		if raw, ok := trig.Props["createLeaseContainerIfNotExists"]; ok {
			require.JSONEq(t, "false", string(raw), "%s: createLeaseContainerIfNotExists must be false: the identity cannot create containers; Terraform does", fn.Name)
		}
		lease := str(trig, "leaseContainerName", "leases")
		require.Equal(t, "/id", partitionKey[lease], "%s: lease container %q must be in store.Containers (so Terraform creates it), partitioned on /id", fn.Name, lease)
		monitored := str(trig, "containerName", "")
		require.Contains(t, partitionKey, monitored, "%s: monitored container %q is not in store.Containers", fn.Name, monitored)
	}
	require.GreaterOrEqual(t, feeds, 2, "dispatch and echo at least")
}
