package gitwt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// holdRepoLock has a GC pass hold app's repo lock (another job's git
// operation: it asks the coordinator about a local branch) until the
// returned release is called.
func (f *fixture) holdRepoLock(keep string) (release func()) {
	f.t.Helper()
	mirror := f.m.MirrorPath("app")
	run(f.t, mirror, "branch", "aq/quarantine/j9-e1", run(f.t, mirror, "commit-tree", "-m", "j9", "refs/remotes/origin/main^{tree}"))
	asked, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = f.m.GCLocal(context.Background(), func(_, job string) bool { return job == keep },
			func(context.Context, string) (bool, error) {
				once.Do(func() { close(asked) })
				<-gate
				return false, nil
			})
	}()
	<-asked
	var released sync.Once
	release = func() {
		released.Do(func() { close(gate); <-done })
	}
	f.t.Cleanup(release)
	return release
}

// TestLockWaitHonoursTheContext: an operation whose context has ended
// does not wait for the repo lock another operation holds (another job's
// fetch, push or a GC, however long it takes): it returns the context's
// error at once, having done nothing. Before, the wait ignored the
// context: a cancelled, preempted or shut-down job waited for the other
// operation to finish.
func TestLockWaitHonoursTheContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w := f.prepare("j1", "", "a.txt")
	require.NoError(t, w.Push(context.Background(), WIPBranch("j1")))
	wip := f.ref("aq/wip/j1")
	release := f.holdRepoLock("j1")

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	ops := []struct {
		name string
		op   func(ctx context.Context) error
	}{
		{"prepare", func(ctx context.Context) error {
			_, err := f.m.Prepare(ctx, Run{Repo: "app", Job: "j2", Epoch: 1})
			return err
		}},
		{"delete remote", func(ctx context.Context) error { return w.DeleteRemote(ctx, WIPBranch("j1"), wip) }},
		{"remove", func(ctx context.Context) error { return w.Remove(ctx) }},
		{"remote jobs", func(ctx context.Context) error {
			_, err := f.m.RemoteJobs(ctx, "app")
			return err
		}},
		{"gc remote", func(ctx context.Context) error {
			_, err := f.m.GCRemote(ctx, "app", []string{"j1"}, never)
			return err
		}},
		{"gc local", func(ctx context.Context) error {
			_, err := f.m.GCLocal(ctx, never, nil)
			return err
		}},
		{"maintain", func(ctx context.Context) error { return f.m.Maintain(ctx) }},
	}
	for _, o := range ops {
		got := make(chan error, 1)
		go func() { got <- o.op(ended) }()
		select {
		case err := <-got:
			require.ErrorIs(t, err, context.Canceled, o.name)
		case <-time.After(30 * time.Second): // a watchdog: it returns at once
			release()
			t.Fatalf("%s: an operation whose context ended still waits for the repo lock another one holds", o.name)
		}
	}
	release()
	require.DirExists(t, w.Path, "nothing was done")
	require.Equal(t, wip, f.ref("aq/wip/j1"), "nothing was done")
	require.NoDirExists(t, f.m.WorktreePath("app", "j2", 1), "nothing was done")

	// The lock is free for the next holder.
	require.NoError(t, w.Push(context.Background(), WIPBranch("j1")))
	f.prepare("j2", "")
}
