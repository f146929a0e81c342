package gitwt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Manager owns the mirrors and worktrees under one work directory. One
// factory process owns a work directory (the agent holds a lock file), so
// anything here that no running job claims is left over from an earlier
// run.
type Manager struct {
	workDir  string
	repoBase string
	// urls are origin URLs of repos that may be missing from repoBase.
	urls              map[string]string
	gitName, gitEmail string
	log               *slog.Logger

	mu sync.Mutex
	// locks are the repo locks: a channel of one slot each, held while
	// it is full, so a wait for one can end with the waiter's context.
	locks map[string]chan struct{}
}

// Options configure a Manager.
type Options struct {
	WorkDir  string
	RepoBase string
	// RepoURLs maps repo names to origin URLs, for repos not cloned under
	// RepoBase.
	RepoURLs          map[string]string
	GitName, GitEmail string
	Log               *slog.Logger
}

// New returns a Manager and creates its directories.
func New(o Options) (*Manager, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{workDir: o.WorkDir, repoBase: o.RepoBase, urls: o.RepoURLs, gitName: o.GitName, gitEmail: o.GitEmail,
		log: o.Log, locks: map[string]chan struct{}{}}
	for _, d := range []string{m.mirrorsDir(), m.worktreesDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	return m, nil
}

func (m *Manager) mirrorsDir() string   { return filepath.Join(m.workDir, "mirrors") }
func (m *Manager) worktreesDir() string { return filepath.Join(m.workDir, "worktrees") }

// WorktreesDir is where every worktree lives (engines must reach it).
func (m *Manager) WorktreesDir() string { return m.worktreesDir() }

// MirrorPath is where repo's mirror lives.
func (m *Manager) MirrorPath(repo string) string {
	return filepath.Join(m.mirrorsDir(), repo+".git")
}

// WorktreePath is where the worktree of job's run at epoch lives.
func (m *Manager) WorktreePath(repo, job string, epoch int64) string {
	return filepath.Join(m.worktreesDir(), repo, RunName(job, epoch))
}

// lock serialises the operations on repo's mirror; it returns the unlock.
// A wait for it ends when ctx does, with ctx's error: a run cancelled,
// preempted or shut down does not wait out another run's fetch or push
// (or a GC) first. A free lock is taken whatever ctx says, as before.
func (m *Manager) lock(ctx context.Context, repo string) (func(), error) {
	m.mu.Lock()
	l, ok := m.locks[repo]
	if !ok {
		l = make(chan struct{}, 1)
		m.locks[repo] = l
	}
	m.mu.Unlock()
	unlock := func() { <-l }
	select {
	case l <- struct{}{}:
		return unlock, nil
	default:
	}
	select {
	case l <- struct{}{}:
		return unlock, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the lock of repo %s: %w", repo, ctx.Err())
	}
}

// EnsureClones clones every repo with a configured URL that is missing
// from the repo base, so an elastic pool that starts on an empty disk
// advertises and can run them. It returns the repos it cloned.
func (m *Manager) EnsureClones(ctx context.Context) ([]string, error) {
	var cloned []string
	var errs []error
	for name, u := range m.urls {
		dst := filepath.Join(m.repoBase, name)
		if _, err := os.Stat(filepath.Join(dst, ".git")); err == nil {
			continue
		}
		if err := os.MkdirAll(m.repoBase, 0o755); err != nil {
			return cloned, fmt.Errorf("create repo base: %w", err)
		}
		if _, err := git(ctx, m.repoBase, "clone", "--quiet", "--", u, dst); err != nil {
			errs = append(errs, fmt.Errorf("clone %s: %w", name, err))
			continue
		}
		cloned = append(cloned, name)
	}
	return cloned, errors.Join(errs...)
}

// originURL is the origin of repo: the URL its clone under the repo base
// fetches from, else the configured one.
func (m *Manager) originURL(ctx context.Context, repo string) (string, error) {
	clone := filepath.Join(m.repoBase, repo)
	if _, err := os.Stat(clone); err == nil {
		u, err := git(ctx, clone, "remote", "get-url", "origin")
		if err != nil {
			return "", fmt.Errorf("repo %s has no origin: %w", repo, err)
		}
		return u, nil
	}
	if u, ok := m.urls[repo]; ok {
		return u, nil
	}
	return "", fmt.Errorf("repo %s is not under %s and has no configured URL", repo, m.repoBase)
}

// ErrConfigTampered is a mirror whose own configuration holds something
// the factory never writes there.
var ErrConfigTampered = errors.New("the mirror's git configuration was changed by someone other than the factory")

// mirrorKeys are the keys a mirror's own configuration file may hold:
// what git init and the factory write (see create); keys the factory's
// command line overrides (safeConfig: a tool like husky sets
// core.hooksPath from inside a worktree); and settings that never make
// git run anything (identity, colours, branch tracking …), which engines
// set as a matter of course. Anything else (a filter, a receive-pack or
// ssh command, a credential helper, an include) can only come from an
// engine running as the factory's user, and many such keys make git run a
// program: the factory's commands refuse to run in that mirror rather
// than run it with the factory's environment.
var mirrorKeys = []string{
	"core.repositoryformatversion", "core.filemode", "core.bare", "core.ignorecase", "core.precomposeunicode",
	"core.symlinks", "core.logallrefupdates", "extensions.objectformat",
	"remote.origin.url", "remote.origin.fetch", "gc.auto",
	"core.hookspath", "core.fsmonitor", "core.untrackedcache", "core.pager", "commit.gpgsign", "tag.gpgsign", "push.gpgsign",
	"core.autocrlf", "core.eol", "core.safecrlf", "core.quotepath", "core.abbrev", "push.default", "push.autosetupremote",
	"pull.rebase", "pull.ff", "merge.ff", "rerere.enabled", "init.defaultbranch",
}

// mirrorSections are sections whose every key is as harmless.
var mirrorSections = []string{"user.", "author.", "committer.", "color.", "advice.", "i18n.", "status.", "log.", "branch."}

func mirrorKeyAllowed(key string) bool {
	return slices.Contains(mirrorKeys, key) || slices.ContainsFunc(mirrorSections, func(p string) bool { return strings.HasPrefix(key, p) })
}

// checkConfig refuses repo's mirror when its configuration, or a
// worktree's own (config.worktree), holds anything the factory did not
// write.
func (m *Manager) checkConfig(ctx context.Context, repo string) error {
	dir := m.MirrorPath(repo)
	file := filepath.Join(dir, "config")
	out, err := git(ctx, dir, "config", "--file", file, "--list", "--name-only")
	if err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	for _, key := range strings.Split(out, "\n") {
		if key != "" && !mirrorKeyAllowed(strings.ToLower(key)) {
			return fmt.Errorf("%w: %s holds %s; refusing to run git there (remove the mirror to have it made again)", ErrConfigTampered, file, strings.ToLower(key))
		}
	}
	if extra, _ := filepath.Glob(filepath.Join(dir, "worktrees", "*", "config.worktree")); len(extra) > 0 {
		return fmt.Errorf("%w: %s exists", ErrConfigTampered, extra[0])
	}
	return nil
}

// Sync creates repo's mirror if needed and fetches origin into it, pruning
// branches origin deleted. The caller holds the repo lock.
func (m *Manager) sync(ctx context.Context, repo string) (string, error) {
	if err := fleet.ValidateName("repo", repo); err != nil {
		return "", err
	}
	dir := m.MirrorPath(repo)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); errors.Is(err, fs.ErrNotExist) {
		if err := m.create(ctx, repo, dir); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	} else if err != nil {
		return "", err
	} else if err := m.checkConfig(ctx, repo); err != nil {
		return "", err
	} else if u, err := m.originURL(ctx, repo); err == nil {
		// Follow a clone whose origin moved.
		if _, err := git(ctx, dir, "remote", "set-url", "origin", u); err != nil {
			return "", err
		}
	}
	if _, err := git(ctx, dir, "fetch", "--quiet", "--prune", "--no-tags", "origin"); err != nil {
		return "", fmt.Errorf("fetch %s: %w", repo, err)
	}
	return dir, nil
}

