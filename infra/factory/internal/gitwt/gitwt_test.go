package gitwt

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fixture is an origin (bare, one commit on main), a clone of it under a
// repo base, and a Manager over a fresh work dir.
type fixture struct {
	t      *testing.T
	origin string
	seed   string // a clone for pushing to origin as "someone else"
	m      *Manager
}

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, origin: filepath.Join(root, "app.git"), seed: filepath.Join(root, "seed")}
	run(t, root, "init", "--quiet", "--bare", "--initial-branch=main", f.origin)
	run(t, root, "clone", "--quiet", f.origin, f.seed)
	run(t, f.seed, "checkout", "--quiet", "-b", "main")
	f.write(f.seed, "README.md", "hello\n")
	run(t, f.seed, "add", ".")
	run(t, f.seed, "commit", "--quiet", "-m", "initial")
	run(t, f.seed, "push", "--quiet", "origin", "main")
	base := filepath.Join(root, "base")
	require.NoError(t, os.MkdirAll(base, 0o755))
	run(t, base, "clone", "--quiet", f.origin, "app")
	m, err := New(Options{WorkDir: filepath.Join(root, "work"), RepoBase: base, GitName: "factory", GitEmail: "f@example.invalid"})
	require.NoError(t, err)
	f.m = m
	return f
}

