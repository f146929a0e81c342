package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	fleetctlOnce sync.Once
	fleetctlBin  string
	fleetctlErr  error
)

// fleetctlBinary builds infra/fleetctl once per test run.
func fleetctlBinary(t *testing.T) string {
	t.Helper()
	fleetctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fleet-fleetctl-bin-")
		if err != nil {
			fleetctlErr = err
			return
		}
		fleetctlBin = filepath.Join(dir, "fleetctl")
		cmd := exec.Command("go", "build", "-o", fleetctlBin, "./infra/fleetctl")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			fleetctlErr = fmt.Errorf("go build ./infra/fleetctl: %v\n%s", err, out)
		}
	})
	require.NoError(t, fleetctlErr)
	return fleetctlBin
}

// tmuxPath finds tmux (`make tmux` installs it); without it the test skips,
// except under CI=true, where it fails.
func tmuxPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("tmux"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("tmux is not on PATH but CI=true: CI runs the fleetctl top test; install it with `make tmux`")
	}
	t.Skip("tmux is not on PATH; `make tmux` installs it (apt-get)")
	return ""
}

// TestFleetctlTopInTmux runs `fleetctl top` in a real terminal (a detached
// tmux session on its own server) against the local stack and reads the
// screen: the board, the factories, an alert, and a factory enrolled while
// it runs, which appears without a keypress (the product's event stream).
func TestFleetctlTopInTmux(t *testing.T) {
	t.Parallel()
	tmux := tmuxPath(t)
	bin := fleetctlBinary(t)
	s := startStack(t, "FLEET_STALE_AFTER=2s", "FLEET_DOWN_AFTER=1h")
	s.Product("demo", "app")
	s.Factory("ghost", "demo", 2, []string{"os:linux"}, []string{"app"})
	s.Submit("demo", Manifest("Waits for a gpu", "app", "gpu:a100"))

	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(s.Token+"\n"), 0o600))
	sock := "fleet-top-" + filepath.Base(t.TempDir())
	run := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-L", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = run("kill-server") })
	_, err := run("new-session", "-d", "-s", "top", "-x", "150", "-y", "45",
		fmt.Sprintf("%s top --url %s --token-file %s -p demo --interval 1h", bin, s.URL, tokenFile))
	require.NoError(t, err)
	screen := func() string {
		out, _ := run("capture-pane", "-p", "-t", "top")
		return out
	}
	waitScreen := func(what string, cond func(string) bool) string {
		t.Helper()
		var last string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if last = screen(); cond(last) {
				return last
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: not on the screen within 30s; screen:\n%s", what, last)
		return ""
	}
	has := func(parts ...string) func(string) bool {
		return func(sc string) bool {
			for _, p := range parts {
				if !strings.Contains(sc, p) {
					return false
				}
			}
			return true
		}
	}
	sc := waitScreen("the dashboard", has("fleet top · product demo", "queued", "Factories (1, seats 0/2)", "ghost", "Running jobs (0)"))
	t.Logf("screen:\n%s", sc)
	// The refresh interval is an hour: what follows can only come from the
	// event stream.
	waitScreen("live over the stream", has("● live"))
	s.Factory("late-box", "demo", 3, []string{"os:linux"}, []string{"app"})
	waitScreen("a factory enrolled while top runs", has("late-box", "Factories (2, seats 0/5)"))
	// The silent factory turns stale: an alert (after a manual refresh,
	// since silence changes nothing in the store).
	time.Sleep(2500 * time.Millisecond)
	_, err = run("send-keys", "-t", "top", "r")
	require.NoError(t, err)
	sc = waitScreen("the stale factory alert", has("stale_factory ghost"))
	t.Logf("screen:\n%s", sc)
	_, err = run("send-keys", "-t", "top", "q")
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := run("has-session", "-t", "top"); err != nil {
			break // q ended the program, and with it the session
		}
		require.True(t, time.Now().Before(deadline), "fleetctl top did not quit on q")
		time.Sleep(100 * time.Millisecond)
	}
}
