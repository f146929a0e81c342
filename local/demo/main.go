// Command demo is `make demo`: the local stack (as `make run` starts it),
// two real factory processes running the demo engine (engine.sh) over a
// local bare git repo it creates, and a handful of jobs that show what the
// fleet does — a DAG, a review-gated job (approved and shipped here, as an
// operator would), a job whose pull request (on a GitHub double, forge.go)
// is sent back once by its reviewer and then approved and merged, a job
// that fails once and succeeds when requeued, and plain ones. It prints the console URL, the operator token and the
// `fleetctl top` command, and drives the jobs to their terminal stages.
//
// Everything it starts runs in a process group of its own; Ctrl-C (SIGINT)
// or SIGTERM stops the factories (which stop their engines and release
// their jobs), then the stack, and waits for all of them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/api"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options are the demo's flags.
type options struct {
	Root          string // the repository: host.json, bin/, local/demo/engine.sh
	Dir           string // everything the demo writes; wiped at start
	Bin           string // the built binaries (make build)
	Listen        string // the stack's API address
	EngineSeconds string // how long each engine run takes
}

func run() error {
	var o options
	flag.StringVar(&o.Root, "root", ".", "the repository (host.json, local/demo/engine.sh)")
	flag.StringVar(&o.Dir, "dir", ".fleet-demo", "directory for the demo's data, origin, factories and logs; a previous demo's is wiped")
	flag.StringVar(&o.Bin, "bin", "bin", "directory of the built binaries (handler, fleet-local, factory, fleetctl)")
	flag.StringVar(&o.Listen, "listen", "127.0.0.1:7071", "address the stack serves the API and console on (127.0.0.1:0: any free port)")
	flag.StringVar(&o.EngineSeconds, "engine-seconds", "2", "how long each demo engine run works before its change")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", flag.Args())
	}
	for _, p := range []*string{&o.Root, &o.Dir, &o.Bin} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	if _, err := os.Stat(filepath.Join(o.Root, "host.json")); err != nil {
		return fmt.Errorf("-root %s: no host.json there (run from the repository)", o.Root)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	d := &demo{opts: o, out: os.Stdout, start: start}
	err := d.run(ctx)
	// Stop what runs whatever happened, factories first so they release
	// their jobs while the coordinator still answers.
	if serr := d.procs.stopAll(); serr != nil {
		err = errors.Join(err, serr)
	}
	if ferr := d.forge.close(); ferr != nil {
		err = errors.Join(err, ferr)
	}
	if err == nil || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(d.out, "demo: stopped; everything it started has exited")
		return nil
	}
	return err
}

// demo is one run.
type demo struct {
	opts  options
	out   io.Writer
	start time.Time
	procs procGroup
	api   *api.Client
	stack stackInfo
	forge *forgeDouble
}

func (d *demo) run(ctx context.Context) error {
	if err := prepareDir(d.opts.Dir); err != nil {
		return err
	}
	for _, name := range []string{"handler", "fleet-local", "factory", "fleetctl"} {
		if _, err := os.Stat(filepath.Join(d.opts.Bin, name)); err != nil {
			return fmt.Errorf("%s missing in %s: run `make build` (make demo does)", name, d.opts.Bin)
		}
	}
	// The factory advertises engine:demo only when it can run the script.
	for _, p := range []string{engineScript(d.opts.Root), filepath.Join(agentsDir(d.opts.Root), "claude")} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return fmt.Errorf("the demo engine %s is missing or not executable", p)
		}
	}
	fmt.Fprintf(d.out, "demo: starting the local stack, two factories and a GitHub double in %s\n", d.opts.Dir)
	var err error
	if d.forge, err = startForge(d.opts.Dir, originPath(d.opts.Dir)); err != nil {
		return fmt.Errorf("start the GitHub double: %w", err)
	}
	if d.stack, err = d.startStack(ctx, d.forge.env()...); err != nil {
		return err
	}
	d.api = api.New(api.Config{BaseURL: d.stack.URL, Token: d.stack.Token})
	origin, base, err := seedRepo(ctx, d.opts.Dir)
	if err != nil {
		return err
	}
	forge, _ := json.Marshal(forgeConfig())
	if _, err := d.api.PutProduct(ctx, demoProduct, api.ProductRequest{Repos: []string{demoRepo}, Forge: forge}); err != nil {
		return fmt.Errorf("declare product %s: %w", demoProduct, err)
	}
	for _, id := range factoryIDs {
		if err := d.startFactory(ctx, id, base); err != nil {
			return err
		}
	}
	jobs, err := d.submit(ctx)
	if err != nil {
		return err
	}
	d.banner(origin)
	return d.drive(ctx, jobs)
}

// banner says where to look.
func (d *demo) banner(origin string) {
	tokenFile := filepath.Join(d.opts.Dir, "operator-token")
	fleetctl := filepath.Join(d.opts.Bin, "fleetctl")
	fmt.Fprintf(d.out, `demo: the fleet is up (%s after start)
  console    %s/api/console/
             sign in with the operator token: %s
  dashboard  FLEET_URL=%s FLEET_TOKEN_FILE=%s %s -p %s top
  jobs       FLEET_URL=%s FLEET_TOKEN_FILE=%s %s -p %s jobs ls
  origin     git -C %s log --oneline --all
  logs       %s
demo: Ctrl-C stops the stack, the factories and their engines
`, time.Since(d.start).Round(time.Millisecond),
		d.stack.URL, d.stack.Token,
		d.stack.URL, tokenFile, fleetctl, demoProduct,
		d.stack.URL, tokenFile, fleetctl, demoProduct,
		origin, filepath.Join(d.opts.Dir, "logs"))
}

// engineScript is the demo engine, in the repository.
func engineScript(root string) string { return filepath.Join(root, "local", "demo", "engine.sh") }

// agentsDir holds the demo's stand-ins for agent CLIs (claude), put first
// on the factories' PATH.
func agentsDir(root string) string { return filepath.Join(root, "local", "demo", "agents") }

// markerFile marks a directory as the demo's own, so the wipe at start never
// removes a directory the demo did not create.
const markerFile = ".fleet-demo"

// prepareDir empties dir if it is a previous demo's (or creates it).
func prepareDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, markerFile)); err != nil {
			return fmt.Errorf("-dir %s is not empty and not a previous demo's (no %s in it): pick another", dir, markerFile)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("wipe the previous demo: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, markerFile), []byte("written by make demo; the next demo wipes this directory\n"), 0o644)
}
