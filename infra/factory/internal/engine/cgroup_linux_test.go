//go:build linux

package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testContainment is a containment with cgroups, or skips the test (fails
// it under CI=true: CI runs as root on a kernel with cgroup v2, so a
// missing cgroup there is a broken runner, not a reason to skip).
func testContainment(t *testing.T) *Containment {
	t.Helper()
	c := Contain(uniqueInstance(t), filepath.Join(t.TempDir(), "cgroup"), false)
	if !c.Cgroups() {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cgroups cannot be used but CI=true: CI runs as root with cgroup v2 writable: %s", c.NoCgroups)
		}
		t.Skipf("cgroups cannot be used here (run as root on Linux 5.14+ with cgroup v2): %s", c.NoCgroups)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func uniqueInstance(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "fleet-test-" + hex.EncodeToString(b[:])
}

// hostile is an engine that leaves detached children behind and exits:
// a setsid'd loop, a double-forked nohup'd one, and a setsid'd one with a
// cleared environment (no run mark), each writing its pid to a file first
// and then appending to out.
const hostile = `setsid sh -c 'echo $$ > pid1; while :; do echo x >> out; sleep 0.05; done' > /dev/null 2>&1 &
( nohup sh -c 'echo $$ > pid2; while :; do echo y >> out; sleep 0.05; done' > /dev/null 2>&1 & ) &
env -i "$(command -v setsid)" /bin/sh -c 'echo $$ > pid3; while :; do echo z >> out; sleep 0.05; done' > /dev/null 2>&1 &
while [ ! -s pid1 ] || [ ! -s pid2 ] || [ ! -s pid3 ]; do sleep 0.01; done`

// alive reports whether pid runs (a zombie waiting for its reaper does
// not).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil && !isZombie(pid)
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// TestRunEndsDetachedChildren: children that left the engine's process
// group and session (setsid, a double fork with nohup, one with a cleared
// environment) end with the run, and the run's cgroup is gone; with
// cgroups, and without: the run's reaper (a child subreaper), and, with
// no reaper either, the run's mark in the environment, which a child
// that clears its environment escapes.
func TestRunEndsDetachedChildren(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cgroup", "reaper", "mark"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var c *Containment
			children := []string{"pid1", "pid2", "pid3"}
			switch mode {
			case "cgroup":
				c = testContainment(t)
			case "reaper":
				require.NotEmpty(t, reaperExe, "TestMain makes the test binary a reaper")
				c = &Containment{Instance: uniqueInstance(t), NoCgroups: "test", reaper: reaperExe}
			default:
				c = &Containment{Instance: uniqueInstance(t), NoCgroups: "test"}
			}
			dir := t.TempDir()
			res, err := Run(context.Background(), Spec{Argv: []string{"sh", "-c", hostile}, Dir: dir, Env: os.Environ(),
				LogPath: filepath.Join(dir, "log"), Grace: time.Second, Contain: c, Run: "job-1-e1"})
			require.NoError(t, err)
			require.NoError(t, res.Leftover)
			require.True(t, res.Success(), "%s: %s", res, Tail(filepath.Join(dir, "log"), 500))
			for _, f := range children {
				pid := readPID(t, filepath.Join(dir, f))
				if mode == "mark" && f == "pid3" {
					// Out of the mark's reach: ended here by pid.
					_ = syscall.Kill(pid, syscall.SIGKILL)
					continue
				}
				require.False(t, alive(pid), "the detached child %s (pid %d) outlived the run", f, pid)
			}
			if c.Cgroups() {
				require.NoDirExists(t, filepath.Join(c.cg.Dir(), "job-1-e1"), "the run's cgroup is removed")
			}
		})
	}
}

// TestRunStoppedEndsDetachedChildren: a run stopped from outside (budget,
// fence, shutdown) ends its detached children too.
func TestRunStoppedEndsDetachedChildren(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cgroup", "reaper"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testRunStopped(t, mode)
		})
	}
}

