// Command local runs the whole fleet on one machine (`make run`): the SQLite
// store in the data directory, and the Functions host emulator driving the
// same handler binary, host.json and function.json files as Azure does.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/local/hostemu"
	"github.com/gigafactory/fleet/local/launcher"
	natsgo "github.com/nats-io/nats.go"

	"github.com/gigafactory/fleet/shared/app"
	natsbus "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/bus/nats/natsserver"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/httpapi"
	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", "", "directory holding host.json and functions/ (default: found upward from the working directory)")
	handler := flag.String("handler", "", "custom-handler binary (default: bin/handler under the root, built if missing)")
	flag.Parse()

	dir, err := findRoot(*root)
	if err != nil {
		return err
	}
	values, err := readLocalSettings(filepath.Join(dir, "local.settings.json"))
	if err != nil {
		return err
	}
	l := config.Lookup{Values: values}
	log, err := app.NewLogger(l)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := app.OpenStore(ctx, l)
	if err != nil {
		return err
	}
	defer st.Close()

	// The handler inherits the host's app settings as environment, as on Azure.
	env := make([]string, 0, len(values)+3)
	for k, v := range values {
		env = append(env, k+"="+v)
	}
	if procs := limitProcs(values); procs != "" {
		env = append(env, procs)
	}
	token := l.Get(config.OperatorToken)
	tokenSource := config.OperatorToken
	if token == "" && st.DataDir != "" {
		if token, err = app.LocalOperatorToken(st.DataDir); err != nil {
			return err
		}
		tokenSource = filepath.Join(st.DataDir, app.OperatorTokenFile)
		env = append(env, config.OperatorToken+"="+token)
	}
	if st.DataDir != "" {
		env = append(env, config.DataDir+"="+st.DataDir)
	}

	nb, err := startNATS(ctx, l, st.Store, log)
	if err != nil {
		return err
	}
	defer nb.stop()
	natsURL := nb.url
	if natsURL != "" {
		env = append(env, config.NATSURL+"="+natsURL)
	}
	if nb.generated {
		env = append(env, config.NATSToken+"="+nb.token)
	}

	handlerPath := *handler
	if handlerPath == "" {
		handlerPath = filepath.Join(dir, "bin", "handler")
		if _, err := os.Stat(handlerPath); errors.Is(err, os.ErrNotExist) {
			fmt.Println("fleet: building the handler binary (go build -o bin/handler ./functions)")
			build := exec.CommandContext(ctx, "go", "build", "-o", handlerPath, "./functions")
			build.Dir, build.Stdout, build.Stderr = dir, os.Stdout, os.Stderr
			if err := build.Run(); err != nil {
				return fmt.Errorf("build handler: %w", err)
			}
		}
	}

	// With SQLite, the change feed is read when the store marks the
	// container changed (a file's mtime, no query), so an idle stack reads
	// nothing; Cosmos is polled every feedPollDelay, as the host does.
	var changed func(string) <-chan struct{}
	if st.ChangeMarker != nil {
		changed = func(container string) <-chan struct{} {
			return hostemu.WatchFiles(ctx, 2*time.Millisecond, st.ChangeMarker(container))
		}
	}
	pools, err := startPools(ctx, l, dir, nb, log)
	if err != nil {
		return err
	}

	hostStore := store.Store(st.Store)
	if st.Path != "" {
		leases, err := sqlite.Open(ctx, filepath.Join(st.DataDir, hostLeasesFile))
		if err != nil {
			return fmt.Errorf("host leases: %w", err)
		}
		defer leases.Close()
		hostStore = hostLeases{Store: st.Store, leases: leases}
	}
	feedStore := storecount.New(hostStore)
	emu, err := hostemu.New(hostemu.Options{
		Root: dir, Handler: handlerPath, Listen: l.Get(config.Listen),
		Settings: l.Get, Env: env, Store: feedStore, Changed: changed, Log: log,
		StoreStats: func() any { return feedStore.Snapshot() },
	})
	if err != nil {
		return err
	}
	// Pool executions stop first (each releases its job), while the
	// coordinator still answers; then the emulator and the handler.
	poolCtx, stopPools := context.WithCancel(ctx)
	defer func() { stopPools(); pools.wait() }()
	emuCtx, stopEmu := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEmu()
	go func() {
		<-poolCtx.Done()
		pools.wait()
		stopEmu()
	}()
	return emu.Run(emuCtx, func(addr string) {
		fmt.Printf("fleet: listening on http://%s (API under /api, e.g. http://%s/api/healthz)\n", addr, addr)
		fmt.Println(tokenBanner(l.Get(config.OperatorToken), tokenSource, token))
		if st.DataDir != "" {
			fmt.Printf("fleet: data in %s\n", st.DataDir)
		}
		if natsURL != "" {
			fmt.Printf("fleet: dispatch on NATS at %s (factories: FLEET_TRANSPORT=nats FLEET_NATS_URL=%s; each connects with its fleet token)\n", natsURL, natsURL)
		}
		pools.start(poolCtx, "http://"+addr)
		off := ""
		if d := emu.Disabled(); len(d) > 0 {
			off = fmt.Sprintf(", disabled by their app settings: %s", strings.Join(d, ", "))
		}
		fmt.Printf("fleet: %d functions from %s%s; Ctrl-C stops\n", len(emu.App().Functions), dir, off)
	})
}

