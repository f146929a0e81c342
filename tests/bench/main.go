// Command bench measures the fleet on the real local stack (`make bench`):
// it builds the handler and fleet-local, starts them with a fresh data
// directory and push dispatch on the embedded NATS server (every other
// setting at its default), drives them over HTTP and NATS as factories and
// an operator would, and prints a table of figures with their targets:
//
//  1. dispatch latency, submit -> message received by the target factory;
//  2. full-lifecycle throughput with no-op workers;
//  3. store operations per lifecycle, in the handler and the host emulator;
//  4. store operations while the fleet is idle;
//  5. the raw SQLite CAS write rate, and what it allows per lifecycle;
//  6. live events: a job's event visible to an SSE client after its write;
//  7. forge webhooks: a signed review's POST until the iteration is queued;
//  8. live output: an engine's line visible to a follower of its run's log,
//     20 runs at once.
//
// A missed target is reported, not fatal; a failed run (a job lost, a
// stack error) exits 1. See README.md beside this file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	Jobs       int
	Warmup     int
	Rate       float64
	Lifecycles int
	Idle       time.Duration
	Steps      int
	CAS        time.Duration
	SSE        int
	Webhooks   int
	LiveLog    bool
	JSON       string
	Root       string
}

// MarshalJSON writes the settings that shape the figures, durations as
// text.
func (c config) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{
		"jobs": c.Jobs, "warmupJobs": c.Warmup, "ratePerSec": c.Rate, "lifecycles": c.Lifecycles,
		"idle": c.Idle.String(), "stepRuns": c.Steps, "cas": c.CAS.String(), "sse": c.SSE, "webhooks": c.Webhooks, "liveLog": c.LiveLog,
	})
}

func parseFlags() (config, error) {
	var c config
	flag.IntVar(&c.Jobs, "jobs", 2000, "jobs in the dispatch-latency phase")
	flag.IntVar(&c.Warmup, "warmup", 100, "jobs submitted at the same rate before the dispatch-latency phase's, reported apart (a fresh stack's first jobs pay its cold start)")
	flag.Float64Var(&c.Rate, "rate", 100, "submit rate of the dispatch-latency phase, jobs/s")
	flag.IntVar(&c.Lifecycles, "lifecycles", 1000, "jobs in the full-lifecycle throughput phase")
	flag.DurationVar(&c.Idle, "idle", 60*time.Second, "length of the idle window")
	flag.IntVar(&c.Steps, "steps", 10, "single lifecycles run step by step for the per-step store-operation breakdown (0 skips)")
	flag.DurationVar(&c.CAS, "cas", 5*time.Second, "length of each of the two raw SQLite CAS measurements (a lifecycle's writes; same-document writes)")
	flag.IntVar(&c.SSE, "sse", 200, "jobs submitted one at a time while an SSE client watches their product (0 skips)")
	flag.IntVar(&c.Webhooks, "webhooks", 100, "pull requests sent back by a signed forge webhook, one at a time (0 skips)")
	flag.BoolVar(&c.LiveLog, "livelog", true, "measure live output: 20 runs streaming their logs to followers")
	flag.StringVar(&c.JSON, "json", "", "also write the figures as JSON to this file")
	flag.StringVar(&c.Root, "root", "", "repository root (default: found upward from the working directory)")
	flag.Parse()
	switch {
	case flag.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", flag.Args())
	case c.Jobs < 1 || c.Lifecycles < 1:
		return c, errors.New("-jobs and -lifecycles must be at least 1")
	case c.Warmup < 0:
		return c, errors.New("-warmup must not be negative")
	case c.Jobs+c.Warmup > 4000:
		// The phase's 4 factories hold every job's lease until it ends, and
		// a factory has at most 1,000 seats.
		return c, errors.New("-jobs plus -warmup must be at most 4000")
	case c.Rate <= 0 || c.Rate > 10_000:
		return c, errors.New("-rate must be in (0, 10000] jobs/s")
	case c.Idle < time.Second || c.CAS < 100*time.Millisecond:
		return c, errors.New("-idle must be at least 1s and -cas at least 100ms")
	case c.Steps < 0:
		return c, errors.New("-steps must not be negative")
	}
	return c, nil
}