// create makes the mirror: an empty bare repo whose origin is the clone's
// origin, seeded from the local clone's objects so the first fetch from
// origin only transfers what the clone lacks.
func (m *Manager) create(ctx context.Context, repo, dir string) error {
	u, err := m.originURL(ctx, repo)
	if err != nil {
		return err
	}
	steps := [][]string{
		{"init", "--quiet", "--bare", dir},
		{"-C", dir, "remote", "add", "origin", u},
		{"-C", dir, "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"},
		// Auto gc in a repository shared by running worktrees could run
		// in the middle of a job; the factory's GC runs it explicitly.
		{"-C", dir, "config", "gc.auto", "0"},
	}
	for _, s := range steps {
		if _, err := git(ctx, m.mirrorsDir(), s...); err != nil {
			return fmt.Errorf("create mirror of %s: %w", repo, err)
		}
	}
	clone := filepath.Join(m.repoBase, repo)
	if _, err := os.Stat(filepath.Join(clone, ".git")); err == nil {
		// Best effort: a failure only makes the fetch below slower.
		if _, err := git(ctx, dir, "fetch", "--quiet", "--no-tags", clone, "+refs/remotes/origin/*:refs/remotes/origin/*"); err != nil {
			m.log.WarnContext(ctx, "seed mirror from local clone", "repo", repo, "err", err)
		}
	}
	if _, err := git(ctx, dir, "fetch", "--quiet", "--prune", "--no-tags", "origin"); err != nil {
		return fmt.Errorf("fetch %s: %w", repo, err)
	}
	if _, err := git(ctx, dir, "remote", "set-head", "origin", "--auto"); err != nil {
		m.log.WarnContext(ctx, "origin has no HEAD; falling back to main or master", "repo", repo, "err", err)
	}
	return nil
}

