// Package gitwt manages the factory's git state: one bare mirror per repo
// (fetched from the repo's origin), one worktree per job on its own branch,
// commits and pushes of the job's work, and the garbage collection of
// worktrees and branches that no job needs any more.
//
// Layout under the work directory:
//
//	mirrors/<repo>.git                 bare mirror; origin's branches as refs/remotes/origin/*
//	worktrees/<repo>/<job>-e<epoch>    one run's worktree, on branch aq/run/<job>-e<epoch>
//
// Two jobs on one repo share the mirror's objects but never a worktree, so
// they run side by side; two runs of one job (lease epochs) never share a
// worktree or a local branch either, so an old run cleaning up after a
// fence cannot touch a newer run's files. Operations that touch the mirror's shared state
// (fetch, worktree add/remove, push, branch deletion) hold a per-repo lock;
// commits in a worktree touch only that worktree's branch and index.
package gitwt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Branch names. aq/job and aq/wip are the job's branches on origin; a
// run's local branch (the one its worktree has checked out) is keyed by
// its lease epoch, so two runs of one job never share a branch.
const (
	JobPrefix = "aq/job/"
	WIPPrefix = "aq/wip/"
	RunPrefix = "aq/run/"
)

// RunName names one run of a job (one lease epoch): <job>-e<epoch>. It keys
// the run's worktree, local branch, quarantine branch and job files.
func RunName(job string, epoch int64) string { return fmt.Sprintf("%s-e%d", job, epoch) }

var runSuffix = regexp.MustCompile(`-e([0-9]+)$`)

// JobOfRun is the job id and epoch of a RunName.
func JobOfRun(name string) (string, int64, bool) {
	m := runSuffix.FindStringSubmatchIndex(name)
	if m == nil {
		return "", 0, false
	}
	epoch, err := strconv.ParseInt(name[m[2]:m[3]], 10, 64)
	id := name[:m[0]]
	if err != nil || fleet.ValidateName("job", id) != nil {
		return "", 0, false
	}
	return id, epoch, true
}

// RunBranch is the local branch of a job's run at epoch.
func RunBranch(job string, epoch int64) string { return RunPrefix + RunName(job, epoch) }

// JobBranch is the branch a job's result is pushed to.
func JobBranch(id string) string { return JobPrefix + id }

// WIPBranch is the branch a job's checkpoints are pushed to.
func WIPBranch(id string) string { return WIPPrefix + id }

// gitTimeout bounds one git command when the caller's context does not:
// a hung fetch must not hold a repo lock forever.
const gitTimeout = 10 * time.Minute

// GitError is a failed git command with what it printed.
type GitError struct {
	Args     []string
	ExitCode int
	Stdout   string
	Stderr   string
	Err      error
}

func (e *GitError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if len(msg) > 600 {
		msg = msg[len(msg)-600:]
	}
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.Args, " "), e.Err, msg)
}

func (e *GitError) Unwrap() error { return e.Err }

// safeConfig comes first on every git command the factory runs. The
// command line wins over any configuration file, and the factory's
// commands run with its full environment (credentials, the coordinator's
// reach): nothing an engine wrote into a repository's configuration or
// hooks directory may run in them. Hooks, fsmonitor, signing programs, the
// ext:: transport (an arbitrary command as a remote URL) and pagers are
// off. What stays configurable (ssh commands, credential helpers) is the
// operator's and read from the global configuration too, so an engine
// running as the factory's own user could still change it: see README.md
// ("Isolation") for running engines as another user.
var safeConfig = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.untrackedCache=false",
	"-c", "protocol.ext.allow=never",
	"-c", "commit.gpgSign=false",
	"-c", "tag.gpgSign=false",
	"-c", "push.gpgSign=false",
	"-c", "core.pager=cat",
}

// git runs git in dir and returns its stdout, trimmed of the final newline.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	var stdout bytes.Buffer
	if err := gitTo(ctx, dir, &stdout, args...); err != nil {
		var ge *GitError
		if errors.As(err, &ge) {
			ge.Stdout = stdout.String()
		}
		return "", err
	}
	return strings.TrimRight(stdout.String(), "\n"), nil
}

// gitTo runs git in dir with its stdout going to out (a large diff need not
// fit in memory).
func gitTo(ctx context.Context, dir string, out io.Writer, args ...string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, gitTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "git", append(safeConfig[:len(safeConfig):len(safeConfig)], args...)...)
	cmd.Dir = dir
	// Never prompt (there is nobody to answer), and read messages in one
	// language.
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "GIT_ASKPASS=", "SSH_ASKPASS=")
	// On cancellation git gets SIGTERM, on which it removes its lock files
	// (index.lock, ref locks); a SIGKILL would leave them behind and
	// break every later command in the repository.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		ge := &GitError{Args: args, ExitCode: -1, Stderr: stderr.String(), Err: err}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ge.ExitCode = ee.ExitCode()
		}
		if ctx.Err() != nil {
			ge.Err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return ge
	}
	return nil
}

// exitCode is the exit status of a failed git command, -1 for other errors.
func exitCode(err error) int {
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.ExitCode
	}
	return -1
}

// isAncestor reports whether commit a is reachable from b.
func isAncestor(ctx context.Context, dir, a, b string) (bool, error) {
	_, err := git(ctx, dir, "merge-base", "--is-ancestor", a, b)
	if err == nil {
		return true, nil
	}
	if exitCode(err) == 1 {
		return false, nil
	}
	return false, err
}

// refs lists refs under prefix as name -> sha.
func refs(ctx context.Context, dir, prefix string) (map[string]string, error) {
	out, err := git(ctx, dir, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, sha, ok := strings.Cut(line, " "); ok {
			m[name] = sha
		}
	}
	return m, nil
}
