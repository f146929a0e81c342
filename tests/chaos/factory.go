package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/tests/internal/tail"
)

// git runs git in dir.
func git(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=chaos", "GIT_AUTHOR_EMAIL=chaos@example.invalid",
		"GIT_COMMITTER_NAME=chaos", "GIT_COMMITTER_EMAIL=chaos@example.invalid", "GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// gitOut runs git in dir and returns its trimmed output.
func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// newOrigin makes a bare origin with one commit on main.
func newOrigin(dir, name string) (string, error) {
	origin := filepath.Join(dir, name+".git")
	seed := filepath.Join(dir, name+"-seed")
	for _, step := range [][]string{
		{"init", "--quiet", "--bare", "--initial-branch=main", origin},
		{"clone", "--quiet", origin, seed},
	} {
		if err := git(dir, step...); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(seed, "README.md"), []byte("# "+name+"\n"), 0o644); err != nil {
		return "", err
	}
	for _, step := range [][]string{{"checkout", "--quiet", "-B", "main"}, {"add", "README.md"}, {"commit", "--quiet", "-m", "initial"}, {"push", "--quiet", "origin", "main"}} {
		if err := git(seed, step...); err != nil {
			return "", err
		}
	}
	return origin, nil
}

// engineScript is the shell engine every factory runs. The job's title
// says what to do ("chaos-N ok 800": succeed after 800 ms; "fail": exit 1;
// "hang": outlive the wall budget). It logs its start and end with the
// job, lease epoch and factory to the shared run log (lines under
// PIPE_BUF, appended: atomic), and leaves its epoch in the worktree so the
// pushed result names the run that made it. A budget-capped job's title
// ends with the USD the run spends ("chaos-N ok 800 0.42"): the engine
// reports it in $FLEET_JOB_USAGE_FILE at once, as an engine that has
// spent it would, and logs it with its start.
const engineScript = `#!/usr/bin/env bash
set -u
factory=$1 log=$2
read -r _ kind ms usd <<<"$FLEET_JOB_TITLE"
if [ -n "${usd:-}" ] && [ -n "${FLEET_JOB_USAGE_FILE:-}" ]; then
  echo "{\"usd\": $usd, \"inputTokens\": 1000, \"outputTokens\": 100}" >"$FLEET_JOB_USAGE_FILE"
fi
echo "start $FLEET_JOB_ID $FLEET_JOB_LEASE_EPOCH $factory $(date +%s%N) ${usd:-}" >>"$log"
echo "$FLEET_JOB_LEASE_EPOCH" > chaos-epoch.txt
case $kind in
hang) sleep 60 ;; # far past the 4s wall budget; bounded, so an orphan (its factory killed) ends soon
*) sleep "$(awk -v ms="$ms" 'BEGIN{printf "%.3f", ms/1000}')" ;;
esac
rc=0
[ "$kind" = fail ] && rc=1
echo "end $FLEET_JOB_ID $FLEET_JOB_LEASE_EPOCH $factory $(date +%s%N) $rc" >>"$log"
exit $rc
`

// factoryProc is one real factory process, restartable with the same
// identity, token and work directory (a restart after kill -9 recovers).
type factoryProc struct {
	ID      string
	bin     string
	env     []string
	log     *tail.Buffer
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // SIGSTOPped
}

type factorySpec struct {
	id, dir, engine, runLog, url, nats string
	transport                          string
	origins                            map[string]string // repo name -> its bare origin
	products                           []string
	seats                              int
}

// newFactory enrolls the factory and prepares its repo base and work dir.
func newFactory(ctx context.Context, a *api.Client, bin string, sp factorySpec) (*factoryProc, error) {
	enrolled, err := a.Enroll(ctx, api.EnrollRequest{FactoryID: sp.id, Kind: fleet.KindStatic, Products: sp.products, SeatLimit: sp.seats})
	if err != nil {
		return nil, fmt.Errorf("enroll %s: %w", sp.id, err)
	}
	base := filepath.Join(sp.dir, "base")
	work := filepath.Join(sp.dir, "work")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	for name, origin := range sp.origins {
		if err := git(base, "clone", "--quiet", origin, name); err != nil {
			return nil, err
		}
	}
	tokenFile := filepath.Join(sp.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(enrolled.Token+"\n"), 0o600); err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"FLEET_URL="+sp.url,
		"FLEET_FACTORY_ID="+sp.id,
		"FLEET_FACTORY_TOKEN_FILE="+tokenFile,
		"FLEET_REPO_BASE="+base,
		"FLEET_WORK_DIR="+work,
		fmt.Sprintf("FLEET_SEATS=%d", sp.seats),
		"FLEET_ENGINE_FAKE="+sp.engine+" "+sp.id+" "+sp.runLog,
		"FLEET_TRANSPORT="+sp.transport,
		"FLEET_NATS_URL="+sp.nats,
		"FLEET_POLL_INTERVAL=300ms",
		"FLEET_HEARTBEAT_INTERVAL=2s",
		"FLEET_RENEW_INTERVAL=2s",
		"FLEET_CHECKPOINT_INTERVAL=1h",
		"FLEET_KILL_GRACE=1s",
		"FLEET_GC_INTERVAL=0",
		"FLEET_LOG_LEVEL=info",
	)
	return &factoryProc{ID: sp.id, bin: bin, env: env, log: &tail.Buffer{Max: 64 << 10}}, nil
}

func (f *factoryProc) start() error {
	cmd := exec.Command(f.bin)
	cmd.Env = f.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = f.log, f.log
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	f.mu.Lock()
	f.cmd, f.done, f.stopped = cmd, done, false
	f.mu.Unlock()
	return nil
}

func (f *factoryProc) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		return false
	}
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

// kill9 kills the factory as a crash would: its engines are orphaned and
// keep running, as they would on a real machine.
func (f *factoryProc) kill9() {
	f.mu.Lock()
	cmd, done := f.cmd, f.done
	f.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

func (f *factoryProc) signal(sig syscall.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.cmd.Process.Signal(sig)
	f.stopped = sig == syscall.SIGSTOP
}

// stop ends the factory (SIGCONT first, in case it is stopped).
func (f *factoryProc) stop() {
	if !f.running() {
		return
	}
	f.signal(syscall.SIGCONT)
	f.signal(syscall.SIGTERM)
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		f.kill9()
	}
}

// call sends body (a string is a manifest, anything else JSON) through c
// and decodes the answer into out; product "" is c's own.
func call(ctx context.Context, c *api.Client, method, path, product string, body any, out any) error {
	req := api.Request{Method: method, Path: path, Product: product}
	switch b := body.(type) {
	case nil:
	case string:
		req.Body, req.ContentType = []byte(b), "text/markdown"
	default:
		data, err := api.JSONBody(b)
		if err != nil {
			return err
		}
		req.Body = data
	}
	_, err := c.JSON(ctx, req, out)
	return err
}

// statusOf is the HTTP status of an API answer, 0 when none came.
func statusOf(err error) int {
	if e, ok := errors.AsType[*api.Error](err); ok {
		return e.Status
	}
	return 0
}
