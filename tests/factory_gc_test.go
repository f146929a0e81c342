package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFactorySameRepoConcurrent: two jobs on one repo run at the same time
// on one two-seat factory, each in its own worktree: the engine waits until
// both are running, and each result holds only its own job's work.
func TestFactorySameRepoConcurrent(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	sync := t.TempDir()
	eng := facEngine(t, `touch "$TEST_SYNC/$FLEET_JOB_ID"
for i in $(seq 200); do
  [ "$(ls "$TEST_SYNC" | wc -l)" -ge 2 ] && break
  sleep 0.05
done
[ "$(ls "$TEST_SYNC" | wc -l)" -ge 2 ] || { echo "ran alone" >&2; exit 7; }
echo "$FLEET_JOB_ID" > shared.txt
echo "$FLEET_JOB_ID" > "own-$FLEET_JOB_ID.txt"`)
	startFactory(t, s, "fa", "demo", 2, repo, eng, "TEST_SYNC="+sync)

	a := s.Submit("demo", Manifest("One", "app", "engine:fake"))
	b := s.Submit("demo", Manifest("Two", "app", "engine:fake"))
	for _, id := range []string{a, b} {
		facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
	}
	for _, id := range []string{a, b} {
		require.Equal(t, id, repo.Show(t, "aq/job/"+id, "shared.txt"))
		files := facGit(t, repo.Origin, "ls-tree", "--name-only", "refs/heads/aq/job/"+id)
		require.ElementsMatch(t, []string{"README.md", "shared.txt", "own-" + id + ".txt"}, strings.Fields(files))
	}
}

// TestFactoryGC: 50 jobs through one factory while a slow job stays in
// flight. GC after every job never touches the in-flight worktree; at the
// end no worktree or local branch is left; the factory's origin sweep
// deletes the result branch that was merged and keeps every unmerged one.
func TestFactoryGC(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	gate := filepath.Join(t.TempDir(), "go")
	// The slow run waits for the gate however long the 50 take: a bound
	// here made it ship on its own on a loaded machine (the 50 took over
	// its 60 s), and the test then saw "shipped" where it holds "building".
	// If the test fails first, stopping the factory ends the run.
	eng := facEngine(t, `if [ "$FLEET_JOB_TITLE" = slow ]; then
  echo started > slow.txt
  until [ -f "$TEST_GATE" ]; do sleep 0.1; done
fi
echo "$FLEET_JOB_ID" > "f-$FLEET_JOB_ID.txt"`)
	f := startFactory(t, s, "fa", "demo", 4, repo, eng, "TEST_GATE="+gate, "FLEET_GC_INTERVAL=1s")

	slow := s.Submit("demo", Manifest("slow", "app", "engine:fake"))
	// The run's worktree is keyed by its lease epoch.
	var slowTree string
	Eventually(t, 30*time.Second, "slow job running", func() bool {
		trees, _ := filepath.Glob(filepath.Join(f.WorkDir, "worktrees", "app", slow+"-e*", "slow.txt"))
		if len(trees) != 1 {
			return false
		}
		slowTree = filepath.Dir(trees[0])
		return true
	})

	ids := make([]string, 50)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() { ids[i] = s.Submit("demo", Manifest(fmt.Sprintf("job %d", i), "app", "engine:fake")) })
	}
	wg.Wait()
	for _, id := range ids {
		facWaitStage(t, s, "demo", id, "shipped", 120*time.Second)
	}
	// GC ran after each of the 50; the slow job's worktree survived all.
	require.Equal(t, "building", facStage(t, s, "demo", slow))
	require.FileExists(t, filepath.Join(slowTree, "slow.txt"))

	// Merge one result into main on origin; the sweep may delete it, and
	// only it.
	merged := ids[0]
	facGit(t, repo.Origin, "update-ref", "refs/heads/main", repo.Ref(t, "aq/job/"+merged))
	Eventually(t, 30*time.Second, "merged result branch deleted by the sweep", func() bool {
		return repo.Ref(t, "aq/job/"+merged) == ""
	})
	time.Sleep(2 * time.Second) // a couple more sweeps
	for _, id := range ids[1:] {
		require.NotEmpty(t, repo.Ref(t, "aq/job/"+id), "unmerged result branch of %s kept", id)
	}

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	facWaitStage(t, s, "demo", slow, "shipped", 30*time.Second)
	require.Equal(t, "started", repo.Show(t, "aq/job/"+slow, "slow.txt"))

	Eventually(t, 10*time.Second, "no worktree or local branch left", func() bool {
		dirs, registered := f.worktrees(t)
		return len(dirs) == 0 && len(registered) == 0 && len(f.localBranches(t)) == 0
	})
}

// TestFactoryOnce: with --once the factory takes one job, runs it and
// exits 0, leaving the next job queued; with nothing queued it exits 0
// when the receive timeout runs out.
func TestFactoryOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `echo once > once.txt`)
	token := s.Factory("pool", "demo", 1, []string{"os:linux", "engine:fake"}, []string{"app"})

	first := s.Submit("demo", Manifest("First", "app", "engine:fake"))
	second := s.Submit("demo", Manifest("Second", "app", "engine:fake"))
	f := runFactory(t, s, "pool", token, 1, repo.Base, eng, "--once", "FLEET_ONCE_WAIT=10s")
	require.Equal(t, 0, f.Wait(60*time.Second))
	stages := []string{facStage(t, s, "demo", first), facStage(t, s, "demo", second)}
	require.ElementsMatch(t, []string{"shipped", "queued"}, stages)

	idle := newFacRepo(t, "idle")
	s.Product("other", "idle")
	tok2 := s.Factory("idle-pool", "other", 1, []string{"os:linux", "engine:fake"}, []string{"idle"})
	start := time.Now()
	g := runFactory(t, s, "idle-pool", tok2, 1, idle.Base, eng, "--once", "FLEET_ONCE_WAIT=1s")
	require.Equal(t, 0, g.Wait(30*time.Second))
	require.Less(t, time.Since(start), 20*time.Second)
}
