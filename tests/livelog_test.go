package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/syncbuf"
)

// liveEngineLines is how many lines the live-output engine prints, one
// every 200 ms, each with the time it was printed (ns since the epoch).
const liveEngineLines = 30

// liveEngineBody waits for the file go (so that the followers are
// connected before the first line) and then prints.
func liveEngineBody(goFile string) string {
	return `while [ ! -e ` + goFile + ` ]; do sleep 0.05; done
for i in $(seq 1 30); do echo "line $i $(date +%s%N)"; sleep 0.2; done`
}

// TestLiveOutputFollowedByFleetctlAndSSE: a real factory runs an engine
// printing a line every 200 ms. `fleetctl jobs logs -f` shows each line
// within 2 s of the engine printing it; a plain SSE client that
// disconnects mid-run and resumes with Last-Event-ID gets every byte of the
// log exactly once, and the stream ends when the run does.
func TestLiveOutputFollowedByFleetctlAndSSE(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "talk")
	s.Product("demo", repo.Name)
	goFile := filepath.Join(t.TempDir(), "go")
	startFactory(t, s, "fa", "demo", 1, repo, facEngine(t, liveEngineBody(goFile)))
	id := s.Submit("demo", Manifest("Talk", repo.Name))
	facWaitStage(t, s, "demo", id, "building", 60*time.Second)

	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(s.Token+"\n"), 0o600))
	cmd := exec.Command(fleetctlBinary(t), "--url", s.URL, "--token-file", tokenFile, "-p", "demo", "jobs", "logs", "-f", id)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// fleetctl's lines, read as they come, with how late each came.
	type shown struct {
		line string
		late time.Duration
	}
	shownc := make(chan []shown, 1)
	go func() {
		var got []shown
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			at := time.Now()
			l := shown{line: sc.Text(), late: -1}
			if f := strings.Fields(l.line); len(f) == 3 {
				if ns, err := strconv.ParseInt(f[2], 10, 64); err == nil {
					l.late = at.Sub(time.Unix(0, ns))
				}
			}
			got = append(got, l)
		}
		shownc <- got
	}()

	// The SSE client, beside it: a few lines, a disconnect, a resume.
	streamURL := s.URL + "/api/fleet/jobs/" + id + "/log/stream"
	sse := openSSE(t, streamURL, s.Token, "X-Product-Id", "demo")
	// Both followers are connecting: a process start takes a moment, more
	// on a loaded machine. Then the engine starts printing.
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	var text strings.Builder
	for strings.Count(text.String(), "\n") < 5 {
		ev, ok := sse.Next()
		require.True(t, ok, "the stream ended early")
		text.WriteString(logChunk(t, ev))
	}
	sse.Close()
	time.Sleep(time.Second) // the engine goes on meanwhile
	sse = openSSE(t, streamURL, s.Token, "X-Product-Id", "demo", "Last-Event-ID", sse.LastID)
	for {
		ev, ok := sse.Next()
		require.True(t, ok, "the stream ended without its end event")
		if ev.Event == "end" {
			break
		}
		text.WriteString(logChunk(t, ev))
	}
	_, ok := sse.Next()
	require.False(t, ok, "nothing after the end event")

	got := <-shownc
	var lines []string
	var late []time.Duration
	for _, g := range got {
		lines = append(lines, g.line)
		late = append(late, g.late)
	}
	require.NoError(t, cmd.Wait(), "fleetctl -f exits when the run ends: %s", stderr.String())
	require.Len(t, lines, liveEngineLines, "every line once: %q", lines)
	for i, l := range lines {
		require.True(t, strings.HasPrefix(l, fmt.Sprintf("line %d ", i+1)), "line %d in order: %q", i+1, l)
		require.LessOrEqual(t, late[i], 2*time.Second, "line %d shown %v after the engine printed it", i+1, late[i])
	}
	slices.Sort(late)
	t.Logf("engine write -> fleetctl -f: p50 %v, max %v over %d lines", late[len(late)/2], late[len(late)-1], len(late))

	// The resumed SSE client has the log exactly: no gap, no repeat.
	full := s.Op(http.MethodGet, "/jobs/"+id+"/log", "demo", nil)
	require.Equal(t, http.StatusOK, full.Status)
	require.Equal(t, "true", full.Header.Get("X-Fleet-Log-Complete"))
	require.Equal(t, string(full.Body), text.String(), "the SSE client's bytes are the log's, once each")
	require.Equal(t, liveEngineLines, strings.Count(text.String(), "\n"))
}

func logChunk(t *testing.T, ev sseEvent) string {
	t.Helper()
	var s string
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &s), "chunk %q", ev.Data)
	return s
}
