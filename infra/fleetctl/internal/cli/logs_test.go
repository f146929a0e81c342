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

// TestJobsLogsRemovesTerminalCommands: what the engine prints reaches the
// terminal without the sequences that command it (clipboard, title, clear
// screen, a carriage return writing over a line), colours kept, a sequence
// split between two appends removed whole; --raw prints every byte.
func TestJobsLogsRemovesTerminalCommands(t *testing.T) {
	t.Parallel()
	w := newLogWorld(t)
	w.engineSays("before\x1b]52;c;aGVsbG8=")
	w.engineSays("\x07after\n")
	w.engineSays("\x1b]0;title\x07\x1b[2Jforged\rover\n\x1b[32mgreen\x1b[0m\n")
	w.endRun()
	const raw = "before\x1b]52;c;aGVsbG8=\x07after\n\x1b]0;title\x07\x1b[2Jforged\rover\n\x1b[32mgreen\x1b[0m\n"
	const clean = "beforeafter\nforgedover\n\x1b[32mgreen\x1b[0m\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "logs", w.job}, clean},
		{[]string{"jobs", "logs", "-f", w.job}, clean},
		{[]string{"jobs", "logs", "--raw", w.job}, raw},
		{[]string{"jobs", "logs", "-f", "--raw", w.job}, raw},
	} {
		out, code := w.run(nil, "", tc.args...)
		require.Zero(t, code, out)
		require.Contains(t, out, "--- stdout\n"+tc.want+"--- stderr\n", tc.args)
	}
}

// TestEscapeFilter: what the filter keeps of writes, whichever way the
// output is cut between them.
func TestEscapeFilter(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxHeldEscape)
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"text, tab and newline", []string{"a\tb\n"}, "a\tb\n"},
		{"colour", []string{"\x1b[1;32mok\x1b[m"}, "\x1b[1;32mok\x1b[m"},
		{"colour split", []string{"\x1b[3", "2mok"}, "\x1b[32mok"},
		{"ESC alone at a write's end", []string{"a\x1b", "[0mb"}, "a\x1b[0mb"},
		{"OSC 8 link", []string{"\x1b]8;;https://evil\x1b\\click\x1b]8;;\x1b\\"}, "click"},
		{"OSC split before its ST", []string{"\x1b]0;t\x1b", "\\x"}, "x"},
		{"cursor moves and answer-back requests", []string{"\x1b[H\x1b[6n\x1b[>0c\x1b[?1049h\x1bPq\x1b\\x"}, "qx"},
		{"carriage return, backspace, bell", []string{"a\r\x08\x07b\r\n"}, "ab\n"},
		{"C1 CSI", []string{"a\u009b2Jb"}, "a2Jb"},
		{"C1 CSI split between writes", []string{"a\xc2", "\x9b2Jb"}, "a2Jb"},
		{"a stray byte", []string{"a\x9bb"}, "a\uFFFDb"},
		{"other characters whole", []string{"\xe2\x82", "\xac \u00e9"}, "€ é"},
		{"unfinished at the end", []string{"a\x1b]52;c;aGk="}, "a52;c;aGk="},
		{"an OSC longer than the bound is not held", []string{"\x1b]0;" + long, "\x07b"}, "0;" + long + "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			f := &escapeFilter{w: &b}
			for _, w := range tc.writes {
				n, err := f.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.NoError(t, f.Flush())
			require.Equal(t, tc.want, b.String())
		})
	}
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