// defaultBranch is origin's default branch as a remote-tracking ref.
func defaultBranch(ctx context.Context, dir string) (string, error) {
	if ref, err := git(ctx, dir, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"); err == nil && ref != "" {
		return ref, nil
	}
	for _, b := range []string{"main", "master"} {
		ref := "refs/remotes/origin/" + b
		if _, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err == nil {
			return ref, nil
		}
	}
	return "", errors.New("origin has no HEAD, main or master branch")
}

// Worktree is the checkout of one run of a job.
type Worktree struct {
	Repo, JobID string
	// Epoch is the run's lease epoch: the worktree and its branch are its
	// own, never another run's.
	Epoch int64
	Path  string
	// Branch is the local branch, aq/run/<id>-e<epoch>.
	Branch string
	// Base is the commit the worktree started from.
	Base string
	// Resumed says Base is the job's checkpoint rather than the default
	// branch.
	Resumed bool
	// DefaultBranch is origin's default branch name (e.g. main).
	DefaultBranch string
	m             *Manager
	// gitDir is the worktree's git directory inside the mirror.
	gitDir string

	mu sync.Mutex
	// expect is, per branch of the job on origin (aq/job, aq/wip), the
	// commit this run last saw there ("" for none): every push carries it
	// as its lease, so a branch someone else moved is never overwritten.
	expect map[string]string
}

// Run names one run of a job: the job and the lease epoch it runs under.
type Run struct {
	Repo, Job string
	Epoch     int64
	// Checkpoint is the job's checkpoint branch on origin, if any.
	Checkpoint string
}

