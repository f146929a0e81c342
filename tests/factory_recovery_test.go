package tests

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFactoryCrashResume: a factory killed with -9 mid-job loses its lease
// to the reaper; another factory claims the requeued job, resumes from
// aq/wip/<id>, and the shipped branch holds the pre-crash checkpoint.
func TestFactoryCrashResume(t *testing.T) {
	t.Parallel()
	s := startStack(t, "FLEET_LEASE_TTL=3s", "FLEET_REAPER_SCHEDULE=* * * * * *")
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")

	first := facEngine(t, `echo "wip from $FLEET_FACTORY_ID" > wip.txt
exec sleep 60`)
	a := startFactory(t, s, "fa", "demo", 1, repo, first, "FLEET_CHECKPOINT_INTERVAL=300ms")
	id := s.Submit("demo", Manifest("Survive a crash", "app", "engine:fake"))

	Eventually(t, 30*time.Second, "checkpoint on origin and on the job", func() bool {
		return repo.Ref(t, "aq/wip/"+id) != "" && s.Job("demo", id)["checkpoint"] == "aq/wip/"+id
	})
	wip := repo.Ref(t, "aq/wip/"+id)
	a.Signal(syscall.SIGKILL)
	a.Wait(10 * time.Second)

	job := facWaitStage(t, s, "demo", id, "queued", 20*time.Second)
	require.Equal(t, "aq/wip/"+id, job["checkpoint"], "the reaper keeps the checkpoint")

	second := facEngine(t, `test "$FLEET_JOB_RESUMED" = true
test -f wip.txt
echo "finished by $FLEET_FACTORY_ID" > result.txt`)
	startFactory(t, s, "fb", "demo", 1, repo, second)
	facWaitStage(t, s, "demo", id, "shipped", 30*time.Second)

	require.True(t, repo.IsAncestor(t, wip, "aq/job/"+id), "the result contains the pre-crash checkpoint commit")
	require.Equal(t, "wip from fa", repo.Show(t, "aq/job/"+id, "wip.txt"))
	require.Equal(t, "finished by fb", repo.Show(t, "aq/job/"+id, "result.txt"))
}

// TestFactoryZombieFenced: a factory frozen (SIGSTOP) past its lease is
// fenced when it wakes: its engine's late work never reaches aq/job/<id>
// or aq/wip/<id>, the result another factory shipped stays as it was, and
// the zombie quarantines its work on a local branch.
func TestFactoryZombieFenced(t *testing.T) {
	t.Parallel()
	s := startStack(t, "FLEET_LEASE_TTL=3s", "FLEET_REAPER_SCHEDULE=* * * * * *")
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")

	// The engine runs in a process group of its own, so it goes on while
	// its factory is frozen and finishes with work the zombie would ship.
	slow := facEngine(t, `echo early > early.txt
sleep 4
echo "late from $FLEET_FACTORY_ID" > late.txt`)
	a := startFactory(t, s, "fa", "demo", 1, repo, slow, "FLEET_CHECKPOINT_INTERVAL=300ms")
	id := s.Submit("demo", Manifest("Zombie", "app", "engine:fake"))
	Eventually(t, 30*time.Second, "first checkpoint", func() bool { return repo.Ref(t, "aq/wip/"+id) != "" })

	a.Signal(syscall.SIGSTOP)
	facWaitStage(t, s, "demo", id, "queued", 20*time.Second)

	fast := facEngine(t, `echo "done by $FLEET_FACTORY_ID" > result.txt`)
	startFactory(t, s, "fb", "demo", 1, repo, fast)
	facWaitStage(t, s, "demo", id, "shipped", 30*time.Second)
	result, wip := repo.Ref(t, "aq/job/"+id), repo.Ref(t, "aq/wip/"+id)
	time.Sleep(5 * time.Second) // the zombie's engine is done by now

	a.Signal(syscall.SIGCONT)
	Eventually(t, 20*time.Second, "zombie quarantines", func() bool {
		return strings.Contains(a.Output(), "work quarantined")
	})
	time.Sleep(time.Second)

	require.Equal(t, result, repo.Ref(t, "aq/job/"+id), "the zombie never pushes the result branch")
	require.Equal(t, wip, repo.Ref(t, "aq/wip/"+id), "the zombie never pushes a checkpoint")
	_, err := facGitTry(repo.Origin, "show", "refs/heads/aq/job/"+id+":late.txt")
	require.Error(t, err, "the zombie's late work is not in the result")
	require.Equal(t, "done by fb", repo.Show(t, "aq/job/"+id, "result.txt"))
	require.Equal(t, "shipped", facStage(t, s, "demo", id))
	require.Contains(t, a.Output(), "fenced")
	// Kept aside on a local branch, never pushed; GC deletes it once the
	// job is over, which it already is.
	require.Contains(t, a.Output(), `"localBranch":"aq/quarantine/`+id+`-e1"`)
	for _, b := range a.localBranches(t) {
		require.NotContains(t, b, id, "nothing of the job is left behind locally")
	}
}
