// Command local runs the whole fleet on one machine (`make run`): the SQLite
// store in the data directory, and the Functions host emulator driving the
// same handler binary, host.json and function.json files as Azure does.
package main

import (
	"context"
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

	"github.com/gigafactory/fleet/local/hostemu"
	"github.com/gigafactory/fleet/local/launcher"
	"github.com/gigafactory/fleet/shared/app"
	natsbus "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/bus/nats/natsserver"
	"github.com/gigafactory/fleet/shared/config"
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
	env := make([]string, 0, len(values)+2)
	for k, v := range values {
		env = append(env, k+"="+v)
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

	natsURL, stopNATS, err := startNATS(ctx, l)
	if err != nil {
		return err
	}
	defer stopNATS()
	if natsURL != "" {
		env = append(env, config.NATSURL+"="+natsURL)
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
	pools, err := startPools(ctx, l, dir, natsURL, log)
	if err != nil {
		return err
	}

	feedStore := storecount.New(st.Store)
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
		fmt.Printf("fleet: operator token (%s): %s\n", tokenSource, token)
		if st.DataDir != "" {
			fmt.Printf("fleet: data in %s\n", st.DataDir)
		}
		if natsURL != "" {
			fmt.Printf("fleet: dispatch on NATS at %s (factories: FLEET_TRANSPORT=nats FLEET_NATS_URL=%s)\n", natsURL, natsURL)
		}
		pools.start(poolCtx, "http://"+addr)
		fmt.Printf("fleet: %d functions from %s; Ctrl-C stops\n", len(emu.App().Functions), dir)
	})
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
func startPools(ctx context.Context, l config.Lookup, root, natsURL string, log *slog.Logger) (*localPools, error) {
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
	c, err := natsbus.Open(ctx, natsURL, natsbus.Options{Name: "fleet-pools", Logger: log})
	if err != nil {
		return nil, fmt.Errorf("pools: nats at %s: %w", natsURL, err)
	}
	context.AfterFunc(ctx, func() { _ = c.Close(context.WithoutCancel(ctx)) })
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

// startNATS starts the embedded NATS server the dispatch function publishes
// to, unless another transport or an external server is configured. Its
// streams live in the data directory, so queued dispatch messages survive a
// restart.
func startNATS(ctx context.Context, l config.Lookup) (url string, stop func(), err error) {
	if l.Get(config.Bus) != "nats" || l.Get(config.ServiceBusNS) != "" {
		return "", func() {}, nil
	}
	if url := l.Get(config.NATSURL); url != "" {
		return url, func() {}, nil
	}
	dir, err := l.DataDirPath()
	if err != nil {
		return "", nil, err
	}
	host, portStr, err := net.SplitHostPort(l.Get(config.NATSListen))
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", config.NATSListen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", nil, fmt.Errorf("%s: port %q: %w", config.NATSListen, portStr, err)
	}
	e, err := natsserver.Start(ctx, natsserver.Options{StoreDir: filepath.Join(dir, "nats"), Host: host, Port: port})
	if err != nil {
		return "", nil, fmt.Errorf("embedded NATS on %s: %w", l.Get(config.NATSListen), err)
	}
	return e.ClientURL(), e.Shutdown, nil
}