func (f *fixture) write(dir, name, content string) {
	f.t.Helper()
	require.NoError(f.t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
}

// ref is origin's branch, "" when missing.
func (f *fixture) ref(branch string) string {
	out, err := exec.Command("git", "-C", f.origin, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func (f *fixture) localBranches() []string {
	out := run(f.t, f.m.MirrorPath("app"), "for-each-ref", "--format=%(refname:short)", "refs/heads/aq/")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// prepare checks out job with one committed file and returns the worktree.
func (f *fixture) prepare(job, checkpoint string, files ...string) *Worktree {
	f.t.Helper()
	w, err := f.m.Prepare(context.Background(), Run{Repo: "app", Job: job, Epoch: 1, Checkpoint: checkpoint})
	require.NoError(f.t, err)
	for _, name := range files {
		f.write(w.Path, name, job+"\n")
	}
	if len(files) > 0 {
		changed, err := w.Commit(context.Background(), "work of "+job)
		require.NoError(f.t, err)
		require.True(f.t, changed)
	}
	return w
}

func never(string, string) bool { return false }

func TestPrepareCommitPushResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	w := f.prepare("j1", "")
	require.Equal(t, "aq/run/j1-e1", w.Branch)
	require.Equal(t, "main", w.DefaultBranch)
	require.Equal(t, f.ref("main"), w.Base)
	require.False(t, w.Resumed)
	require.FileExists(t, filepath.Join(w.Path, "README.md"))

	changed, err := w.Commit(ctx, "nothing")
	require.NoError(t, err)
	require.False(t, changed, "no change, no commit")

	f.write(w.Path, "wip.txt", "half\n")
	changed, err = w.Commit(ctx, "checkpoint")
	require.NoError(t, err)
	require.True(t, changed)
	head, err := w.Head(ctx)
	require.NoError(t, err)
	require.NoError(t, w.Push(ctx, WIPBranch("j1")))
	require.Equal(t, head, f.ref("aq/wip/j1"))
	require.NoError(t, w.Remove(ctx))
	require.NoDirExists(t, w.Path)
	require.Empty(t, f.localBranches(), "pushed work: the local branch goes with the worktree")

	// Another attempt resumes from the checkpoint.
	r := f.prepare("j1", "aq/wip/j1")
	require.True(t, r.Resumed)
	require.Equal(t, head, r.Base)
	require.FileExists(t, filepath.Join(r.Path, "wip.txt"))

	// A checkpoint that is not on origin falls back to the default branch.
	n := f.prepare("j2", "aq/wip/j2")
	require.False(t, n.Resumed)
	require.Equal(t, f.ref("main"), n.Base)
}

// TestPrepareReplacesLeftovers: a worktree an earlier run left behind (a
// crash) is replaced, uncommitted files and all.
func TestPrepareReplacesLeftovers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w := f.prepare("j1", "", "old.txt")
	f.write(w.Path, "dirty.txt", "x")
	again := f.prepare("j1", "")
	require.Equal(t, w.Path, again.Path)
	require.NoFileExists(t, filepath.Join(again.Path, "old.txt"))
	require.NoFileExists(t, filepath.Join(again.Path, "dirty.txt"))
}

// TestSameRepoSideBySide: jobs of one repo get separate worktrees, prepared
// and pushed concurrently, and never see each other's files.
func TestSameRepoSideBySide(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	jobs := []string{"j1", "j2", "j3", "j4"}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, job := range jobs {
		wg.Go(func() {
			w, err := f.m.Prepare(ctx, Run{Repo: "app", Job: job, Epoch: 1})
			if err == nil {
				err = os.WriteFile(filepath.Join(w.Path, job+".txt"), []byte(job), 0o644)
			}
			if err == nil {
				_, err = w.Commit(ctx, job)
			}
			if err == nil {
				err = w.Push(ctx, JobBranch(job))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for _, job := range jobs {
		files := strings.Fields(run(t, f.origin, "ls-tree", "--name-only", "refs/heads/aq/job/"+job))
		require.ElementsMatch(t, []string{"README.md", job + ".txt"}, files)
	}
}

func TestRemoveKeepsUnpushedWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w := f.prepare("j1", "", "a.txt")
	require.NoError(t, w.Remove(context.Background()))
	require.NoDirExists(t, w.Path)
	require.Equal(t, []string{"aq/run/j1-e1"}, f.localBranches(), "unpushed work stays on its branch")
}

// TestQuarantine: a fenced run keeps its work on a local quarantine branch
// and removes its own worktree and branch, and nothing of a newer run of
// the same job working beside it.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	w, err := f.m.Prepare(ctx, Run{Repo: "app", Job: "j1", Epoch: 3})
	require.NoError(t, err)
	f.write(w.Path, "late.txt", "zombie")
	newer, err := f.m.Prepare(ctx, Run{Repo: "app", Job: "j1", Epoch: 5})
	require.NoError(t, err)
	require.NotEqual(t, w.Path, newer.Path)
	require.DirExists(t, w.Path, "preparing a newer run leaves the old one's files alone")
	f.write(newer.Path, "new.txt", "valid")

	branch, err := w.Quarantine(ctx)
	require.NoError(t, err)
	require.Equal(t, "aq/quarantine/j1-e3", branch)
	require.ElementsMatch(t, []string{"aq/quarantine/j1-e3", "aq/run/j1-e5"}, f.localBranches())
	require.NoDirExists(t, w.Path)
	require.Empty(t, f.ref("aq/job/j1"), "never pushed")
	require.Equal(t, "zombie", run(t, f.m.MirrorPath("app"), "show", "aq/quarantine/j1-e3:late.txt"))

	require.FileExists(t, filepath.Join(newer.Path, "new.txt"), "the newer run's worktree is untouched")
	changed, err := newer.Commit(ctx, "valid work")
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, newer.Push(ctx, JobBranch("j1")))
	require.Equal(t, "valid", run(t, f.origin, "show", "refs/heads/aq/job/j1:new.txt"))
	_, err = os.Stat(filepath.Join(newer.Path, "late.txt"))
	require.True(t, os.IsNotExist(err), "the old run's work never lands in the newer run")
}

func TestJobOfBranch(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"aq/job/j1": "j1", "aq/wip/j-2": "j-2", "aq/quarantine/j1-e3": "j1", "aq/quarantine/a-b-e12": "a-b",
		"aq/run/j1-e4": "j1", "aq/run/a-e5-e6": "a-e5", "aq/run/j1": "", "aq/run/-e1": "",
		"aq/quarantine/j1": "", "main": "", "aq/job/": "", "aq/job/../x": "", "aq/other/j1": "",
	}
	for branch, want := range tests {
		got, ok := JobOfBranch(branch)
		require.Equal(t, want != "", ok, branch)
		if ok {
			require.Equal(t, want, got, branch)
		}
	}
}

// TestGCLocalRules: worktrees of jobs in flight are never touched; others
// go, orphan directories too; a local branch goes when its work is on
// origin or its job is over, and stays otherwise.
func TestGCLocalRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	live := f.prepare("live", "", "live.txt")    // in flight, unpushed
	stale := f.prepare("stale", "", "stale.txt") // crashed run, pushed
	require.NoError(t, stale.Push(ctx, WIPBranch("stale")))
	f.prepare("unpushed-open", "", "x.txt")        // crashed, unpushed, job still open
	f.prepare("unpushed-over", "", "y.txt")        // crashed, unpushed, job over
	f.prepare("unknown", "", "z.txt")              // crashed, unpushed, coordinator unreachable
	orphan := f.m.WorktreePath("app", "orphan", 1) // a directory git never registered
	require.NoError(t, os.MkdirAll(orphan, 0o755))

	inFlight := func(repo, job string) bool { return repo == "app" && job == "live" }
	asked := map[string]bool{}
	terminal := func(_ context.Context, job string) (bool, error) {
		asked[job] = true
		switch job {
		case "unpushed-over":
			return true, nil
		case "unknown":
			return false, errors.New("coordinator unreachable")
		}
		return false, nil
	}
	rep, err := f.m.GCLocal(ctx, inFlight, terminal)
	require.NoError(t, err)

	require.DirExists(t, live.Path, "in-flight worktree kept")
	require.FileExists(t, filepath.Join(live.Path, "live.txt"))
	for _, job := range []string{"stale", "unpushed-open", "unpushed-over", "unknown", "orphan"} {
		require.NoDirExists(t, f.m.WorktreePath("app", job, 1))
	}
	require.Len(t, rep.RemovedWorktrees, 5)
	require.ElementsMatch(t, []string{"aq/run/live-e1", "aq/run/unpushed-open-e1", "aq/run/unknown-e1"}, f.localBranches())
	require.ElementsMatch(t, []string{"app/aq/run/stale-e1", "app/aq/run/unpushed-over-e1"}, rep.DeletedLocal)
	require.Len(t, rep.Kept, 2)
	require.False(t, asked["stale"], "work on origin needs no question")
	require.False(t, asked["live"], "in-flight jobs are not even looked at")

	// Idempotent: a second pass changes nothing.
	rep, err = f.m.GCLocal(ctx, inFlight, terminal)
	require.NoError(t, err)
	require.Empty(t, rep.RemovedWorktrees)
	require.Empty(t, rep.DeletedLocal)
	require.DirExists(t, live.Path)
}

// TestGCRemoteRules: on origin, GC deletes a terminal job's result branch
// only when it is merged into the default branch, and its checkpoint only
// when the checkpoint is contained in the result or the default branch.
func TestGCRemoteRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	push := func(job string, wip, result bool, extraWIP bool) {
		w := f.prepare(job, "", job+".txt")
		if wip {
			require.NoError(t, w.Push(ctx, WIPBranch(job)))
		}
		if extraWIP {
			f.write(w.Path, "more.txt", "unshipped work")
			_, err := w.Commit(ctx, "more")
			require.NoError(t, err)
			require.NoError(t, w.Push(ctx, WIPBranch(job)))
		}
		if result {
			require.NoError(t, w.Push(ctx, JobBranch(job)))
		}
		require.NoError(t, w.Remove(ctx))
	}
	push("merged", true, true, false)   // result merged into main; wip inside it
	push("open", true, true, false)     // result not merged; wip inside the result
	push("failed", true, false, true)   // no result; wip holds unique work
	push("inflight", true, true, false) // listed, but running here
	push("unlisted", true, true, false) // not terminal: not in the request
	run(t, f.seed, "fetch", "--quiet", "origin")
	run(t, f.seed, "merge", "--quiet", "--ff-only", "origin/aq/job/merged")
	run(t, f.seed, "push", "--quiet", "origin", "main")

	inFlight := func(_, job string) bool { return job == "inflight" }
	rep, err := f.m.GCRemote(ctx, "app", []string{"merged", "open", "failed", "inflight", "../evil"}, inFlight)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"app/aq/job/merged", "app/aq/wip/merged", "app/aq/wip/open"}, rep.DeletedRemote)
	require.Empty(t, f.ref("aq/job/merged"))
	require.Empty(t, f.ref("aq/wip/merged"))
	require.NotEmpty(t, f.ref("aq/job/open"), "unmerged result kept")
	require.Empty(t, f.ref("aq/wip/open"), "its checkpoint is inside the result")
	require.NotEmpty(t, f.ref("aq/wip/failed"), "a checkpoint with work found nowhere else is kept")
	require.NotEmpty(t, f.ref("aq/job/inflight"))
	require.NotEmpty(t, f.ref("aq/wip/inflight"))
	require.NotEmpty(t, f.ref("aq/job/unlisted"))
	require.Len(t, rep.Kept, 2)

	ids, err := f.m.RemoteJobs(ctx, "app")
	require.NoError(t, err)
	require.Equal(t, []string{"failed", "inflight", "open", "unlisted"}, ids)

	// Idempotent.
	rep, err = f.m.GCRemote(ctx, "app", []string{"merged", "open", "failed"}, never)
	require.NoError(t, err)
	require.Empty(t, rep.DeletedRemote)
}

