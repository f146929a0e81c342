package tests

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/syncbuf"
)

// Helpers of the factory black-box tests: the factory binary, git origins
// (bare repos in temp dirs) with a clone per repo under a repo base, fake
// engines (shell scripts) and factory processes.

var (
	factoryOnce sync.Once
	factoryBin  string
	factoryErr  error
	// factoryBuildFlags are extra go build flags (-race under -race).
	factoryBuildFlags []string
)

// factoryBinary builds infra/factory once per test run.
func factoryBinary(t *testing.T) string {
	t.Helper()
	factoryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fleet-factory-bin-")
		if err != nil {
			factoryErr = err
			return
		}
		factoryBin = filepath.Join(dir, "factory")
		args := append([]string{"build", "-o", factoryBin}, factoryBuildFlags...)
		cmd := exec.Command("go", append(args, "./infra/factory")...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			factoryErr = fmt.Errorf("go build ./infra/factory: %v\n%s", err, out)
		}
	})
	require.NoError(t, factoryErr)
	return factoryBin
}

// facGit runs git in dir and returns its trimmed output.
func facGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := facGitTry(dir, args...)
	require.NoError(t, err, "git %s", strings.Join(args, " "))
	return out
}

func facGitTry(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.invalid",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.invalid", "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// facRepo is one repo: its origin (bare) and its clone under Base.
type facRepo struct {
	Name   string
	Origin string // bare repo path
	Base   string // the repo base holding the clone
}

// newFacRepo creates an origin with one commit on main and clones it into a
// fresh repo base.
func newFacRepo(t *testing.T, name string) *facRepo {
	t.Helper()
	root := t.TempDir()
	r := &facRepo{Name: name, Origin: filepath.Join(root, name+".git"), Base: filepath.Join(root, "base")}
	facGit(t, root, "init", "--quiet", "--bare", "--initial-branch=main", r.Origin)
	seed := filepath.Join(root, "seed")
	facGit(t, root, "clone", "--quiet", r.Origin, seed)
	facGit(t, seed, "checkout", "--quiet", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(seed, "README.md"), []byte("# "+name+"\n"), 0o644))
	facGit(t, seed, "add", "README.md")
	facGit(t, seed, "commit", "--quiet", "-m", "initial")
	facGit(t, seed, "push", "--quiet", "origin", "main")
	require.NoError(t, os.MkdirAll(r.Base, 0o755))
	facGit(t, r.Base, "clone", "--quiet", r.Origin, name)
	return r
}

// Ref is the commit of origin's branch, "" when it does not exist.
func (r *facRepo) Ref(t *testing.T, branch string) string {
	t.Helper()
	out, err := facGitTry(r.Origin, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	if err != nil {
		return ""
	}
	return out
}

// Show is a file's content at origin's branch.
func (r *facRepo) Show(t *testing.T, branch, path string) string {
	t.Helper()
	return facGit(t, r.Origin, "show", "refs/heads/"+branch+":"+path)
}

// IsAncestor reports whether commit a is in branch b's history on origin.
func (r *facRepo) IsAncestor(t *testing.T, a, b string) bool {
	t.Helper()
	_, err := facGitTry(r.Origin, "merge-base", "--is-ancestor", a, "refs/heads/"+b)
	return err == nil
}

// facEngine writes a fake engine: a bash script with body, run in the
// job's worktree.
func facEngine(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "engine.sh")
	require.NoError(t, os.WriteFile(p, []byte("#!/usr/bin/env bash\nset -eu\n"+body+"\n"), 0o755))
	return p
}

// factoryProc is a running factory.
type factoryProc struct {
	t       *testing.T
	ID      string
	WorkDir string
	cmd     *exec.Cmd
	out     *syncbuf.Buffer
	done    chan struct{}
	err     error
}

// facDefaultEnv are the settings every test factory gets: fast cadences.
var facDefaultEnv = []string{
	"FLEET_TRANSPORT=poll",
	"FLEET_POLL_INTERVAL=200ms",
	"FLEET_HEARTBEAT_INTERVAL=1s",
	"FLEET_CHECKPOINT_INTERVAL=1h",
	"FLEET_KILL_GRACE=1s",
	"FLEET_GC_INTERVAL=0",
	"FLEET_LOG_LEVEL=debug",
}

// startFactory enrols factory id in product (seats seats, for repo), and
// starts the factory program with the engine "fake" and env added.
func startFactory(t *testing.T, s *Stack, id, product string, seats int, repo *facRepo, engine string, env ...string) *factoryProc {
	t.Helper()
	token := s.Factory(id, product, seats, []string{"os:linux"}, []string{repo.Name})
	return runFactory(t, s, id, token, seats, repo.Base, engine, env...)
}

// runFactory starts the factory program for an enrolled factory.
func runFactory(t *testing.T, s *Stack, id, token string, seats int, repoBase, engine string, env ...string) *factoryProc {
	t.Helper()
	return runFactoryIn(t, s, id, token, seats, repoBase, engine, t.TempDir(), env...)
}