func main() {
	if os.Getenv(handoffServerEnv) != "" {
		if err := serveHandoff(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: hand-over server:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := run(ctx, cfg)
	stop()
	if res != nil {
		if res.Machine.LoadAvgEnd == "" {
			res.Machine.LoadAvgEnd = loadAvg()
		}
		res.evaluate()
		res.print(os.Stdout)
		if cfg.JSON != "" {
			if werr := res.writeJSON(cfg.JSON); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: run failed:", err)
		os.Exit(1)
	}
}

// session is one run: the stack, the operator's client, the probe, and the
// background goroutines (heartbeats, receivers, workers) of the simulated
// factories, which run until the run ends.
type session struct {
	cfg       config
	root      string // the repository
	tmp       string // the run's scratch directory
	st        *stack
	op        *client
	probe     *prober
	bgCtx     context.Context
	bg        sync.WaitGroup
	fail      context.CancelCauseFunc
	factories []*factory
	forge     *forgeDouble
}

// background runs fn on bgCtx; an error from it ends the whole run.
func (s *session) background(fn func(ctx context.Context) error) {
	s.bg.Go(func() {
		if err := fn(s.bgCtx); err != nil {
			s.fail(err)
		}
	})
}

// addFactory enrolls and subscribes a factory with seats seats and starts
// its heartbeats.
func (s *session) addFactory(ctx context.Context, id, product, repo string, seats, conns int) (*factory, error) {
	f, err := newFactory(ctx, s.st, s.op, id, product, repo, seats, conns)
	if err != nil {
		return nil, err
	}
	s.factories = append(s.factories, f)
	s.background(f.heartbeatLoop)
	return f, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// run builds, starts the stack, runs every phase and returns the figures.
// Results gathered before a failure are returned with the error.
func run(parent context.Context, cfg config) (*results, error) {
	res := &results{Started: time.Now(), Config: cfg, Machine: machine()}
	root, err := findRoot(cfg.Root)
	if err != nil {
		return nil, err
	}
	if isFile(filepath.Join(root, "local.settings.json")) {
		progress("note: %s exists; its Values apply to the stack as they do to `make run`", filepath.Join(root, "local.settings.json"))
	}
	tmp, err := os.MkdirTemp("", "fleet-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	progress("building the handler and fleet-local from %s", root)
	handler, local, err := buildBinaries(parent, root, tmp)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(tmp, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		return nil, err
	}
	forge, err := startForgeDouble(tmp)
	if err != nil {
		return nil, err
	}
	defer forge.close()
	st, err := startStack(parent, root, handler, local, dataDir, forge.env...)
	if err != nil {
		return nil, err
	}
	progress("stack at %s, NATS at %s, data in %s", st.URL, st.NATS, dataDir)

	ctx, fail := context.WithCancelCause(parent)
	defer fail(nil)
	bgCtx, stopBG := context.WithCancel(ctx)
	s := &session{cfg: cfg, root: root, tmp: tmp, st: st, op: newClient(st.URL, st.Token, 32), bgCtx: bgCtx, fail: fail, forge: forge}
	s.probe = &prober{op: s.op}
	st.watch(bgCtx, fail)

	jobBody, phaseErr := s.phases(ctx, res)
	res.JobBytes = len(jobBody)
	stopBG()
	s.bg.Wait()
	for _, f := range s.factories {
		f.close()
	}
	s.op.close()
	if err := st.stop(); err != nil {
		phaseErr = errors.Join(phaseErr, err)
	}
	if phaseErr != nil {
		return res, phaseErr
	}

	if cfg.Jobs > 0 {
		progress("1b. this machine's hand-over floor: %d HTTP round trips between two processes at %g/s, then %d back to back", handoffTrips, cfg.Rate, handoffTrips)
		if res.Handoff, err = runHandoff(parent, cfg.Rate); err != nil {
			return res, fmt.Errorf("hand-over floor: %w", err)
		}
	}
	return res, nil
}

// phases runs the phases against the stack in an order that keeps them
// apart: the idle window sees only the latency phase's four factories, and
// no phase leaves a lease behind to expire into a later one. It returns a
// shipped job's document, the body the raw CAS phase wrote.
func (s *session) phases(ctx context.Context, res *results) (jobBody []byte, err error) {
	if err := s.probe.calibrate(ctx); err != nil {
		return nil, err
	}
	res.ProbeQueries = s.probe.probeQueries

	progress("1. dispatch latency: %d jobs at %g jobs/s over 4 factories, after %d warm-up jobs", s.cfg.Jobs, s.cfg.Rate, s.cfg.Warmup)
	if res.Latency, err = s.runLatency(ctx); err != nil {
		return nil, fmt.Errorf("dispatch latency: %w", err)
	}
	// The sweeps' first ticks after phase 1 scan once and record that
	// there is nothing left; measured first, so the idle window shows the
	// steady state.
	timers, err := timerFunctions(s.root)
	if err != nil {
		return nil, err
	}
	progress("4a. one tick of each timer sweep, %d times: %v", sweepRuns, timers)
	if res.Sweeps, err = s.runSweeps(ctx, timers); err != nil {
		return nil, fmt.Errorf("sweeps: %w", err)
	}
	progress("4. idle window of %s with 4 connected factories", s.cfg.Idle)
	if res.Idle, err = s.runIdle(ctx); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	progress("2+3. full lifecycles: %d jobs over 8 factories", s.cfg.Lifecycles)
	var shipped string
	if res.Lifecycle, shipped, err = s.runLifecycles(ctx); err != nil {
		return nil, fmt.Errorf("lifecycle throughput: %w", err)
	}
	if jobBody, err = s.op.getJobRaw(ctx, lifecycleProduct, shipped); err != nil {
		return nil, err
	}
	// Phase 2's rate is held to this one, and this machine's speed moves
	// within minutes, so it runs right after phase 2 (which ends when the
	// change feed has caught up), with the stack idle.
	progress("5. raw SQLite CAS writes: a lifecycle's writes for %s, then same-document writes for %s", s.cfg.CAS, s.cfg.CAS)
	if res.CAS, err = s.runCAS(ctx, jobBody); err != nil {
		return nil, fmt.Errorf("raw CAS: %w", err)
	}
	if s.cfg.Steps > 0 {
		progress("per-step breakdown: %d single lifecycles", s.cfg.Steps)
		if res.Steps, err = s.runSteps(ctx, s.cfg.Steps); err != nil {
			return nil, fmt.Errorf("per-step breakdown: %w", err)
		}
	}
	// Last: its client keeps the live watcher polling, and its jobs stay
	// queued (no factory has their repo).
	if s.cfg.SSE > 0 {
		progress("6. live events: %d jobs, each submitted after the last one's event reached an SSE client", s.cfg.SSE)
		if res.SSE, err = s.runSSE(ctx); err != nil {
			return nil, fmt.Errorf("live events: %w", err)
		}
	}
	if s.cfg.Webhooks > 0 {
		progress("7. forge webhooks: %d pull requests sent back for another iteration, one at a time", s.cfg.Webhooks)
		if res.Webhooks, err = s.runWebhooks(ctx, s.cfg.Webhooks); err != nil {
			return nil, fmt.Errorf("forge webhooks: %w", err)
		}
	}
	if s.cfg.LiveLog {
		progress("8. live output: %d runs writing a line every %v, each followed over its log stream", logRuns, logLineEvery)
		if res.LiveLog, err = s.runLiveLog(ctx); err != nil {
			return nil, fmt.Errorf("live output: %w", err)
		}
	}
	return jobBody, nil
}

// machineInfo describes where the run happened.
type machineInfo struct {
	OS           string `json:"os"`
	CPUs         int    `json:"cpus"`
	Go           string `json:"go"`
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
}

func machine() machineInfo {
	return machineInfo{OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadAvgStart: loadAvg()}
}

// loadAvg is the 1, 5 and 15 minute load averages, where the OS tells.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
