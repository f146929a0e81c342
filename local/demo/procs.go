package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// proc is a child the demo started, leader of its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// procGroup holds the children in start order: stopped in reverse (the
// factories before the stack).
type procGroup struct {
	mu    sync.Mutex
	procs []*proc
}

// stopGrace is how long a child has after SIGTERM before its process group
// is killed: a factory stops its engines (FLEET_KILL_GRACE) and releases its
// jobs within it.
const stopGrace = 20 * time.Second

// start starts cmd in a process group of its own, so a terminal's Ctrl-C
// reaches only the demo, which then stops the children in order.
func (g *procGroup) start(name string, cmd *exec.Cmd) (*proc, error) {
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p, nil
}

// stopAll stops every child, last started first: SIGTERM to its group,
// SIGKILL to the group after stopGrace. It returns an error naming a child
// that had to be killed.
func (g *procGroup) stopAll() error {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			errs = append(errs, fmt.Errorf("%s did not stop within %s of SIGTERM: killed", p.name, stopGrace))
		}
		// Whatever is left in the group (nothing, normally) goes too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	return errors.Join(errs...)
}

// exited reports whether p has ended, with its error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stackInfo is what the stack's start-up banner says.
type stackInfo struct {
	URL     string // http://host:port
	Token   string // operator token
	NATSURL string // "" when dispatch is poll-only
	proc    *proc
}

var (
	listeningRE = regexp.MustCompile(`^fleet: listening on (http://[0-9.:]+)`)
	tokenRE     = regexp.MustCompile(`^fleet: operator token \(.*\): (\S+)$`)
	natsRE      = regexp.MustCompile(`^fleet: dispatch on NATS at (nats://[0-9.:]+)`)
)

// stackReady ends the stack's banner (local/main.go).
const stackReady = "Ctrl-C stops"

// startStack runs bin/fleet-local with its data under the demo dir, logs to
// logs/stack.log, and waits for its banner.
func (d *demo) startStack(ctx context.Context, env ...string) (stackInfo, error) {
	logf, err := os.Create(filepath.Join(d.opts.Dir, "logs", "stack.log"))
	if err != nil {
		return stackInfo{}, err
	}
	cmd := exec.Command(filepath.Join(d.opts.Bin, "fleet-local"), "-root", d.opts.Root, "-handler", filepath.Join(d.opts.Bin, "handler"))
	cmd.Env = append(os.Environ(),
		"FLEET_LISTEN="+d.opts.Listen,
		"FLEET_DATA_DIR="+filepath.Join(d.opts.Dir, "data"),
		// Another stack (make run) may hold the default NATS port.
		"FLEET_NATS_LISTEN=127.0.0.1:0",
		"FLEET_LOG_LEVEL=warn",
		// Generated and kept in the data dir, like make run's.
		"FLEET_OPERATOR_TOKEN=",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = d.opts.Root
	// The banner is read from a pipe the scanner below drains to the end,
	// so the stack never blocks on its stdout.
	stdout, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = io.MultiWriter(logf, pw), logf
	p, err := d.procs.start("stack", cmd)
	if err != nil {
		return stackInfo{}, err
	}
	p.closer(logf)
	p.closer(pw)
	info := stackInfo{proc: p}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		readyClosed := false
		for sc.Scan() {
			line := sc.Text()
			if readyClosed {
				continue
			}
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				info.URL = m[1]
			}
			if m := tokenRE.FindStringSubmatch(line); m != nil {
				info.Token = m[1]
			}
			if m := natsRE.FindStringSubmatch(line); m != nil {
				info.NATSURL = m[1]
			}
			if strings.Contains(line, stackReady) {
				readyClosed = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case <-ready:
	case <-p.done:
		return stackInfo{}, fmt.Errorf("the stack exited at start (%v); see %s", p.err, logf.Name())
	case <-time.After(60 * time.Second):
		return stackInfo{}, fmt.Errorf("the stack did not start within 60s; see %s", logf.Name())
	case <-ctx.Done():
		return stackInfo{}, ctx.Err()
	}
	if info.URL == "" || info.Token == "" {
		return stackInfo{}, fmt.Errorf("the stack's banner named no URL or operator token; see %s", logf.Name())
	}
	// fleetctl reads the token from a file (FLEET_TOKEN_FILE), never argv.
	if err := os.WriteFile(filepath.Join(d.opts.Dir, "operator-token"), []byte(info.Token+"\n"), 0o600); err != nil {
		return stackInfo{}, err
	}
	return info, nil
}

// closer closes c once p has exited.
func (p *proc) closer(c io.Closer) {
	go func() {
		<-p.done
		_ = c.Close()
	}()
}

// The demo's product, repo and factories.
const demoProduct, demoRepo = "demo", "demo"

var factoryIDs = []string{"demo-factory-1", "demo-factory-2"}

// startFactory enrols factory id (two seats, the demo product) and runs
// bin/factory with the demo engine over the repo base.
func (d *demo) startFactory(ctx context.Context, id, repoBase string) error {
	enrolled, err := d.api.Enroll(ctx, api.EnrollRequest{FactoryID: id, Kind: fleet.KindStatic, Products: []string{demoProduct}, SeatLimit: 2})
	if err != nil {
		return fmt.Errorf("enroll %s: %w", id, err)
	}
	dir := filepath.Join(d.opts.Dir, "factories", id)
	if err := os.MkdirAll(filepath.Join(dir, "work"), 0o755); err != nil {
		return err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(enrolled.Token+"\n"), 0o600); err != nil {
		return err
	}
	state := filepath.Join(d.opts.Dir, "engine-state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(d.opts.Dir, "logs", id+".log"))
	if err != nil {
		return err
	}
	engine := engineScript(d.opts.Root)
	cmd := exec.Command(filepath.Join(d.opts.Bin, "factory"))
	cmd.Env = append(os.Environ(),
		"FLEET_URL="+d.stack.URL,
		"FLEET_FACTORY_ID="+id,
		"FLEET_FACTORY_TOKEN_FILE="+tokenFile,
		"FLEET_FACTORY_TOKEN=",
		"FLEET_PRODUCT_ID="+demoProduct,
		"FLEET_REPO_BASE="+repoBase,
		"FLEET_WORK_DIR="+filepath.Join(dir, "work"),
		"FLEET_SEATS=2",
		// A template word, quoted in case the path has spaces.
		"FLEET_ENGINE_DEMO='"+engine+"'",
		"FLEET_DEFAULT_ENGINE=demo",
		// The claude preset, run with the demo's stand-in for Claude Code
		// first on PATH: its cost and turns come from its own output.
		"FLEET_ENGINE_CLAUDE=preset",
		"PATH="+agentsDir(d.opts.Root)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"FLEET_HEARTBEAT_INTERVAL=5s",
		"FLEET_POLL_INTERVAL=500ms",
		"FLEET_KILL_GRACE=2s",
		"FLEET_LOG_LEVEL=info",
		"FLEET_DEMO_STATE="+state,
		"FLEET_DEMO_ENGINE_SECONDS="+d.opts.EngineSeconds,
	)
	if d.stack.NATSURL != "" {
		cmd.Env = append(cmd.Env, "FLEET_TRANSPORT=nats", "FLEET_NATS_URL="+d.stack.NATSURL)
	} else {
		cmd.Env = append(cmd.Env, "FLEET_TRANSPORT=poll")
	}
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := d.procs.start(id, cmd)
	if err != nil {
		return err
	}
	p.closer(logf)
	return nil
}
