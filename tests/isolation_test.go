package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Isolation of runs on a factory (issue 23 item 1): nothing a run started
// outlives it, concurrent runs cannot reach each other's files, and a
// factory restarted after kill -9 ends what its previous life left.
//
// Each test that gives seats uids uses a range of its own: a factory
// kills every process of its seat uids, so two factories sharing a range
// would kill each other's engines.

// requireRoot skips a test that needs root (to switch uids, to write
// cgroups), except under CI=true, where CI runs as root and it fails.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the isolation tests need root but CI=true: CI runs them as root")
	}
	t.Skip("the isolation tests need root (uid switching, cgroups)")
}

// requireCgroups waits for the factory's isolation line and skips (fails
// under CI=true) when it got no cgroups.
func requireCgroups(t *testing.T, f *factoryProc) {
	t.Helper()
	requireIsolation(t, f, "cgroups")
}

// requireIsolation waits for the factory's isolation line and skips (fails
// under CI=true) when it does not say "<what>":true.
func requireIsolation(t *testing.T, f *factoryProc, what string) {
	t.Helper()
	Eventually(t, 30*time.Second, "factory "+f.ID+" logs its run isolation", func() bool {
		return strings.Contains(f.Output(), `"msg":"run isolation"`)
	})
	if strings.Contains(f.Output(), `"`+what+`":true`) {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("factory %s runs without %s but CI=true: CI has cgroup v2 writable and runs as root; output:\n%s", f.ID, what, f.Output())
	}
	t.Skipf("factory %s cannot use %s here (cgroup v2, Linux 5.14+, root)", f.ID, what)
}

// isoStack starts a stack with product demo on repo app, and names a
// marker for the test's processes, ended when the test ends.
func isoStack(t *testing.T, prefix string) (*Stack, *facRepo, string) {
	t.Helper()
	requireRoot(t)
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	marker := randomToken(prefix)
	killMarked(t, marker)
	return s, repo, marker
}

// waitPIDFile waits until an engine has written a pid to path.
func waitPIDFile(t *testing.T, path, what string) int {
	t.Helper()
	var pid int
	Eventually(t, 10*time.Second, what, func() bool {
		b, err := os.ReadFile(path)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// sharedDir is a temp dir every uid can pass through: the seat uids must
// reach their worktrees (the factory refuses to start otherwise) and
// their engine's script.
func sharedDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != filepath.Dir(p) && p != os.TempDir(); p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	return d
}

// isoEngine writes an engine script into a directory every uid can read.
func isoEngine(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "engine.sh")
	require.NoError(t, os.WriteFile(p, []byte("#!/usr/bin/env bash\nset -u\n"+body+"\n"), 0o755))
	return p
}

// markerPIDs lists the live processes whose command line holds marker.
func markerPIDs(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte(marker)) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
			continue // gone, or a zombie waiting for its reaper
		}
		out = append(out, pid)
	}
	return out
}

