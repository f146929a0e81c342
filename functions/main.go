// Command handler is the fleet's Azure Functions custom handler: one binary
// serving every function of this app (the folders beside this file, each with
// its function.json). The Functions host, or the local host emulator, starts
// it with FUNCTIONS_CUSTOMHANDLER_PORT, probes "/", forwards HTTP requests
// and POSTs trigger invocations to /{function}.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/functions/api"
	"github.com/gigafactory/fleet/functions/dispatch"
	"github.com/gigafactory/fleet/functions/echo"
	"github.com/gigafactory/fleet/functions/echosweep"
	"github.com/gigafactory/fleet/functions/forgesweep"
	"github.com/gigafactory/fleet/functions/gcsweep"
	"github.com/gigafactory/fleet/functions/prune"
	"github.com/gigafactory/fleet/functions/reaper"
	"github.com/gigafactory/fleet/functions/redispatch"
	"github.com/gigafactory/fleet/shared/app"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/funchost"
)

// PortVar is the variable the host passes the handler's port in.
const PortVar = "FUNCTIONS_CUSTOMHANDLER_PORT"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "handler:", err)
		os.Exit(1)
	}
}

func run() error {
	l := config.Lookup{}
	log, err := app.NewLogger(l)
	if err != nil {
		return err
	}
	port := os.Getenv(PortVar)
	if port == "" {
		return fmt.Errorf("%s is not set: the Functions host (or `go run ./local`) starts this binary and sets it", PortVar)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// This binary serves the dispatch function (the change feed of the
	// jobs), so its sweeps may trust the ledger.
	a, err := app.Open(ctx, l, log, app.WithChangeFeed())
	if err != nil {
		return err
	}
	defer a.Close()

	// The host talks to the handler over loopback only.
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newServer(a, forwardHTTP), ReadHeaderTimeout: 10 * time.Second}
	funchost.EndRequestsOnShutdown(srv, funchost.ShutdownGrace)
	log.Info("handler listening", "addr", ln.Addr().String(), "functions", len(functions(a)))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
		log.Info("handler shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			return err
		}
	}
	return nil
}

// functions maps every function folder to its handler.
func functions(a *app.App) map[string]funchost.Func {
	log := a.Log
	return map[string]funchost.Func{
		api.Name:        api.Func(a.API),
		dispatch.Name:   dispatch.Func(a.Coord, log),
		reaper.Name:     reaper.Func(a.Coord, log),
		redispatch.Name: redispatch.Func(a.Coord, log),
		gcsweep.Name:    gcsweep.Func(a.Coord, log),
		prune.Name:      prune.Func(a.Coord, log),
		forgesweep.Name: forgesweep.Func(a.Coord, log),
		echo.Name:       echo.Func(a.Coord, log),
		echosweep.Name:  echosweep.Func(a.Coord, log),
	}
}

// forwardHTTP says host.json's customHandler proxies or forwards HTTP
// requests (enableProxyingHttpRequest, enableForwardingHttpRequest; a test
// keeps the two equal): the host then sends HTTP requests as they came,
// under /api/, and invokes no http function by envelope. Proxying wins where
// the host knows it, and streams responses (the live event streams);
// forwarding is what a host older than it does, buffering each response.
const forwardHTTP = true

// newServer serves every function; with forwarding, HTTP requests reach the
// API at their own paths, without it only as api function envelopes.
func newServer(a *app.App, forwarding bool) *funchost.Server {
	s := funchost.NewServer(a.Log, "", nil)
	if forwarding {
		s = funchost.NewServer(a.Log, "/api/", a.API)
	}
	for name, f := range functions(a) {
		s.Handle(name, f)
	}
	s.AnswerProbeWith(os.Getenv(funchost.ProbeIDEnv))
	return s
}