func testRunStopped(t *testing.T, mode string) {
	c := &Containment{Instance: uniqueInstance(t), NoCgroups: "test", reaper: reaperExe}
	if mode == "cgroup" {
		c = testContainment(t)
	}
	dir := t.TempDir()
	// The engine says it is up (every child has written its pid) through
	// a fifo; the run is stopped then.
	up := filepath.Join(dir, "up")
	require.NoError(t, syscall.Mkfifo(up, 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if f, err := os.Open(up); err == nil {
			_, _ = io.ReadAll(f)
			_ = f.Close()
		}
		cancel()
	}()
	res, err := Run(ctx, Spec{Argv: []string{"sh", "-c", hostile + "\necho up > up\nexec sleep 60"}, Dir: dir, Env: os.Environ(),
		LogPath: filepath.Join(dir, "log"), Grace: 100 * time.Millisecond, Contain: c, Run: "stopped-e1"})
	require.NoError(t, err)
	require.True(t, res.Stopped)
	for _, f := range []string{"pid1", "pid2", "pid3"} {
		pid := readPID(t, filepath.Join(dir, f))
		require.False(t, alive(pid), "the detached child %s (pid %d) outlived the stopped run", f, pid)
	}
}

// TestContainmentSweepEndsAnEarlierLife: run cgroups and marked processes
// a factory killed with -9 left behind are ended by the next life's sweep
// (same instance), which finds the subtree from the record.
func TestContainmentSweepEndsAnEarlierLife(t *testing.T) {
	t.Parallel()
	first := testContainment(t)
	record := first.record
	g, err := first.cg.Create("orphan-e1")
	require.NoError(t, err)
	cmd := exec.Command("sh", "-c", "setsid sleep 60 & exec sleep 60")
	cmd.Env = append(os.Environ(), MarkEnv+"="+first.Mark("orphan-e1"))
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	g.apply(cmd.SysProcAttr)
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait() }()
	// And one outside any cgroup of ours, carrying only the mark.
	marked := exec.Command("sleep", "60")
	marked.Env = append(os.Environ(), MarkEnv+"="+first.Mark("orphan2-e1"))
	require.NoError(t, marked.Start())
	go func() { _ = marked.Wait() }()

	second := Contain(first.Instance, record, false)
	require.True(t, second.Cgroups(), second.NoCgroups)
	require.NoError(t, second.Sweep(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoDirExists(t, g.Dir(), "the leftover run cgroup is removed")
	// Sweep returns once the cgroup is empty and no marked process lives.
	require.False(t, alive(cmd.Process.Pid), "the earlier life's process in its run cgroup is ended")
	require.False(t, alive(marked.Process.Pid), "the earlier life's marked process is ended")
}

// TestCgroup2Mount reads the cgroup2 mount out of mountinfo: unified,
// hybrid and a container's sub-tree mount.
func TestCgroup2Mount(t *testing.T) {
	t.Parallel()
	hybrid := `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	unified := `25 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
	sub := `700 690 0:23 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw
`
	spaced := `41 30 0:37 / /mnt/cg\0402 rw - cgroup2 none rw
`
	tests := []struct {
		mountinfo, own, mnt, root string
		ok                        bool
	}{
		{hybrid, "/", "/sys/fs/cgroup/unified", "/", true},
		{unified, "/system.slice/factory.service", "/sys/fs/cgroup", "/", true},
		{sub, "/docker/abc", "/sys/fs/cgroup", "/docker/abc", true},
		{sub, "/other", "", "", false},
		{spaced, "/", "/mnt/cg 2", "/", true},
		{"31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "/", "", "", false},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			mnt, root, ok := cgroup2Mount(tt.mountinfo, tt.own)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.mnt, mnt)
			require.Equal(t, tt.root, root)
		})
	}
}

// TestKillUID: every process of a uid ends, detached or not, and nothing
// of another uid is touched.
func TestKillUID(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("KillUID needs root to start processes as another uid but CI=true: CI runs as root")
		}
		t.Skip("starting processes as another uid needs root")
	}
	const uid = 47190
	dir := t.TempDir()
	for p := dir; p != filepath.Dir(p) && p != os.TempDir(); p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	require.NoError(t, os.Chmod(dir, 0o777))
	as := func(script string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd
	}
	require.NoError(t, as(`setsid sh -c 'echo $$ > pid1; exec sleep 60' > /dev/null 2>&1 &
while [ ! -s pid1 ]; do sleep 0.01; done`).Run())
	direct := as("exec sleep 60")
	require.NoError(t, direct.Start())
	go func() { _ = direct.Wait() }()
	other := exec.Command("sleep", "60")
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })

	require.NotEmpty(t, PIDsOfUID(uid))
	require.Equal(t, []uint32{uid}, UIDsInUse(uid-5, uid+5))
	require.NoError(t, KillUID(uid))
	require.Empty(t, UIDsInUse(uid-5, uid+5))
	require.Empty(t, PIDsOfUID(uid))
	require.False(t, alive(readPID(t, filepath.Join(dir, "pid1"))), "the detached process of the uid ended")
	require.True(t, alive(other.Process.Pid), "a process of another uid lives on")
	require.Error(t, KillUID(0), "never every process of root")
}

// TestRunFindsTheProgramAlike: with a reaper or without, the engine's
// program is found the same way (on the factory's PATH, as exec.Command
// does), whatever PATH the engine's environment holds, and a missing one
// is a start error either way.
func TestRunFindsTheProgramAlike(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"reaper", "mark"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := &Containment{Instance: uniqueInstance(t), NoCgroups: "test"}
			if mode == "reaper" {
				require.NotEmpty(t, reaperExe, "TestMain makes the test binary a reaper")
				c.reaper = reaperExe
			}
			dir := t.TempDir()
			spec := Spec{Argv: []string{"sh", "-c", "exit 0"}, Dir: dir, Env: []string{"PATH=" + filepath.Join(dir, "nothing-here")},
				LogPath: filepath.Join(dir, "log"), Grace: time.Second, Contain: c, Run: "find-e1"}
			res, err := Run(context.Background(), spec)
			require.NoError(t, err)
			require.True(t, res.Success(), "%s: %s", res, Tail(spec.LogPath, 500))

			spec.Argv = []string{"no-such-engine-" + uniqueInstance(t)}
			_, err = Run(context.Background(), spec)
			require.ErrorIs(t, err, exec.ErrNotFound)
		})
	}
}