// Prepare fetches the repo and checks out a fresh worktree for the run on
// its own branch aq/run/<job>-e<epoch>: from origin's checkpoint branch when
// the job carries one and it exists there, else from origin's default
// branch. A leftover of the same run (a crash) is replaced; other runs'
// worktrees and branches are not touched.
func (m *Manager) Prepare(ctx context.Context, r Run) (*Worktree, error) {
	repo, job, checkpoint := r.Repo, r.Job, r.Checkpoint
	if err := fleet.ValidateName("job id", job); err != nil {
		return nil, err
	}
	if r.Epoch < 0 {
		return nil, fmt.Errorf("lease epoch %d is negative", r.Epoch)
	}
	unlock, err := m.lock(ctx, repo)
	if err != nil {
		return nil, err
	}
	defer unlock()
	dir, err := m.sync(ctx, repo)
	if err != nil {
		return nil, err
	}
	def, err := defaultBranch(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("repo %s: %w", repo, err)
	}
	w := &Worktree{Repo: repo, JobID: job, Epoch: r.Epoch, Path: m.WorktreePath(repo, job, r.Epoch), Branch: RunBranch(job, r.Epoch),
		DefaultBranch: strings.TrimPrefix(def, "refs/remotes/origin/"), m: m}
	base := def
	if checkpoint != "" {
		ref := "refs/remotes/origin/" + checkpoint
		if _, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err == nil {
			base, w.Resumed = ref, true
		} else {
			m.log.WarnContext(ctx, "checkpoint branch not on origin; starting from the default branch",
				"repo", repo, "job", job, "checkpoint", checkpoint)
		}
	}
	if w.Base, err = git(ctx, dir, "rev-parse", base+"^{commit}"); err != nil {
		return nil, err
	}
	// What origin holds of the job now, as just fetched: the run's
	// expectations for its pushes.
	w.expect = map[string]string{}
	for _, b := range []string{JobBranch(job), WIPBranch(job)} {
		w.expect[b], _ = git(ctx, dir, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/"+b)
	}
	if err := m.removeWorktree(ctx, dir, w.Path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(w.Path), 0o755); err != nil {
		return nil, err
	}
	if _, err := git(ctx, dir, "worktree", "add", "--quiet", "--force", "-B", w.Branch, w.Path, w.Base); err != nil {
		return nil, fmt.Errorf("add worktree for %s: %w", job, err)
	}
	// The worktree's git directory, read now, before any engine could
	// rewrite the worktree's .git file: every later command names it.
	gd, err := git(ctx, w.Path, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return nil, fmt.Errorf("worktree of %s: %w", job, err)
	}
	if !isWithin(filepath.Join(dir, "worktrees"), gd) {
		return nil, fmt.Errorf("worktree of %s: git directory %s is not in the mirror", job, gd)
	}
	w.gitDir = gd
	return w, nil
}

// removeWorktree removes the worktree at path, registered or not. The
// caller holds the repo lock.
func (m *Manager) removeWorktree(ctx context.Context, dir, path string) error {
	if _, err := os.Stat(path); err == nil {
		if _, err := git(ctx, dir, "worktree", "remove", "--force", "--force", path); err != nil {
			m.log.DebugContext(ctx, "worktree remove", "path", path, "err", err)
		}
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("remove %s: %w", path, err)
		}
	}
	_, err := git(ctx, dir, "worktree", "prune")
	return err
}

// git runs a git command on the worktree. The git directory and work
// tree are named explicitly, never discovered: the worktree's files are
// the engine's, and a .git file it rewrote would otherwise point the
// factory's commands at a repository (config, hooks) of its making.
func (w *Worktree) git(ctx context.Context, args ...string) (string, error) {
	return git(ctx, w.Path, append([]string{"--git-dir=" + w.gitDir, "--work-tree=" + w.Path}, args...)...)
}

// CommandEnv is env for a command the factory runs in the worktree on its
// own account (the ship hook): git in it uses the worktree's real git
// directory, never one a rewritten .git file names, with hooks and
// fsmonitor off (command-line-scope configuration via GIT_CONFIG_COUNT).
func (w *Worktree) CommandEnv(env []string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "GIT_DIR" || k == "GIT_WORK_TREE" || strings.HasPrefix(k, "GIT_CONFIG_")
	})
	env = append(env, "GIT_DIR="+w.gitDir, "GIT_WORK_TREE="+w.Path)
	n := 0
	for i := 0; i+1 < len(safeConfig); i += 2 {
		k, v, _ := strings.Cut(safeConfig[i+1], "=")
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", n, k), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", n, v))
		n++
	}
	return append(env, fmt.Sprintf("GIT_CONFIG_COUNT=%d", n))
}

// Commit records everything in the worktree (new, changed and deleted
// files) as one commit, and reports whether the branch now differs from
// Base. The engine may have committed on its own; that counts as a change.
func (w *Worktree) Commit(ctx context.Context, msg string) (bool, error) {
	if err := w.m.checkConfig(ctx, w.Repo); err != nil {
		return false, err
	}
	if _, err := w.git(ctx, "add", "--all"); err != nil {
		return false, err
	}
	if _, err := w.git(ctx, "diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv"); err != nil {
		if exitCode(err) != 1 {
			return false, err
		}
		if _, err := w.git(ctx, "-c", "user.name="+w.m.gitName, "-c", "user.email="+w.m.gitEmail,
			"-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-m", msg); err != nil {
			return false, err
		}
	}
	head, err := w.Head(ctx)
	if err != nil {
		return false, err
	}
	return head != w.Base, nil
}

// DiffTo writes the run's change — from the commit the worktree started
// from to HEAD, binary files included as git apply takes them — to out.
func (w *Worktree) DiffTo(ctx context.Context, out io.Writer) error {
	return gitTo(ctx, w.Path, out, "--git-dir="+w.gitDir, "--work-tree="+w.Path, "diff", "--binary", "--no-ext-diff", "--no-color", w.Base, "HEAD")
}