// killMarked ends what a failed test left running (the processes this
// test started, by their marker).
func killMarked(t *testing.T, marker string) {
	t.Cleanup(func() {
		for _, pid := range markerPIDs(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// hostileLoops starts two loops that leave the engine's process group
// and session (setsid with a cleared environment, so without the run's
// mark; a double fork with nohup), wait a second (the run is over by
// then) and then write INJECTED.txt into every worktree of the factory,
// forever. The engine exits once both have left (each writes
// its pid to PIDDIR first): an engine that exits sooner has them killed
// with its process group.
const hostileLoops = `WORK="$(dirname "$(dirname "$FLEET_JOB_WORKTREE")")"
env -i "$(command -v setsid)" /bin/bash -c 'echo $$ > PIDDIR/setsid; sleep 1; while :; do for d in '"$WORK"'/*/*/; do echo x >> "$d/INJECTED.txt"; done 2> /dev/null; sleep 0.05; done # MARKER-setsid' > /dev/null 2>&1 < /dev/null &
( nohup bash -c 'echo $$ > PIDDIR/nohup; sleep 1; while :; do for d in '"$WORK"'/*/*/; do echo y >> "$d/INJECTED.txt"; done 2> /dev/null; sleep 0.05; done # MARKER-nohup' > /dev/null 2>&1 < /dev/null & ) &
while [ ! -s PIDDIR/setsid ] || [ ! -s PIDDIR/nohup ]; do sleep 0.01; done
`

// TestIsolationDetachedChildrenEnd: an engine that starts a setsid'd loop
// and a double-forked nohup'd one and exits: once its run has ended
// neither runs, and the next job's result branch (whose engine takes
// a while) holds no INJECTED.txt. With engines as the factory's own user
// (the cgroup alone ends the loops), on seat uids, and without cgroups
// (the run's reaper ends them).
func TestIsolationDetachedChildrenEnd(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, tc := range []struct{ name, uids, cgroups string }{
		{"factory uid", "", ""}, {"seat uids", "47120-47121", ""}, {"reaper", "", "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, repo, marker := isoStack(t, "iso-detach-")
			shared := sharedDir(t)
			pidDir := filepath.Join(shared, "pids")
			require.NoError(t, os.Mkdir(pidDir, 0o777))
			require.NoError(t, os.Chmod(pidDir, 0o1777))
			workDir := filepath.Join(shared, "work")
			require.NoError(t, os.Mkdir(workDir, 0o755))

			engine := isoEngine(t, shared, `case "$FLEET_JOB_TITLE" in
Hostile*) `+strings.NewReplacer("MARKER", marker, "PIDDIR", pidDir).Replace(hostileLoops)+`
  echo hostile > result.txt ;;
*) sleep 2; echo clean > result.txt ;;
esac`)
			var env []string
			if tc.uids != "" {
				env = append(env, "FLEET_ENGINE_UIDS="+tc.uids)
			}
			what := "cgroups"
			if tc.cgroups != "" {
				env, what = append(env, "FLEET_RUN_CGROUPS="+tc.cgroups), "reaper"
			}
			token := s.Factory("fa", "demo", 1, []string{"os:linux"}, []string{repo.Name})
			f := runFactoryIn(t, s, "fa", token, 1, repo.Base, engine, workDir, env...)
			requireIsolation(t, f, what)

			hostile := s.Submit("demo", Manifest("Hostile", "app", "engine:fake"))
			facWaitStage(t, s, "demo", hostile, "shipped", 30*time.Second)
			// The job ships after its engine's run ended, and a run ends
			// only once every process of it has (its cgroup empty, or its
			// reaper's descendants gone): nothing may be left by now.
			left := markerPIDs(marker)

			clean := s.Submit("demo", Manifest("Clean", "app", "engine:fake"))
			facWaitStage(t, s, "demo", clean, "shipped", 30*time.Second)
			require.Equal(t, "clean", repo.Show(t, "aq/job/"+clean, "result.txt"))
			_, err := facGitTry(repo.Origin, "show", "refs/heads/aq/job/"+clean+":INJECTED.txt")
			require.Error(t, err, "a loop of the earlier run wrote INJECTED.txt into the next job's worktree")
			require.Empty(t, left, "the detached loops outlived their run")
			require.Empty(t, markerPIDs(marker))
		})
	}
}

// TestIsolationConcurrentRunsCannotReachEachOther: two runs at once on a
// 2-seat factory with a uid per seat. Each engine finds the other's
// worktree and job directory and tries to read and write them, to list
// and write the factory's work directory and mirror, and to signal the
// other's processes; it records what it could do in its own result, and
// could do none of it.
func TestIsolationConcurrentRunsCannotReachEachOther(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	shared := sharedDir(t)
	workDir := filepath.Join(shared, "work")
	require.NoError(t, os.Mkdir(workDir, 0o755))

	// The runs tell each other their run names (the directory names of
	// their worktree and job files) through a directory all may write:
	// the factory lets a seat list neither.
	rendezvous := filepath.Join(shared, "rendezvous")
	require.NoError(t, os.Mkdir(rendezvous, 0o777))
	require.NoError(t, os.Chmod(rendezvous, 0o1777))
	engine := isoEngine(t, shared, `WT="$FLEET_JOB_WORKTREE"; JOBS="$(dirname "$(dirname "$FLEET_JOB_PROMPT_FILE")")"; WORK="$(dirname "$JOBS")"
me="$(basename "$WT")"
echo "secret of $FLEET_JOB_ID" > secret.txt
touch `+rendezvous+`/"$me"
for i in $(seq 1 400); do other="$(ls `+rendezvous+` | grep -v "^$me\$" | head -n 1)"; [ -n "$other" ] && break; sleep 0.05; done
{
echo "uid=$(id -u)"
echo "found-other=$([ -n "$other" ] && echo yes || echo no)"
OW="$WT/../$other"; OJ="$JOBS/$other"
sleep 1 # the other run has written its files by now
try() { if (eval "$2") > /dev/null 2>&1; then echo "$1=yes"; else echo "$1=no"; fi; }
try read-other-worktree 'cat "$OW/README.md"'
try read-other-secret 'cat "$OW/secret.txt"'
try list-other-worktree 'ls "$OW"'
try write-other-worktree 'echo x > "$OW/INJECTED.txt"'
try read-other-prompt 'cat "$OJ/prompt.md"'
try write-other-prompt 'echo x >> "$OJ/prompt.md"'
try list-other-job-dir 'ls "$OJ"'
try list-work-dir 'ls "$WORK"'
try list-worktrees 'ls "$WT/.."'
try list-jobs-dir 'ls "$JOBS"'
try write-work-dir 'echo x > "$WORK/INJECTED.txt"'
try write-mirror 'echo x > "$WORK/mirrors/app.git/INJECTED.txt"'
try read-own-prompt 'cat "$FLEET_JOB_PROMPT_FILE"'
try git-in-own-worktree 'git status --porcelain && git log -1'
try write-home 'echo x > "$HOME/note"'
try signal-other 'for p in $(ps -e -o pid=,uid= | awk -v me="$(id -u)" '"'"'$2 != me && $2 >= 47110 && $2 <= 47111 {print $1}'"'"'); do kill -0 $p && exit 0; done; exit 1'
} > reach.txt
sleep 2 # stay while the other run probes
`)
	token := s.Factory("fa", "demo", 2, []string{"os:linux"}, []string{repo.Name})
	f := runFactoryIn(t, s, "fa", token, 2, repo.Base, engine, workDir, "FLEET_ENGINE_UIDS=47110-47111")
	requireCgroups(t, f)

	a := s.Submit("demo", Manifest("Run A", "app", "engine:fake"))
	b := s.Submit("demo", Manifest("Run B", "app", "engine:fake"))
	// Judged by what each engine recorded, on its result branch or, if
	// the job failed (a hostile engine that could write the mirror breaks
	// it), on its checkpoint.
	branch := map[string]string{}
	for _, id := range []string{a, b} {
		Eventually(t, 60*time.Second, "job "+id+" ends", func() bool {
			switch facStage(t, s, "demo", id) {
			case "shipped":
				branch[id] = "aq/job/" + id
			case "failed":
				branch[id] = "aq/wip/" + id
			}
			return branch[id] != ""
		})
	}

	uids := map[string]bool{}
	for _, id := range []string{a, b} {
		reach := repo.Show(t, branch[id], "reach.txt")
		t.Logf("job %s:\n%s", id, reach)
		require.Contains(t, reach, "found-other=yes", "the runs overlapped")
		require.Contains(t, reach, "read-own-prompt=yes")
		require.Contains(t, reach, "write-home=yes")
		require.Contains(t, reach, "git-in-own-worktree=yes", "read-only git works for the engine")
		for _, line := range strings.Split(reach, "\n") {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "uid":
				uids[v] = true
			case "found-other", "read-own-prompt", "write-home", "git-in-own-worktree", "":
			default:
				require.Equal(t, "no", v, "job %s could %s", id, k)
			}
		}
		_, err := facGitTry(repo.Origin, "show", "refs/heads/"+branch[id]+":INJECTED.txt")
		require.Error(t, err, "the other run wrote into job %s's worktree", id)
		require.Equal(t, "aq/job/"+id, branch[id], "job %s shipped", id)
	}
	require.Len(t, uids, 2, "each seat runs as a uid of its own: %v", uids)
	for uid := range uids {
		n, err := strconv.Atoi(uid)
		require.NoError(t, err)
		require.True(t, n >= 47110 && n <= 47111, "uid %d is from FLEET_ENGINE_UIDS", n)
	}
	require.NoFileExists(t, filepath.Join(workDir, "INJECTED.txt"))
	require.NoFileExists(t, filepath.Join(workDir, "mirrors", "app.git", "INJECTED.txt"))
}

// TestIsolationRestartEndsLeftovers: a factory killed with -9 while its
// engine's detached child runs (it survives the kill: only the engine
// itself gets the parent-death signal) and restarted in the same work
// directory ends that child and removes the run's cgroup.
func TestIsolationRestartEndsLeftovers(t *testing.T) {
	t.Parallel()
	s, repo, marker := isoStack(t, "iso-restart-")
	once := filepath.Join(t.TempDir(), "once")

	enginePID := filepath.Join(t.TempDir(), "engine-pid")
	engine := facEngine(t, `if mkdir `+once+` 2> /dev/null; then
  setsid bash -c 'while :; do sleep 0.05; done # `+marker+`' > /dev/null 2>&1 < /dev/null &
  echo $$ > `+enginePID+`
  exec sleep 60
fi
echo later > result.txt`)
	token := s.Factory("fa", "demo", 1, []string{"os:linux"}, []string{repo.Name})
	workDir := t.TempDir()
	first := runFactoryIn(t, s, "fa", token, 1, repo.Base, engine, workDir)
	requireCgroups(t, first)
	s.Submit("demo", Manifest("Leave a child", "app", "engine:fake"))
	Eventually(t, 30*time.Second, "the detached child runs", func() bool { return len(markerPIDs(marker)) > 0 })
	record, err := os.ReadFile(filepath.Join(workDir, "cgroup"))
	require.NoError(t, err, "the factory records its cgroup subtree")
	subtree := strings.TrimSpace(string(record))
	runs := func() []string {
		entries, _ := os.ReadDir(subtree)
		var out []string
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, e.Name())
			}
		}
		return out
	}
	require.NotEmpty(t, runs(), "the run has a cgroup under %s", subtree)

	// The engine leads its process group.
	pgid := waitPIDFile(t, enginePID, "the engine records its pid")

	first.Signal(syscall.SIGKILL)
	first.Wait(10 * time.Second)
	// The kill is over once the engine is gone (its parent-death signal).
	Eventually(t, 10*time.Second, "the engine ends with its factory", func() bool { return len(liveGroup(t, pgid)) == 0 })
	require.NotEmpty(t, markerPIDs(marker), "the detached child survives the factory's kill -9 (so the restart has something to end)")

	second := runFactoryIn(t, s, "fa", token, 1, repo.Base, engine, workDir)
	// The isolation line is logged after the start-up sweep has ended what
	// the previous life left.
	requireCgroups(t, second)
	require.Empty(t, markerPIDs(marker), "the restarted factory ends its previous life's child")
	require.Empty(t, runs(), "no run cgroup of the previous life is left under %s", subtree)
	require.Contains(t, second.Output(), "ended run cgroups an earlier life of this factory left")
}