// tokenBanner says which operator tokens the stack accepts. It shows a
// token only when the stack generated it (kept in the data dir): one set
// in FLEET_OPERATOR_TOKEN is its owner's secret, possibly the unscoped
// one, and a start-up banner ends up in terminals, logs and CI output, so
// of those only the names are shown.
func tokenBanner(configured, source, token string) string {
	if configured == "" {
		return fmt.Sprintf("fleet: operator token (%s): %s", source, token)
	}
	names := "none readable (the handler says why)"
	if toks, err := httpapi.ParseOperatorTokens(configured); err == nil {
		list := make([]string, len(toks))
		for i, t := range toks {
			list[i] = t.Name
		}
		names = strings.Join(list, ", ")
	}
	return fmt.Sprintf("fleet: operator tokens from %s: %s (not printed)", config.OperatorToken, names)
}

// localPools are the elastic pools of FLEET_LOCAL_POOLS, each run by a
// launcher as KEDA runs a Container Apps Job.
type localPools struct {
	pools   []launcher.Pool
	depth   launcher.Depther
	natsURL string
	dir     string
	log     *slog.Logger
	wg      sync.WaitGroup
}

// startPools reads FLEET_LOCAL_POOLS; the launchers start once the API
// listens (start).
func startPools(ctx context.Context, l config.Lookup, root string, nb *natsBroker, log *slog.Logger) (*localPools, error) {
	natsURL := nb.url
	lp := &localPools{natsURL: natsURL, log: log}
	path := l.Get(config.LocalPools)
	if path == "" {
		return lp, nil
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	pools, err := launcher.ReadPools(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.LocalPools, err)
	}
	if natsURL == "" {
		return nil, fmt.Errorf("%s needs push dispatch on NATS (%s=nats): pools scale on their subscription's depth", config.LocalPools, config.Bus)
	}
	dataDir, err := l.DataDirPath()
	if err != nil {
		return nil, err
	}
	// The launchers read depths and create the pools' subscriptions: the
	// coordinator's connection, not a factory's.
	c, err := nb.admin(ctx, "fleet-pools", log)
	if err != nil {
		return nil, fmt.Errorf("pools: nats at %s: %w", natsURL, err)
	}
	for _, p := range pools {
		// Terraform creates each pool's subscription in Azure; here the
		// stack does, so depth counts from the first dispatch on.
		if err := c.EnsureSubscription(ctx, p.Name); err != nil {
			return nil, fmt.Errorf("pool %s: subscription: %w", p.Name, err)
		}
	}
	lp.pools, lp.depth, lp.dir = pools, c, filepath.Join(dataDir, "pools")
	return lp, nil
}

func (lp *localPools) start(ctx context.Context, url string) {
	for _, p := range lp.pools {
		ln, err := launcher.New(launcher.Options{Pool: p, Depth: lp.depth, Dir: filepath.Join(lp.dir, p.Name), Log: lp.log,
			Env: map[string]string{"FLEET_URL": url, "FLEET_TRANSPORT": "nats", "FLEET_NATS_URL": lp.natsURL}})
		if err != nil {
			lp.log.Error("pool launcher", "pool", p.Name, "err", err)
			continue
		}
		lp.wg.Go(func() { ln.Run(ctx) })
		fmt.Printf("fleet: elastic pool %s: up to %d executions of %s\n", p.Name, p.MaxExecutions, strings.Join(p.Command, " "))
	}
}

func (lp *localPools) wait() { lp.wg.Wait() }

// findRoot returns dir, or the nearest directory upward holding host.json.
func findRoot(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	cur, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(cur, "host.json")); err == nil {
			return cur, nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", errors.New("no host.json here or above; run from the repository or pass -root")
		}
		cur = parent
	}
}