// DiffStat is the size of the worktree's HEAD against the default
// branch it forked from (git diff --shortstat over the merge base), what
// the delivered change adds up to whatever checkpoints it resumed from.
func (w *Worktree) DiffStat(ctx context.Context) (fleet.DiffStat, error) {
	out, err := w.git(ctx, "diff", "--shortstat", "--no-ext-diff", "--no-textconv", "refs/remotes/origin/"+w.DefaultBranch+"...HEAD")
	if err != nil {
		return fleet.DiffStat{}, err
	}
	return ParseShortstat(out), nil
}

var shortstatTerms = regexp.MustCompile(`(\d+) (files? changed|insertions?\(\+\)|deletions?\(-\))`)

// ParseShortstat reads git diff --shortstat's line
// (" 2 files changed, 10 insertions(+), 3 deletions(-)"; parts absent
// when zero, the whole line empty for no change).
func ParseShortstat(s string) fleet.DiffStat {
	var d fleet.DiffStat
	for _, m := range shortstatTerms.FindAllStringSubmatch(s, -1) {
		n, _ := strconv.Atoi(m[1])
		switch m[2][0] {
		case 'f':
			d.Files = n
		case 'i':
			d.Insertions = n
		case 'd':
			d.Deletions = n
		}
	}
	return d
}

// Head is the worktree's current commit.
func (w *Worktree) Head(ctx context.Context) (string, error) {
	return w.git(ctx, "rev-parse", "HEAD")
}

// ErrRefMoved is a push refused because the branch on origin no longer
// holds the commit this run last saw there: someone else pushed it (a
// newer holder of the job's lease, or a stale one).
var ErrRefMoved = errors.New("the branch on origin moved since this run last saw it")

// Push sets origin's branch to the worktree's HEAD, with a lease on the
// commit this run expects there (--force-with-lease=<ref>:<sha>, "must not
// exist" when it expects none): it replaces only what this run has seen,
// so it never overwrites another holder's push; that refusal is
// ErrRefMoved. The caller checks its fence right before (PushFenced).
func (w *Worktree) Push(ctx context.Context, branch string) error {
	return w.PushFenced(ctx, branch, nil)
}

// Fence confirms that a write may go on and returns the context it runs
// under (ending while the write is certainly still allowed) and that
// context's cancel.
type Fence func(ctx context.Context) (context.Context, context.CancelFunc, error)

// PushFenced is Push with fence checked once the push holds the repo's
// lock, right before the write: the wait for the lock (another run's
// fetch or push, a GC) can neither outlast the fence's deadline nor hide
// a fence lost meanwhile. fence's error is returned as it is; a nil fence
// checks nothing.
func (w *Worktree) PushFenced(ctx context.Context, branch string, fence Fence) error {
	head, err := w.Head(ctx)
	if err != nil {
		return fmt.Errorf("push %s: %w", branch, err)
	}
	ref := "refs/heads/" + branch
	w.mu.Lock()
	expect := w.expect[branch]
	w.mu.Unlock()
	unlock, err := w.m.lock(ctx, w.Repo)
	if err != nil {
		return fmt.Errorf("push %s: %w", branch, err)
	}
	defer unlock()
	if fence != nil {
		fctx, cancel, err := fence(ctx)
		if err != nil {
			return err
		}
		defer cancel()
		ctx = fctx
	}
	if err := w.m.checkConfig(ctx, w.Repo); err != nil {
		return fmt.Errorf("push %s: %w", branch, err)
	}
	if _, err := w.git(ctx, "push", "--quiet", "--porcelain", "--no-verify",
		"--force-with-lease="+ref+":"+expect, "origin", head+":"+ref); err != nil {
		var ge *GitError
		if errors.As(err, &ge) && staleLease(ge.Stdout) {
			return fmt.Errorf("push %s: %w (expected %s)", branch, ErrRefMoved, orNone(expect))
		}
		return fmt.Errorf("push %s: %w", branch, err)
	}
	w.mu.Lock()
	w.expect[branch] = head
	w.mu.Unlock()
	return nil
}

// Refresh makes what origin holds of branch now this run's expectation
// for its next push. Only for a holder that has just confirmed its lease:
// whatever moved the branch then was not the lease holder.
func (w *Worktree) Refresh(ctx context.Context, branch string) (string, error) {
	ref := "refs/heads/" + branch
	if err := w.m.checkConfig(ctx, w.Repo); err != nil {
		return "", err
	}
	out, err := git(ctx, w.m.MirrorPath(w.Repo), "ls-remote", "origin", ref)
	if err != nil {
		return "", fmt.Errorf("read %s on origin: %w", branch, err)
	}
	sha, _, _ := strings.Cut(out, "\t")
	w.mu.Lock()
	w.expect[branch] = sha
	w.mu.Unlock()
	return sha, nil
}