// TestDeleteRemoteLease: a branch that moved since it was examined is not
// deleted.
func TestDeleteRemoteLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	w := f.prepare("j1", "", "a.txt")
	require.NoError(t, w.Push(ctx, JobBranch("j1")))
	old := f.ref("aq/job/j1")
	// Someone else moves the branch on origin.
	run(t, f.seed, "fetch", "--quiet", "origin")
	run(t, f.seed, "checkout", "--quiet", "-b", "other", "origin/aq/job/j1")
	f.write(f.seed, "b.txt", "b")
	run(t, f.seed, "add", ".")
	run(t, f.seed, "commit", "--quiet", "-m", "b")
	run(t, f.seed, "push", "--quiet", "origin", "HEAD:refs/heads/aq/job/j1")
	moved := f.ref("aq/job/j1")
	require.NotEqual(t, old, moved)

	require.Error(t, w.DeleteRemote(ctx, JobBranch("j1"), old))
	require.Equal(t, moved, f.ref("aq/job/j1"))
	require.NoError(t, w.DeleteRemote(ctx, JobBranch("j1"), moved))
	require.Empty(t, f.ref("aq/job/j1"))
}

func TestEnsureClonesAndOrigin(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	base := t.TempDir()
	m, err := New(Options{WorkDir: t.TempDir(), RepoBase: base, RepoURLs: map[string]string{"app": f.origin}})
	require.NoError(t, err)
	cloned, err := m.EnsureClones(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"app"}, cloned)
	cloned, err = m.EnsureClones(ctx)
	require.NoError(t, err)
	require.Empty(t, cloned, "already there")
	w, err := m.Prepare(ctx, Run{Repo: "app", Job: "j1", Epoch: 1})
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(w.Path, "README.md"))

	_, err = m.Prepare(ctx, Run{Repo: "nope", Job: "j1", Epoch: 1})
	require.ErrorContains(t, err, "no configured URL")
	_, err = m.Prepare(ctx, Run{Repo: "app", Job: "../j", Epoch: 1})
	require.Error(t, err)
}

