package tests

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/syncbuf"
)

var (
	demoConsoleLine = regexp.MustCompile(`console\s+(http://[0-9.:]+)/api/console/`)
	demoTokenLine   = regexp.MustCompile(`sign in with the operator token: (\S+)`)
)

// TestMakeDemo runs `make demo` as a newcomer would (on a free port and a
// temp dir), follows the console URL and operator token it prints, and
// sees every demo job reach a terminal stage by itself: the DAG parent and
// both its children, the review-gated job (approved, then shipped), the job
// that fails once (a failed run, then a succeeded one) and the plain ones.
// Then Ctrl-C (SIGINT to make's process group, as a terminal sends it) stops
// everything: no process carrying the test's marker in its environment —
// make, the demo, the stack, its handler, the factories, their engines —
// is left.
func TestMakeDemo(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "demo")
	mark := randomToken("demo-mark-")
	cmd := exec.Command("make", "--no-print-directory", "demo",
		"DEMO_FLAGS=-listen 127.0.0.1:0 -dir "+dir+" -engine-seconds 1")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "FLEET_DEMO_TEST_MARK="+mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncbuf.Buffer{}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	var url, token string
	ready := make(chan struct{})
	up := ready
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = out.Write([]byte(line + "\n"))
			if m := demoConsoleLine.FindStringSubmatch(line); m != nil && url == "" {
				url = m[1]
			}
			if m := demoTokenLine.FindStringSubmatch(line); m != nil && token == "" {
				token = m[1]
			}
			if ready != nil && strings.Contains(line, "Ctrl-C stops") && url != "" && token != "" {
				close(ready)
				ready = nil
			}
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("make demo output:\n%s", out.String())
		}
	})
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("make demo exited (%v) before the fleet was up:\n%s", err, out.String())
	case <-time.After(5 * time.Minute):
		t.Fatalf("make demo: no banner within 5m:\n%s", out.String())
	}

	s := &Stack{t: t, URL: url, API: url + "/api/fleet", Token: token}
	var jobs []map[string]any
	Eventually(t, 2*time.Minute, "every demo job terminal", func() bool {
		r := s.Op(http.MethodGet, "/jobs?limit=100", "demo", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var page struct {
			Items []map[string]any `json:"items"`
		}
		r.JSON(t, &page)
		jobs = page.Items
		if len(jobs) < 9 {
			return false
		}
		for _, j := range jobs {
			switch j["stage"] {
			case "shipped", "failed", "dead_letter", "cancelled":
			default:
				return false
			}
		}
		// The flaky job is terminal (failed) for a moment before the demo
		// requeues it: wait until it shipped.
		return strings.Contains(out.String(), "reached a terminal stage")
	})
	byTitle := map[string]map[string]any{}
	for _, j := range jobs {
		require.Equal(t, "shipped", j["stage"], "%s: %v", j["title"], j["lastFailure"])
		byTitle[j["title"].(string)] = j
	}
	plan := byTitle["Plan the 1.0 release"]
	require.NotNil(t, plan)
	for _, child := range []string{"Write the release notes", "Bump the version to 1.0"} {
		require.Equal(t, plan["id"], byTitle[child]["parentId"], child)
	}
	gated := byTitle["Rename the --verbose flag"]
	require.Equal(t, float64(1), gated["review"].(map[string]any)["approvals"], "the demo approved the gated job")
	// The pull request job: two iterations on one pull request, merged.
	pr := byTitle["Add a --version flag"]
	require.NotNil(t, pr)
	require.Equal(t, float64(2), pr["iteration"], "the forge double's changes request brought a second iteration")
	require.Equal(t, "merged", pr["pullRequest"].(map[string]any)["state"])
	require.Equal(t, "Please add a test for the flag.", pr["feedback"].([]any)[0].(map[string]any)["body"])
	require.Contains(t, out.String(), "the reviewer asks for changes on pull request")
	require.Contains(t, out.String(), "the reviewer approves iteration 2")
	flaky := byTitle["Fix the flaky date test"]
	r := s.Op(http.MethodGet, "/jobs/"+flaky["id"].(string)+"/runs", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var runs struct {
		Items []map[string]any `json:"items"`
	}
	r.JSON(t, &runs)
	var results []string
	for _, run := range runs.Items {
		results = append(results, run["result"].(string))
		require.NotZero(t, run["usage"].(map[string]any)["usd"], "the demo engine reports usage")
	}
	require.ElementsMatch(t, []string{"failed", "succeeded"}, results, "the flaky job failed once, then succeeded")
	// A claude-preset job: cost, turns, model and session from the
	// stand-in CLI's own stream-json, no usage file.
	doc := byTitle["Document the configuration"]
	r = s.Op(http.MethodGet, "/jobs/"+doc["id"].(string)+"/runs", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	runs.Items = nil
	r.JSON(t, &runs)
	require.Len(t, runs.Items, 1)
	run := runs.Items[0]
	require.Equal(t, "claude", run["engine"])
	require.Equal(t, float64(2), run["turns"], "turns from the engine's result")
	require.Equal(t, "claude-sonnet-4-5-20250929", run["model"])
	require.Equal(t, "demo-"+doc["id"].(string)+"-e1", run["engineSession"])
	require.Greater(t, run["usage"].(map[string]any)["usd"], 0.0, "the cost from total_cost_usd")
	timing := regexp.MustCompile(`all \d+ jobs reached a terminal stage.*`).FindString(out.String())
	t.Logf("make demo: %s", timing)

	require.NotEmpty(t, demoProcs(t, mark), "the marker is in the demo's processes' environment")
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("make demo still running 90s after SIGINT:\n%s", out.String())
	}
	require.Contains(t, out.String(), "demo: stopped; everything it started has exited")
	require.Empty(t, demoProcs(t, mark), "processes left behind after Ctrl-C")
}

// demoProcs lists the live processes whose environment holds mark: every
// process make demo started, directly or not, inherits it (reparented
// orphans included).
func demoProcs(t *testing.T, mark string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// A process that ended meanwhile, or a zombie, has no environment.
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if bytes.Contains(env, []byte("FLEET_DEMO_TEST_MARK="+mark)) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}