// staleLease reports a push --porcelain refused for its lease.
func staleLease(porcelain string) bool {
	for _, line := range strings.Split(porcelain, "\n") {
		if strings.HasPrefix(line, "!") && strings.Contains(line, "(stale info)") {
			return true
		}
	}
	return false
}

func orNone(sha string) string {
	if sha == "" {
		return "none"
	}
	return sha
}

// DeleteRemote deletes origin's branch if it still points at sha, so a
// branch someone moved since is never lost.
func (w *Worktree) DeleteRemote(ctx context.Context, branch, sha string) error {
	unlock, err := w.m.lock(ctx, w.Repo)
	if err != nil {
		return err
	}
	defer unlock()
	return pushDelete(ctx, w.m.MirrorPath(w.Repo), branch, sha)
}

func pushDelete(ctx context.Context, dir, branch, sha string) error {
	ref := "refs/heads/" + branch
	if _, err := git(ctx, dir, "push", "--quiet", "--no-verify", "--force-with-lease="+ref+":"+sha, "origin", ":"+ref); err != nil {
		return fmt.Errorf("delete %s on origin: %w", branch, err)
	}
	return nil
}

// Remove deletes the worktree, and its local branch when the branch's
// commit is on origin (a result or a checkpoint). Unpushed work stays on
// the local branch, where GC deletes it once the job is over.
func (w *Worktree) Remove(ctx context.Context) error {
	unlock, err := w.m.lock(ctx, w.Repo)
	if err != nil {
		return err
	}
	defer unlock()
	dir := w.m.MirrorPath(w.Repo)
	if err := w.m.removeWorktree(ctx, dir, w.Path); err != nil {
		return err
	}
	sha, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+w.Branch)
	if err != nil {
		return nil // no branch left
	}
	pushed, err := onOrigin(ctx, dir, sha)
	if err != nil || !pushed {
		return err
	}
	if _, err := git(ctx, dir, "branch", "-D", "--quiet", w.Branch); err != nil {
		return fmt.Errorf("delete local branch %s: %w", w.Branch, err)
	}
	return nil
}

// onOrigin reports whether commit sha is contained in any of origin's
// branches as last fetched or pushed.
func onOrigin(ctx context.Context, dir, sha string) (bool, error) {
	out, err := git(ctx, dir, "for-each-ref", "--count=1", "--contains", sha, "--format=%(refname)", "refs/remotes/origin/")
	return out != "", err
}

// QuarantinePrefix holds the work of a job this factory lost the lease of:
// kept locally for an operator to look at, never pushed, and deleted by GC
// once the job is over.
const QuarantinePrefix = "aq/quarantine/"

// QuarantineBranch names the quarantined work of job at leaseEpoch.
func QuarantineBranch(id string, epoch int64) string {
	return fmt.Sprintf("%s%s-e%d", QuarantinePrefix, id, epoch)
}

// Quarantine commits what the worktree holds onto a local quarantine
// branch of its run, never pushed, and removes the worktree and the run's
// branch (its own only). It returns the branch.
func (w *Worktree) Quarantine(ctx context.Context) (string, error) {
	epoch := w.Epoch
	if _, err := w.Commit(ctx, fmt.Sprintf("fleet: quarantined work of job %s (lease epoch %d, fenced)", w.JobID, epoch)); err != nil {
		return "", err
	}
	unlock, err := w.m.lock(ctx, w.Repo)
	if err != nil {
		return "", err
	}
	defer unlock()
	dir := w.m.MirrorPath(w.Repo)
	branch := QuarantineBranch(w.JobID, epoch)
	head, err := w.Head(ctx)
	if err != nil {
		return "", err
	}
	if _, err := git(ctx, dir, "branch", "--force", branch, head); err != nil {
		return "", err
	}
	if err := w.m.removeWorktree(ctx, dir, w.Path); err != nil {
		return branch, err
	}
	if _, err := git(ctx, dir, "branch", "-D", "--quiet", w.Branch); err != nil {
		return branch, err
	}
	return branch, nil
}

// isWithin reports whether path is strictly inside dir.
func isWithin(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}