// pushAs pushes a commit of someone else's (another holder of the job) to
// origin's branch and returns it.
func (f *fixture) pushAs(branch, file string) string {
	f.t.Helper()
	run(f.t, f.seed, "fetch", "--quiet", "origin")
	run(f.t, f.seed, "checkout", "--quiet", "--detach", "origin/main")
	f.write(f.seed, file, "someone else\n")
	run(f.t, f.seed, "add", ".")
	run(f.t, f.seed, "commit", "--quiet", "-m", "someone else's "+file)
	run(f.t, f.seed, "push", "--quiet", "--force", "origin", "HEAD:refs/heads/"+branch)
	return f.ref(branch)
}

// TestPushLease: a run's push replaces only what the run has seen on
// origin; a branch someone else pushed meanwhile (a newer holder's
// checkpoint or result) is refused with ErrRefMoved and left as it is,
// whether it existed before or not.
func TestPushLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	w := f.prepare("j1", "", "a.txt")
	require.NoError(t, w.Push(ctx, WIPBranch("j1")))
	mine := f.ref("aq/wip/j1")

	theirs := f.pushAs("aq/wip/j1", "theirs.txt")
	f.write(w.Path, "b.txt", "more")
	_, err := w.Commit(ctx, "more")
	require.NoError(t, err)
	err = w.Push(ctx, WIPBranch("j1"))
	require.ErrorIs(t, err, ErrRefMoved)
	require.Equal(t, theirs, f.ref("aq/wip/j1"), "the other holder's checkpoint is kept")
	require.NotEqual(t, mine, theirs)

	// A branch that did not exist when the run started and that someone
	// else created meanwhile.
	result := f.pushAs("aq/job/j1", "result.txt")
	require.ErrorIs(t, w.Push(ctx, JobBranch("j1")), ErrRefMoved)
	require.Equal(t, result, f.ref("aq/job/j1"))

	// A holder that has confirmed its lease takes what is there as seen.
	seen, err := w.Refresh(ctx, WIPBranch("j1"))
	require.NoError(t, err)
	require.Equal(t, theirs, seen)
	require.NoError(t, w.Push(ctx, WIPBranch("j1")))
	head, err := w.Head(ctx)
	require.NoError(t, err)
	require.Equal(t, head, f.ref("aq/wip/j1"))
}

