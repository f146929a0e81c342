package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/secret"
)

// Pool is one elastic pool as the local stack runs it: the local stand-in
// for a Container Apps Job and its KEDA rule (terraform/factories.tf).
type Pool struct {
	// Name is the factory id the pool is enrolled as, and its subscription.
	Name string `json:"-"`
	// Command runs one execution: the factory program and its arguments
	// (it should include --once, as the Container Apps Job does).
	Command []string `json:"command"`
	// TokenFile holds the pool's factory token; it is read at every start,
	// so it may be written after the stack is up (the token exists only
	// once the pool is enrolled).
	TokenFile string `json:"tokenFile"`
	// Env is extra environment of every execution (FLEET_REPO_URLS,
	// FLEET_ENGINE_*, FLEET_CAPABILITIES, ...).
	Env map[string]string `json:"env"`
	// MaxExecutions is KEDA's maxExecutions; default 10.
	MaxExecutions int64 `json:"maxExecutions"`
	// MessagesPerExecution is KEDA's messageCount; default 1.
	MessagesPerExecution int64 `json:"messagesPerExecution"`
	// PollingInterval is KEDA's pollingInterval (a Go duration); default 2s
	// here (30s is Azure's default, sized for a cold start the local
	// stack does not have).
	PollingInterval string `json:"pollingInterval"`
	// Strategy is the scaling strategy; default "default", the one
	// Container Apps Jobs run.
	Strategy string `json:"strategy"`
}

// Defaults of Pool.
const (
	DefaultMaxExecutions   = 10
	DefaultPollingInterval = 2 * time.Second
)

// ReadPools reads a pools file: a JSON object from pool name to Pool.
// Relative paths in it (command, token file) are taken from the file's
// directory.
func ReadPools(path string) ([]Pool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]Pool
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	base := filepath.Dir(path)
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	out := make([]Pool, 0, len(m))
	for _, name := range names {
		p := m[name]
		p.Name = name
		if err := bus.ValidateSubscription(name); err != nil {
			return nil, fmt.Errorf("%s: pool %q: %w", path, name, err)
		}
		if len(p.Command) == 0 || p.Command[0] == "" {
			return nil, fmt.Errorf("%s: pool %q: command is required (the factory program and --once)", path, name)
		}
		if p.TokenFile == "" {
			return nil, fmt.Errorf("%s: pool %q: tokenFile is required", path, name)
		}
		if strings.Contains(p.Command[0], "/") && !filepath.IsAbs(p.Command[0]) {
			p.Command[0] = filepath.Join(base, p.Command[0])
		}
		if !filepath.IsAbs(p.TokenFile) {
			p.TokenFile = filepath.Join(base, p.TokenFile)
		}
		if p.MaxExecutions == 0 {
			p.MaxExecutions = DefaultMaxExecutions
		}
		if p.MessagesPerExecution == 0 {
			p.MessagesPerExecution = 1
		}
		if p.MaxExecutions < 1 || p.MessagesPerExecution < 1 {
			return nil, fmt.Errorf("%s: pool %q: maxExecutions and messagesPerExecution must be positive", path, name)
		}
		if _, err := p.interval(); err != nil {
			return nil, fmt.Errorf("%s: pool %q: %w", path, name, err)
		}
		if _, err := ParseStrategy(p.Strategy); err != nil {
			return nil, fmt.Errorf("%s: pool %q: %w", path, name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (p Pool) interval() (time.Duration, error) {
	if p.PollingInterval == "" {
		return DefaultPollingInterval, nil
	}
	d, err := time.ParseDuration(p.PollingInterval)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("pollingInterval %q: want a positive Go duration", p.PollingInterval)
	}
	return d, nil
}

// Depther reads a subscription's depth (both bus backends implement it).
type Depther interface {
	Depth(ctx context.Context, sub string) (int64, error)
}

// Options configure a Launcher.
type Options struct {
	Pool  Pool
	Depth Depther
	// Env is set in every execution over the pool's Env: what the stack
	// knows (FLEET_URL, FLEET_TRANSPORT, FLEET_NATS_URL).
	Env map[string]string
	// Dir holds the executions' directories (each one's work dir and
	// repo base, removed when it exits, as a replica's disk is) and logs.
	Dir string
	Log *slog.Logger
}

// claimedLine is how an execution says it holds its job: the factory's
// "job claimed" log line (info level), written after its accept. Until
// then the execution is pending. Only the accurate strategy deducts
// pending executions (their messages are still in the depth); the default
// strategy deducts every running one.
const claimedLine = `"msg":"job claimed"`

// Launcher runs one pool: every polling interval it reads the depth and
// starts executions by Starts.
type Launcher struct {
	o        Options
	interval time.Duration
	strategy Strategy
	log      *slog.Logger

	mu      sync.Mutex
	seq     int
	running map[int]*execution
	wg      sync.WaitGroup
}

type execution struct {
	n       int
	cmd     *exec.Cmd
	claimed bool // guarded by Launcher.mu
}

// New returns a launcher for o.Pool (as ReadPools returns it).
func New(o Options) (*Launcher, error) {
	iv, err := o.Pool.interval()
	if err != nil {
		return nil, err
	}
	st, err := ParseStrategy(o.Pool.Strategy)
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if lvl := strings.ToLower(o.Pool.Env["FLEET_LOG_LEVEL"]); st == Accurate && (lvl == "warn" || lvl == "error") {
		o.Log.Warn("pool executions log above info: each counts as pending until it exits, so starts lag",
			"pool", o.Pool.Name, "FLEET_LOG_LEVEL", lvl)
	}
	return &Launcher{o: o, interval: iv, strategy: st, log: o.Log.With("pool", o.Pool.Name),
		running: map[int]*execution{}}, nil
}

// Run polls until ctx ends, then stops every execution (SIGTERM: a factory
// checkpoints and releases its job) and waits for them.
func (l *Launcher) Run(ctx context.Context) {
	l.log.Info("pool launcher started", "strategy", string(l.strategy), "pollingInterval", l.interval.String(),
		"maxExecutions", l.o.Pool.MaxExecutions, "messagesPerExecution", l.o.Pool.MessagesPerExecution)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		l.tick(ctx)
		select {
		case <-ctx.Done():
			l.stopAll()
			return
		case <-t.C:
		}
	}
}

func (l *Launcher) tick(ctx context.Context) {
	depth, err := l.o.Depth.Depth(ctx, l.o.Pool.Name)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		depth = 0 // nothing was ever sent to the pool
	case err != nil:
		if ctx.Err() == nil {
			l.log.Warn("pool depth", "err", err)
		}
		return
	}
	running, pending := l.counts()
	n := Starts(l.strategy, Load{Depth: depth, PerExecution: l.o.Pool.MessagesPerExecution,
		Running: running, Pending: pending, Max: l.o.Pool.MaxExecutions})
	if n == 0 {
		return
	}
	// An execution without a token would only fail; the factory reads the
	// file itself (FLEET_FACTORY_TOKEN_FILE), so the token is never in its
	// environment.
	if _, err := secret.Resolve(secret.Setting{File: l.o.Pool.TokenFile, FileName: "tokenFile"}); err != nil {
		l.log.Warn("pool has messages but no token yet; enroll it and write its token file",
			"tokenFile", l.o.Pool.TokenFile, "depth", depth, "err", err)
		return
	}
	l.log.Info("pool scaling", "depth", depth, "running", running, "pending", pending, "starting", n)
	for range n {
		if err := l.start(); err != nil {
			l.log.Error("start pool execution", "err", err)
			return
		}
	}
}