// TestIsolationKilledFactoryReaperEndsRun: without cgroups, a factory
// killed with -9 has each run's reaper (its parent-death signal) end what
// the run started, a detached child with a cleared environment included,
// before any restart.
func TestIsolationKilledFactoryReaperEndsRun(t *testing.T) {
	t.Parallel()
	s, repo, marker := isoStack(t, "iso-reaper-")

	// The engine's parent is its reaper, which leads a process group of
	// its own.
	reaperPID := filepath.Join(t.TempDir(), "reaper-pid")
	engine := facEngine(t, `env -i "$(command -v setsid)" /bin/bash -c 'while :; do sleep 0.05; done # `+marker+`' > /dev/null 2>&1 < /dev/null &
echo $PPID > `+reaperPID+`
exec sleep 60`)
	f := startFactory(t, s, "fa", "demo", 1, repo, engine, "FLEET_RUN_CGROUPS=off")
	requireIsolation(t, f, "reaper")
	s.Submit("demo", Manifest("Leave a child", "app", "engine:fake"))
	Eventually(t, 30*time.Second, "the detached child runs", func() bool { return len(markerPIDs(marker)) > 0 })
	reaper := waitPIDFile(t, reaperPID, "the engine records its reaper's pid")

	f.Signal(syscall.SIGKILL)
	f.Wait(10 * time.Second)
	// Judged once the reaper has exited, which it does only after ending
	// every descendant: by then none of the run's processes may be left.
	Eventually(t, 30*time.Second, "the reaper exits when its factory dies", func() bool { return len(liveGroup(t, reaper)) == 0 })
	require.Empty(t, markerPIDs(marker), "the reaper ends the run when its factory dies")
}