// TestFactoryGitRunsNothingAnEnginePlanted: an engine (arbitrary code with
// the worktree's files, and, as the factory's own user, its mirror) plants
// hooks, a hooks path, core.fsmonitor and a redirected .git file. The
// factory's own git commands (commit, push, quarantine) run none of them
// and still work on the run's real branch.
func TestFactoryGitRunsNothingAnEnginePlanted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	w := f.prepare("j1", "")
	mirror := f.m.MirrorPath("app")
	marks := t.TempDir()
	evil := func(name string) string {
		p := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\ntouch "+filepath.Join(marks, name)+"\nexit 0\n"), 0o755))
		return p
	}
	// Hooks in the mirror (shared by every worktree) and a hooks path.
	hooks := filepath.Join(mirror, "hooks")
	require.NoError(t, os.MkdirAll(hooks, 0o755))
	for _, h := range []string{"post-commit", "reference-transaction", "pre-push", "post-checkout", "pre-commit"} {
		data, err := os.ReadFile(evil(h))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(hooks, h), data, 0o755))
	}
	hooksPath := t.TempDir()
	data, err := os.ReadFile(evil("hookspath-post-commit"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(hooksPath, "post-commit"), data, 0o755))
	run(t, mirror, "config", "core.hooksPath", hooksPath)
	run(t, mirror, "config", "core.fsmonitor", evil("fsmonitor"))
	// Settings engines make as a matter of course do not stop the factory.
	run(t, mirror, "config", "user.email", "engine@example.invalid")
	run(t, mirror, "config", "branch.aq/run/j1-e1.remote", "origin")
	// A .git file pointing at a repository the engine made.
	decoy := filepath.Join(t.TempDir(), "decoy")
	run(t, t.TempDir(), "init", "--quiet", decoy)
	run(t, decoy, "config", "core.fsmonitor", evil("decoy-fsmonitor"))
	run(t, decoy, "config", "core.hooksPath", filepath.Dir(evil("post-commit")))
	f.write(w.Path, ".git", "gitdir: "+filepath.Join(decoy, ".git")+"\n")

	f.write(w.Path, "work.txt", "done\n")
	changed, err := w.Commit(ctx, "work")
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, w.Push(ctx, JobBranch("j1")))
	require.Equal(t, "done", run(t, f.origin, "show", "refs/heads/aq/job/j1:work.txt"), "committed and pushed on the run's real branch")
	f.write(w.Path, "late.txt", "x\n")
	_, err = w.Quarantine(ctx)
	require.NoError(t, err)

	planted, err := os.ReadDir(marks)
	require.NoError(t, err)
	var ran []string
	for _, e := range planted {
		ran = append(ran, e.Name())
	}
	require.Empty(t, ran, "programs an engine planted ran in the factory's git commands")
}

// TestFactoryGitRefusesATamperedMirror: configuration that makes git run a
// program (a clean filter, a receive-pack command, an ssh command, an
// include) is written by nobody but an engine running as the factory's
// user; the factory's commands refuse to run in such a mirror rather than
// run the program with the factory's environment.
func TestFactoryGitRefusesATamperedMirror(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, value string
		act              func(w *Worktree) error
	}{
		{name: "clean filter on commit", key: "filter.evil.clean", value: "touch @MARK; cat", act: func(w *Worktree) error {
			_, err := w.Commit(context.Background(), "work")
			return err
		}},
		{name: "receive-pack on push", key: "remote.origin.receivepack", value: "touch @MARK; git-receive-pack", act: func(w *Worktree) error {
			return w.Push(context.Background(), JobBranch("j1"))
		}},
		{name: "ssh command on fetch", key: "core.sshCommand", value: "touch @MARK; ssh", act: func(w *Worktree) error {
			_, err := w.m.Prepare(context.Background(), Run{Repo: "app", Job: "j2", Epoch: 1})
			return err
		}},
		{name: "an include", key: "include.path", value: "@MARK", act: func(w *Worktree) error {
			return w.Push(context.Background(), WIPBranch("j1"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			w := f.prepare("j1", "")
			mark := filepath.Join(t.TempDir(), "ran")
			f.write(w.Path, ".gitattributes", "* filter=evil\n")
			f.write(w.Path, "work.txt", "done\n")
			run(t, f.m.MirrorPath("app"), "config", tt.key, strings.ReplaceAll(tt.value, "@MARK", mark))
			err := tt.act(w)
			require.ErrorIs(t, err, ErrConfigTampered)
			require.ErrorContains(t, err, strings.ToLower(tt.key))
			require.NoFileExists(t, mark, "the planted program ran")
		})
	}

	// The worktree's own configuration is never the factory's either.
	f := newFixture(t)
	w := f.prepare("j1", "")
	require.NoError(t, os.WriteFile(filepath.Join(w.gitDir, "config.worktree"), []byte("[core]\n\tfsmonitor = x\n"), 0o644))
	_, err := w.Commit(context.Background(), "work")
	require.ErrorIs(t, err, ErrConfigTampered)
}