// readLocalSettings reads local.settings.json's Values, as `func start` does.
func readLocalSettings(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	var s struct {
		IsEncrypted bool              `json:"IsEncrypted"`
		Values      map[string]string `json:"Values"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.IsEncrypted {
		return nil, fmt.Errorf("%s: encrypted settings are not supported locally", path)
	}
	if s.Values == nil {
		s.Values = map[string]string{}
	}
	return s.Values, nil
}

// natsBroker is the dispatch broker the stack runs with: the embedded NATS
// server, an external one (FLEET_NATS_URL), or none (url "").
type natsBroker struct {
	url string
	// token is the coordinator's NATS secret: FLEET_NATS_TOKEN, or one
	// generated for the embedded server (generated), which the handler
	// gets in its environment.
	token     string
	generated bool
	// client is the stack's own coordinator connection to the embedded
	// server (it created the streams); nil for an external server.
	client *natsbus.Client
	stop   func()
}

// admin returns a coordinator connection: the embedded server's, or a new
// one to the external server, closed when ctx ends.
func (nb *natsBroker) admin(ctx context.Context, name string, log *slog.Logger) (*natsbus.Client, error) {
	if nb.client != nil {
		return nb.client, nil
	}
	c, err := openCoordinatorClient(ctx, nb.url, nb.token, name, log)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { _ = c.Close(context.WithoutCancel(ctx)) })
	return c, nil
}

func openCoordinatorClient(ctx context.Context, url, token, name string, log *slog.Logger) (*natsbus.Client, error) {
	var conn []natsgo.Option
	if token != "" {
		conn = append(conn, natsgo.Token(token))
	}
	return natsbus.Open(ctx, url, natsbus.Options{Name: name, Logger: log, ConnOptions: conn})
}

// startNATS starts the embedded NATS server the dispatch function publishes
// to, unless another transport or an external server is configured. Its
// streams live in the data directory, so queued dispatch messages survive a
// restart.
//
// The server requires credentials (issue 23: an open one let any local
// process, an engine included, read every product's dispatches and forge
// cancels). The coordinator presents FLEET_NATS_TOKEN, generated here when
// unset, with every right; a factory presents its fleet bearer token, which
// the server resolves against the store exactly as the API does (so
// revocation and deregistration apply to new connections), and may then
// use only its own subscription (natsbus.FactoryPermissions).
func startNATS(ctx context.Context, l config.Lookup, st store.Store, log *slog.Logger) (*natsBroker, error) {
	nb := &natsBroker{token: l.Get(config.NATSToken), stop: func() {}}
	if l.Get(config.Bus) != "nats" || l.Get(config.ServiceBusNS) != "" {
		return nb, nil
	}
	if url := l.Get(config.NATSURL); url != "" {
		nb.url = url
		return nb, nil
	}
	dir, err := l.DataDirPath()
	if err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(l.Get(config.NATSListen))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.NATSListen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("%s: port %q: %w", config.NATSListen, portStr, err)
	}
	if nb.token == "" {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		nb.token, nb.generated = "fnc_"+base64.RawURLEncoding.EncodeToString(b[:]), true
	} else if len(nb.token) < natsserver.MinCoordinatorTokenLen {
		return nil, fmt.Errorf("%s: at least %d characters", config.NATSToken, natsserver.MinCoordinatorTokenLen)
	}
	// A coordinator of its own over the same store, used only to resolve
	// factory tokens (with the API's token cache and revocation ledger).
	tokens, err := coord.New(coord.Config{}, coord.Deps{Store: st, Clock: clock.System{}, Log: log})
	if err != nil {
		return nil, err
	}
	e, err := natsserver.Start(ctx, natsserver.Options{StoreDir: filepath.Join(dir, "nats"), Host: host, Port: port,
		Auth: &natsserver.Auth{Coordinator: nb.token, Grant: factoryGrant(tokens), Logger: log}})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS on %s: %w", l.Get(config.NATSListen), err)
	}
	nb.url = e.ClientURL()
	// Create the streams now: a factory may not (it binds to them), and
	// one may connect before the handler has published anything.
	if nb.client, err = openCoordinatorClient(ctx, nb.url, nb.token, "fleet-local", log); err != nil {
		e.Shutdown()
		return nil, fmt.Errorf("embedded NATS streams: %w", err)
	}
	nb.stop = func() {
		_ = nb.client.Close(context.WithoutCancel(ctx))
		e.Shutdown()
	}
	return nb, nil
}

// factoryGrant admits a connection presenting a live factory's fleet token
// to that factory's own subscription (its id, a pool's too).
func factoryGrant(c *coord.Coordinator) func(ctx context.Context, token string) (natsserver.Grant, error) {
	return func(ctx context.Context, token string) (natsserver.Grant, error) {
		t, err := c.AuthenticateFactory(ctx, token)
		if err != nil {
			return natsserver.Grant{}, err
		}
		p, err := natsbus.FactoryPermissions(natsbus.Options{}, t.FactoryID)
		if err != nil {
			return natsserver.Grant{}, err
		}
		return natsserver.Grant{Name: "factory:" + t.FactoryID, Publish: p.Publish, Subscribe: p.Subscribe}, nil
	}
}