func (l *Launcher) counts() (running, pending int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.running {
		running++
		if !e.claimed {
			pending++
		}
	}
	return running, pending
}

// env is the execution's environment: a clean one (the stack's own
// settings, its operator token above all, are not the factory's), then
// the pool's, then the stack's, then the per-execution identity and dirs.
func (l *Launcher) env(dir string) []string {
	m := map[string]string{}
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "USER"} {
		if v, ok := os.LookupEnv(k); ok {
			m[k] = v
		}
	}
	m["FLEET_LOG_LEVEL"] = "info" // the claim signal is an info line
	m["FLEET_REPO_BASE"] = filepath.Join(dir, "repos")
	for k, v := range l.o.Pool.Env {
		m[k] = v
	}
	for k, v := range l.o.Env {
		m[k] = v
	}
	m["FLEET_FACTORY_ID"] = l.o.Pool.Name
	delete(m, "FLEET_FACTORY_TOKEN")
	m["FLEET_FACTORY_TOKEN_FILE"] = l.o.Pool.TokenFile
	m["FLEET_WORK_DIR"] = filepath.Join(dir, "work")
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func (l *Launcher) start() error {
	l.mu.Lock()
	l.seq++
	n := l.seq
	l.mu.Unlock()
	dir := filepath.Join(l.o.Dir, "exec-"+strconv.Itoa(n))
	if err := os.MkdirAll(filepath.Join(dir, "repos"), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(l.o.Dir, "exec-"+strconv.Itoa(n)+".log"))
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	args := l.o.Pool.Command
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, l.env(dir), pw, pw
	if err := cmd.Start(); err != nil {
		_, _, _ = logf.Close(), pr.Close(), pw.Close()
		return fmt.Errorf("%s: %w", args[0], err)
	}
	_ = pw.Close() // the child holds its end
	e := &execution{n: n, cmd: cmd}
	l.mu.Lock()
	l.running[n] = e
	running := len(l.running)
	l.mu.Unlock()
	l.log.Info("pool execution started", "execution", n, "pid", cmd.Process.Pid, "running", running)

	l.wg.Go(func() {
		l.watch(e, pr, logf)
		err := cmd.Wait()
		_ = logf.Close()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		// The replica's disk goes with it; its log stays for the operator.
		_ = os.RemoveAll(dir)
		l.mu.Lock()
		delete(l.running, n)
		running := len(l.running)
		l.mu.Unlock()
		l.log.Info("pool execution exited", "execution", n, "exitCode", code, "running", running)
	})
	return nil
}

// watch copies the execution's output to its log and marks it claimed at
// the claim line.
func (l *Launcher) watch(e *execution, r io.ReadCloser, w io.Writer) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = w.Write(append(line, '\n'))
		if strings.Contains(string(line), claimedLine) {
			l.mu.Lock()
			e.claimed = true
			l.mu.Unlock()
		}
	}
	// A line too long for the scanner ends the copy, not the execution.
	_, _ = io.Copy(io.Discard, r)
}

// stopGrace is how long stopping executions may take before they are
// killed (Container Apps gives a replica 30 s; the stack's own stop waits
// as long).
const stopGrace = 15 * time.Second

func (l *Launcher) stopAll() {
	signalAll := func(sig os.Signal) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, e := range l.running {
			_ = e.cmd.Process.Signal(sig)
		}
	}
	signalAll(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopGrace):
		l.log.Warn("pool executions still running after SIGTERM; killing them", "grace", stopGrace.String())
		signalAll(syscall.SIGKILL)
		<-done
	}
}
