package hostemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Options configure an emulator.
type Options struct {
	// Root holds host.json and functions/.
	Root string
	// Handler overrides the executable host.json names (relative to Root).
	Handler string
	// Listen is the address HTTP triggers are served on.
	Listen string
	// Settings resolves %NAME% references (local.settings.json, then the
	// environment, then documented defaults).
	Settings Settings
	// Env is extra environment for the handler process (NAME=value).
	Env []string
	// Store feeds cosmosDBTrigger functions. Changed, when set, returns a
	// channel that signals that a container may have changed; a feed with
	// such a signal waits for it instead of polling every feedPollDelay.
	Store   FeedStore
	Changed func(container string) <-chan struct{}
	// StoreStats, when set, reports the emulator's own store operations
	// (change-feed reads, checkpoints) in /admin/host/status.
	StoreStats func() any
	Log        *slog.Logger
}

// Emulator is a running local Functions host.
type Emulator struct {
	opts   Options
	app    *App
	child  *Child
	front  *httpFront
	timers []*timerTrigger
	feeds  []*feedTrigger
	// off holds the functions an app setting disables: their triggers do
	// not fire (a disabled timer still runs through the admin API).
	off map[string]bool
}

// New loads the app and checks every function's configuration, so a bad
// schedule or a missing setting fails at start, naming the function.
func New(opts Options) (*Emulator, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	app, err := LoadApp(opts.Root)
	if err != nil {
		return nil, err
	}
	e := &Emulator{opts: opts, app: app, off: map[string]bool{}}
	desc := app.Host.CustomHandler.Description
	path := opts.Handler
	if path == "" {
		path = filepath.Join(opts.Root, desc.DefaultExecutablePath)
	}
	dir := opts.Root
	if desc.WorkingDirectory != "" {
		dir = filepath.Join(opts.Root, desc.WorkingDirectory)
	}
	e.child = &Child{Path: path, Args: desc.Arguments, Dir: dir, Env: opts.Env, Log: opts.Log}

	mode := app.Host.HTTPMode()
	if opts.Settings != nil {
		forced, ok, err := parseHTTPMode(opts.Settings(HTTPModeSetting))
		if err != nil {
			return nil, err
		}
		if ok {
			mode = forced
		}
	}
	var routes []*httpRoute
	for _, fn := range app.Functions {
		off, err := opts.Settings.Disabled(fn.Name)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", fn.Name, err)
		}
		if off {
			e.off[fn.Name] = true
			opts.Log.Info("function disabled by its app setting: its trigger does not fire", "function", fn.Name)
		}
		// A disabled function's configuration is still checked, as the
		// host still indexes it.
		trig, _ := fn.Trigger()
		switch strings.ToLower(trig.Type) {
		case "httptrigger":
			r, err := newHTTPRoute(fn, trig, opts.Settings, mode)
			if err != nil {
				return nil, fmt.Errorf("function %s: %w", fn.Name, err)
			}
			if !off {
				routes = append(routes, r)
			}
		case "timertrigger":
			var store statusStore
			if opts.Store != nil {
				store = opts.Store
			}
			t, err := newTimerTrigger(fn, trig, opts.Settings, store, e.child, opts.Log)
			if err != nil {
				return nil, err
			}
			e.timers = append(e.timers, t)
		case "cosmosdbtrigger":
			f, err := newFeedTrigger(fn, trig, opts.Settings, opts.Store, nil, e.child, opts.Log)
			if err != nil {
				return nil, err
			}
			if off {
				continue // no reader, so it splits no feed
			}
			for _, other := range e.feeds {
				if other.leaseKey() == f.leaseKey() {
					return nil, fmt.Errorf("functions %s and %s both follow %s with the leases of %s and the same leaseContainerPrefix %q: the host would split the feed between them; give each its own leaseContainerPrefix",
						other.fn.Name, fn.Name, f.container, f.lease, f.prefix)
				}
				// The emulator's own names may still meet (a function
				// without a prefix is named after itself: "echo" and the
				// prefix "echo." on one container): one checkpoint
				// written by both would skip each other's batches.
				if other.lease == f.lease && other.leaseID == f.leaseID {
					prefixed := fn.Name // the one whose prefix makes the clash
					if f.prefix == "" {
						prefixed = other.fn.Name
					}
					return nil, fmt.Errorf("functions %s and %s would keep one checkpoint, %s in %s: give %s a leaseContainerPrefix that is not another function's name",
						other.fn.Name, fn.Name, f.leaseID, f.lease, prefixed)
				}
			}
			if opts.Changed != nil {
				f.changed = opts.Changed(f.container)
			}
			e.feeds = append(e.feeds, f)
		default:
			return nil, fmt.Errorf("function %s: trigger type %s is not emulated", fn.Name, trig.Type)
		}
	}
	e.front = newHTTPFront(app.Host.RoutePrefix(), routes, e.child)
	e.front.status = e.Status
	e.front.runTimer = e.RunTimer
	// functionTimeout bounds every invocation, whatever its trigger: one
	// past it fails (a change-feed batch is then retried as any failure).
	timeout, _ := app.Host.Timeout() // LoadApp checked it
	e.front.timeout, e.front.client.Timeout = timeout, timeout
	for _, t := range e.timers {
		t.client.Timeout = timeout
	}
	for _, f := range e.feeds {
		f.client.Timeout = timeout
	}
	return e, nil
}

