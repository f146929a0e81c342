package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
)

// pushAs pushes a commit of another holder of the job to origin's branch
// and returns it.
func (r gitRepo) pushAs(t *testing.T, branch, file string) string {
	t.Helper()
	gitT(t, r.seed, "fetch", "--quiet", "origin")
	gitT(t, r.seed, "checkout", "--quiet", "--detach", "origin/main")
	require.NoError(t, os.WriteFile(filepath.Join(r.seed, file), []byte("the new holder\n"), 0o644))
	gitT(t, r.seed, "add", ".")
	gitT(t, r.seed, "commit", "--quiet", "-m", "the new holder's "+file)
	gitT(t, r.seed, "push", "--quiet", "--force", "origin", "HEAD:refs/heads/"+branch)
	return r.ref(branch)
}

// heldJob is job j1 claimed by this factory, its worktree prepared, as
// runJob has it when the engine runs.
func heldJob(t *testing.T) (*job, *fakeCoord, gitRepo) {
	t.Helper()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	coord := newFakeCoord("j1", "app")
	a := newGitAgent(t, root, repo, coord, "true")
	cl := coord.claim()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	wt, err := a.git.Prepare(ctx, gitwt.Run{Repo: "app", Job: "j1", Epoch: cl.LeaseEpoch})
	require.NoError(t, err)
	dir := t.TempDir()
	return &job{a: a, cl: cl, j: cl.Job, lease: newLease(coord, a.clock, cl, a.clock.Now()), log: slog.New(slog.DiscardHandler),
		ctx: ctx, wt: wt, dir: dir, logPath: filepath.Join(dir, "engine.log")}, coord, repo
}

func (jb *job) write(t *testing.T, name, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(jb.wt.Path, name), []byte(content), 0o644))
}

// TestNoPushAfterRevocation: once an operator's cancel or requeue has
// revoked the lease, the old holder pushes nothing: no checkpoint, no
// result.
func TestNoPushAfterRevocation(t *testing.T) {
	t.Parallel()
	jb, coord, repo := heldJob(t)
	jb.write(t, "a.txt", "before")
	jb.checkpoint(jb.ctx, "test")
	require.Equal(t, "before", repo.show("aq/wip/j1", "a.txt"), "a holder's checkpoint is pushed")
	wip := repo.ref("aq/wip/j1")

	coord.requeue()
	jb.write(t, "b.txt", "after")
	jb.checkpoint(jb.ctx, "test")
	require.Equal(t, wip, repo.ref("aq/wip/j1"), "no checkpoint after the revocation")
	require.Equal(t, OutcomeFenced, jb.deliver())
	require.Empty(t, repo.ref("aq/job/j1"), "no result after the revocation")
}

// TestPushRefusedWhenRefMoved: the lease is revoked and the new holder
// pushes between the old holder's fence check and its push (the window a
// lease check alone cannot close). The old holder's push is refused by its
// lease on the commit it expected, and the new holder's branch stays.
func TestPushRefusedWhenRefMoved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		branch string
		act    func(jb *job)
	}{
		{name: "checkpoint", branch: "aq/wip/j1", act: func(jb *job) { jb.checkpoint(jb.ctx, "test") }},
		{name: "result", branch: "aq/job/j1", act: func(jb *job) {
			require.Equal(t, OutcomeFenced, jb.deliver(), "the old holder stops, fenced")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			jb, coord, repo := heldJob(t)
			jb.write(t, "a.txt", "first")
			jb.checkpoint(jb.ctx, "first")
			require.NotEmpty(t, repo.ref("aq/wip/j1"))

			var theirs string
			var once sync.Once
			coord.onRenew = func(int64) {
				once.Do(func() {
					// Revoked, claimed by another factory, which pushes.
					coord.requeue()
					coord.claim()
					theirs = repo.pushAs(t, tt.branch, "theirs.txt")
				})
			}
			jb.write(t, "b.txt", "late")
			tt.act(jb)
			require.NotEmpty(t, theirs, "the revocation happened inside the fence check")
			require.Equal(t, theirs, repo.ref(tt.branch), "the new holder's %s is kept", tt.branch)
		})
	}
}

// TestHolderPushesOverAStrayPush: a branch moved by someone who does not
// hold the lease (a stale holder's late push) does not stop the holder:
// having confirmed its lease, it takes what is there as seen and pushes.
func TestHolderPushesOverAStrayPush(t *testing.T) {
	t.Parallel()
	jb, coord, repo := heldJob(t)
	repo.pushAs(t, "aq/wip/j1", "stray.txt")
	jb.write(t, "a.txt", "mine")
	jb.checkpoint(jb.ctx, "test")
	require.Equal(t, "mine", repo.show("aq/wip/j1", "a.txt"), "the holder's checkpoint is pushed")

	repo.pushAs(t, "aq/job/j1", "stray.txt")
	require.Equal(t, OutcomeDone, jb.deliver())
	require.Equal(t, "mine", repo.show("aq/job/j1", "a.txt"), "the holder's result is pushed")
	coord.mu.Lock()
	defer coord.mu.Unlock()
	require.Equal(t, "aq/job/j1", coord.job.Checkpoint)
}

// pushWaitsForRepoLock reports a goroutine blocked in a push, waiting for
// its repo's lock.
func pushWaitsForRepoLock() bool {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "gitwt.(*Manager).lock(") && strings.Contains(g, "gitwt.(*Worktree).Push") {
			return true
		}
	}
	return false
}

// TestPushFencedOnceItHoldsTheRepoLock: the lease check every push needs
// right before it is made once the push holds its repo's lock, so a push
// that waited for the lock (another run's fetch or push, a GC) while its
// lease was revoked pushes nothing. Before, the check came before the
// wait: the push went out after the revocation, and a wait longer than
// half a lease made a good result's push one that outlived its guard (the
// result quarantined, the job left to its lease's expiry).
func TestPushFencedOnceItHoldsTheRepoLock(t *testing.T) {
	t.Parallel()
	jb, coord, repo := heldJob(t)
	jb.write(t, "a.txt", "first")
	jb.checkpoint(jb.ctx, "first")
	wip := repo.ref("aq/wip/j1")
	require.NotEmpty(t, wip)

	// A GC holds the repo's lock while it asks the coordinator about
	// another job's local branch.
	mirror := jb.a.git.MirrorPath("app")
	gitT(t, mirror, "branch", "aq/quarantine/j9-e1", gitT(t, mirror, "commit-tree", "-m", "j9", "refs/remotes/origin/main^{tree}"))
	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var bg sync.WaitGroup
	defer bg.Wait()
	bg.Go(func() {
		_, _ = jb.a.git.GCLocal(context.Background(), func(_, job string) bool { return job == "j1" },
			func(context.Context, string) (bool, error) {
				once.Do(func() { close(asked) })
				<-release
				return false, nil
			})
	})
	<-asked
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	jb.write(t, "b.txt", "late")
	bg.Go(func() { jb.checkpoint(jb.ctx, "periodic") })
	require.Eventually(t, pushWaitsForRepoLock, 30*time.Second, 5*time.Millisecond, "the checkpoint's push waits for the repo lock")
	coord.requeue() // an operator's requeue revokes the lease meanwhile
	released = true
	close(release)
	bg.Wait()
	require.Equal(t, wip, repo.ref("aq/wip/j1"), "a push whose lease was revoked while it waited for the repo lock went out")
}
