// Command fleetctl drives the fleet from a terminal: jobs, factories,
// products, repos, profiles, metrics and alerts over the /api/fleet HTTP
// API, as tables or JSON. `fleetctl --help` lists the commands, the
// connection settings and the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gigafactory/fleet/infra/fleetctl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
