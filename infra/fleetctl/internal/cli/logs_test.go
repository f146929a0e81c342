package cli

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/httpapi"
	"github.com/gigafactory/fleet/shared/runlog"
	runlogfs "github.com/gigafactory/fleet/shared/runlog/fs"
	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/syncbuf"
)

// logWorld is the API with a run-log store and one job held by factory f1.
type logWorld struct {
	*world
	ft    string // f1's token
	job   string
	epoch string
	sent  int
}

func newLogWorld(t *testing.T) *logWorld {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	clk := clocktest.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	logs, err := runlogfs.Open(t.TempDir(), runlog.Limits{})
	require.NoError(t, err)
	c, err := coord.New(coord.Config{}, coord.Deps{Store: st, Clock: clk, RunLogs: logs})
	require.NoError(t, err)
	srv := httptest.NewServer(httpapi.New(c, httpapi.Config{OperatorTokens: []httpapi.OperatorToken{{Name: "ops", Token: opToken}}, Timers: clk}))
	t.Cleanup(srv.Close)
	w := &logWorld{world: &world{t: t, url: srv.URL, clock: clk, ids: map[string]string{}, tmp: t.TempDir()}}
	w.api("PUT", "/products/demo", opToken, "", "application/json", `{"repos": ["hello"]}`)
	w.ft = w.enroll("f1", "demo", []string{"os:linux", "engine:claude"}, 1)
	w.heartbeat(w.ft, []string{"os:linux", "engine:claude"}, []string{"hello"})
	w.job = w.submit("demo", manifest("Talk", "hello", ""))
	claim := w.api("POST", "/claim", w.ft, "", "", "")
	w.epoch = fmt.Sprint(claim["leaseEpoch"])
	return w
}

// engineSays appends text to the run's log as the factory does.
func (w *logWorld) engineSays(text string) {
	w.t.Helper()
	w.api("POST", fmt.Sprintf("/jobs/%s/log?leaseEpoch=%s&offset=%d", w.job, w.epoch, w.sent), w.ft, "demo", "text/plain", text)
	w.sent += len(text)
}

func (w *logWorld) endRun() {
	w.api("POST", "/fail", w.ft, "", "application/json", `{"jobId": "`+w.job+`", "leaseEpoch": `+w.epoch+`, "reason": "done", "retryable": false}`)
}

func TestJobsLogsPrintsTheLog(t *testing.T) {
	t.Parallel()
	w := newLogWorld(t)
	w.engineSays("hello\n")
	w.engineSays("\x1b[32mgreen\x1b[0m world\n")
	out, code := w.run(nil, "", "jobs", "logs", w.job)
	require.Zero(t, code, out)
	require.Contains(t, out, "--- stdout\nhello\n\x1b[32mgreen\x1b[0m world\n--- stderr\n", "the bytes as the engine wrote them")

	out, code = w.run(nil, "", "jobs", "logs", "--epoch", "9", w.job)
	require.NotZero(t, code)
	require.Contains(t, out, "no run of epoch 9")
}

// TestJobsLogsFollowResumes: -f prints what is there, follows new output,
// resumes after the server ends the stream (its time limit) without a gap
// or a repeated byte, and exits when the run ends.
func TestJobsLogsFollowResumes(t *testing.T) {
	t.Parallel()
	w := newLogWorld(t)
	w.engineSays("one\n")
	var stdout, stderr syncbuf.Buffer
	getenv := func(k string) string {
		return map[string]string{"FLEET_URL": w.url, "FLEET_TOKEN": opToken, "FLEET_PRODUCT": "demo"}[k]
	}
	done := make(chan int, 1)
	// Cleanups run last first: fleetctl stops before the server, whose
	// Close waits for the stream fleetctl holds.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		done <- Run(ctx, []string{"jobs", "logs", "-f", w.job},
			Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: getenv, Now: w.clock.Now})
	}()
	waitOut := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); stdout.String() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("want %q, have %q (stderr %q)", want, stdout.String(), stderr.String())
			}
		}
	}
	waitOut("one\n")
	w.engineSays("two\n")
	waitOut("one\ntwo\n")

	// The stream reaches its time limit; output written meanwhile comes
	// after the reconnect, once.
	w.clock.Advance(httpapi.DefaultMaxStream)
	w.engineSays("three\n")
	waitOut("one\ntwo\nthree\n")

	w.endRun()
	require.Eventually(t, func() bool {
		w.clock.Advance(2 * time.Second) // the stream's check of the run
		select {
		case code := <-done:
			require.Zero(t, code, stderr.String())
			return true
		default:
			return false
		}
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, "one\ntwo\nthree\n", stdout.String())
}