// runFactoryIn is runFactory with the work directory given (a restart
// works in its predecessor's).
func runFactoryIn(t *testing.T, s *Stack, id, token string, seats int, repoBase, engine, workDir string, env ...string) *factoryProc {
	t.Helper()
	f := &factoryProc{t: t, ID: id, WorkDir: workDir, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	f.cmd = exec.Command(factoryBinary(t), facArgs(env)...)
	dieWithTests(f.cmd, syscall.SIGKILL)
	// The token from a file, the safe way: it never enters the factory's
	// environment (and so /proc/<pid>/environ).
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	f.cmd.Env = append(os.Environ(),
		"FLEET_URL="+s.URL,
		"FLEET_FACTORY_ID="+id,
		"FLEET_FACTORY_TOKEN_FILE="+tokenFile,
		"FLEET_REPO_BASE="+repoBase,
		"FLEET_WORK_DIR="+f.WorkDir,
		fmt.Sprintf("FLEET_SEATS=%d", seats),
		"FLEET_ENGINE_FAKE="+engine,
	)
	f.cmd.Env = append(f.cmd.Env, facDefaultEnv...)
	f.cmd.Env = append(f.cmd.Env, facEnvOnly(env)...)
	f.cmd.Stdout, f.cmd.Stderr = f.out, f.out
	require.NoError(t, f.cmd.Start())
	go func() {
		f.err = f.cmd.Wait()
		close(f.done)
	}()
	t.Cleanup(func() {
		f.Stop()
		removeFactoryCgroups(f.WorkDir)
		if strings.Contains(f.out.String(), "WARNING: DATA RACE") {
			t.Errorf("factory %s: data race", id)
		}
		if t.Failed() {
			t.Logf("factory %s output:\n%s", id, f.out.String())
		}
	})
	return f
}

// removeFactoryCgroups removes the cgroup subtree a factory recorded in
// its work directory, with the run cgroups one killed with -9 left: a
// factory removes them when it stops or restarts, and a temp work
// directory sees neither.
func removeFactoryCgroups(workDir string) {
	b, err := os.ReadFile(filepath.Join(workDir, "cgroup"))
	if err != nil {
		return
	}
	sub := strings.TrimSpace(string(b))
	if !strings.HasPrefix(filepath.Base(sub), "fleet-") {
		return
	}
	runs, _ := os.ReadDir(sub)
	for _, r := range runs {
		if !r.IsDir() {
			continue
		}
		d := filepath.Join(sub, r.Name())
		_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
		for i := 0; i < 100 && os.Remove(d) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	_ = os.Remove(sub)
}

// facArgs picks the "--flag" entries of env: they are passed as arguments.
func facArgs(env []string) []string {
	var args []string
	for _, e := range env {
		if strings.HasPrefix(e, "--") {
			args = append(args, e)
		}
	}
	return args
}

func facEnvOnly(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "--") {
			out = append(out, e)
		}
	}
	return out
}

// Stop sends SIGTERM (after SIGCONT, in case it is stopped) and waits.
func (f *factoryProc) Stop() {
	if f.exited() {
		return
	}
	_ = f.cmd.Process.Signal(syscall.SIGCONT)
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.done
		f.t.Errorf("factory %s did not stop within 30s of SIGTERM", f.ID)
	}
}

func (f *factoryProc) exited() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the factory process (not its engines).
func (f *factoryProc) Signal(sig syscall.Signal) {
	f.t.Helper()
	require.NoError(f.t, f.cmd.Process.Signal(sig))
}

// Wait waits for the factory to exit and returns its exit code.
func (f *factoryProc) Wait(within time.Duration) int {
	f.t.Helper()
	select {
	case <-f.done:
	case <-time.After(within):
		f.t.Fatalf("factory %s still running after %s; output:\n%s", f.ID, within, f.out.String())
	}
	var ee *exec.ExitError
	if errors.As(f.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(f.t, f.err)
	return 0
}

// Output is what the factory logged.
func (f *factoryProc) Output() string { return f.out.String() }

// facWaitStage waits until job id is in stage and returns the job.
func facWaitStage(t *testing.T, s *Stack, product, id, stage string, within time.Duration) map[string]any {
	t.Helper()
	var job map[string]any
	Eventually(t, within, fmt.Sprintf("job %s reaches %s", id, stage), func() bool {
		job = s.Job(product, id)
		return job["stage"] == stage
	})
	return job
}

// facStage reads a job's stage.
func facStage(t *testing.T, s *Stack, product, id string) string {
	t.Helper()
	r := s.Op(http.MethodGet, "/jobs/"+id, product, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	return r.Map(t)["stage"].(string)
}

// localBranches lists the aq/* branches of every mirror of a factory.
func (f *factoryProc) localBranches(t *testing.T) []string {
	t.Helper()
	mirrors, _ := filepath.Glob(filepath.Join(f.WorkDir, "mirrors", "*.git"))
	var out []string
	for _, m := range mirrors {
		s := facGit(t, m, "for-each-ref", "--format=%(refname:short)", "refs/heads/aq/")
		if s != "" {
			out = append(out, strings.Split(s, "\n")...)
		}
	}
	return out
}

// worktrees lists the worktree directories a factory has, and the linked
// worktrees git knows in its mirrors.
func (f *factoryProc) worktrees(t *testing.T) (dirs, registered []string) {
	t.Helper()
	dirs, _ = filepath.Glob(filepath.Join(f.WorkDir, "worktrees", "*", "*"))
	mirrors, _ := filepath.Glob(filepath.Join(f.WorkDir, "mirrors", "*.git"))
	for _, m := range mirrors {
		for _, line := range strings.Split(facGit(t, m, "worktree", "list", "--porcelain"), "\n") {
			if p, ok := strings.CutPrefix(line, "worktree "); ok && p != m {
				registered = append(registered, p)
			}
		}
	}
	return dirs, registered
}