// RunTimer runs the timer function name once now, as the host's admin API
// does, never overlapping that timer's scheduled runs. found is false when
// no timer function has that name.
func (e *Emulator) RunTimer(ctx context.Context, name string) (found bool, err error) {
	for _, t := range e.timers {
		if t.fn.Name == name {
			return true, t.fire(ctx, funchost.TimerInfo{})
		}
	}
	return false, nil
}

// Status is what GET /admin/host/status answers, as the Functions host's
// own status endpoint does (there behind the master key; here the emulator
// listens on loopback by default).
type Status struct {
	State     string                `json:"state"`
	Functions []string              `json:"functions"`
	Handler   HandlerStatus         `json:"handler"`
	Disabled  []string              `json:"disabled,omitempty"`
	Feeds     map[string]FeedStatus `json:"feeds"`
	Store     any                   `json:"store,omitempty"`
}

// HandlerStatus describes the custom-handler process.
type HandlerStatus struct {
	PID      int   `json:"pid"`
	Restarts int64 `json:"restarts"`
}

// Status reports the emulator's state.
func (e *Emulator) Status() Status {
	st := Status{State: "Running", Feeds: map[string]FeedStatus{},
		Handler: HandlerStatus{PID: e.child.PID(), Restarts: e.child.Restarts()}}
	if st.Handler.PID == 0 {
		st.State = "Initializing"
	}
	for _, f := range e.app.Functions {
		st.Functions = append(st.Functions, f.Name)
	}
	st.Disabled = e.Disabled()
	for _, f := range e.feeds {
		st.Feeds[f.fn.Name] = f.status()
	}
	if e.opts.StoreStats != nil {
		st.Store = e.opts.StoreStats()
	}
	return st
}

// Disabled names the functions an app setting disables, in the app's
// order.
func (e *Emulator) Disabled() []string {
	var out []string
	for _, f := range e.app.Functions {
		if e.off[f.Name] {
			out = append(out, f.Name)
		}
	}
	return out
}

// App is the loaded function app.
func (e *Emulator) App() *App { return e.app }

// Child is the handler process supervisor.
func (e *Emulator) Child() *Child { return e.child }

// Run starts the handler, then serves until ctx ends. ready is called with
// the listening address once everything runs.
func (e *Emulator) Run(ctx context.Context, ready func(addr string)) error {
	ln, err := net.Listen("tcp", e.opts.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", e.opts.Listen, err)
	}
	defer ln.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	started := make(chan error, 1)
	childDone := make(chan error, 1)
	go func() { childDone <- e.child.Run(ctx, started) }()
	if err := <-started; err != nil {
		return err
	}
	for _, t := range e.timers {
		if !e.off[t.fn.Name] {
			wg.Go(func() { t.run(ctx) })
		}
	}
	for _, f := range e.feeds {
		wg.Go(func() { f.run(ctx) })
	}
	srv := &http.Server{Handler: e.front, ReadHeaderTimeout: 10 * time.Second}
	funchost.EndRequestsOnShutdown(srv, funchost.ShutdownGrace)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdownCtx)
	cancel()
	wg.Wait()
	<-childDone
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
