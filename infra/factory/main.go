// Command factory is the fleet's worker: it runs coding-agent CLIs on jobs
// the coordinator hands it, each in a git worktree of its own, as a
// long-running static host or, with --once, as one Container Apps Job
// execution. See README.md beside this file.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gigafactory/fleet/infra/factory/internal/agent"
	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
)

func main() {
	// A run's reaper (where cgroups cannot be used) is this binary.
	engine.MaybeReaper()
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := config.Parse(args, os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "factory: %v\n", err)
		return int(agent.OutcomeError)
	}
	if cfg.CheckEngines {
		if !checkEngines(context.Background(), cfg, os.Stdout) {
			return int(agent.OutcomeError)
		}
		return int(agent.OutcomeDone)
	}
	log := newLogger(cfg.LogLevel).With("factory", cfg.FactoryID)
	// Nothing this process starts (git, engines, the ship hook) inherits
	// the token. /proc/<pid>/environ still shows the variable as the
	// process was started with it: FLEET_FACTORY_TOKEN_FILE avoids that.
	if cfg.TokenFile == "" && os.Getenv(config.EnvToken) != "" {
		log.Warn("the token came from " + config.EnvToken + "; " + config.EnvTokenFile + " keeps it out of the process environment")
	}
	_ = os.Unsetenv(config.EnvToken)
	_ = os.Unsetenv(config.EnvTokenFile)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		log.Error("create work dir", "dir", cfg.WorkDir, "err", err)
		return int(agent.OutcomeError)
	}
	unlock, err := lockWorkDir(cfg.WorkDir)
	if err != nil {
		log.Error("work dir is in use", "dir", cfg.WorkDir, "err", err)
		return int(agent.OutcomeError)
	}
	defer unlock()

	if _, err := caps.Host().LookPath("git"); err != nil {
		log.Error("git is not on PATH", "err", err)
		return int(agent.OutcomeError)
	}
	det, err := caps.Detect(ctx, caps.Host(), cfg.Engines, cfg.RepoBase, cfg.ExtraCaps)
	if err != nil {
		log.Error("detect capabilities", "err", err)
		return int(agent.OutcomeError)
	}
	for _, m := range det.Missing {
		log.Warn("engine not advertised", "why", m)
	}
	for name, p := range cfg.Presets {
		if _, priced := cfg.Prices[name]; p == engine.PresetCodex && !priced {
			log.Warn("codex reports tokens but no cost: its runs count $0 against budgets until "+config.EnvEnginePrices+" prices them (e.g. "+name+"=1.25/10)", "engine", name)
		}
	}
	log.Info("factory starting", "transport", cfg.Transport, "seats", cfg.Seats, "once", cfg.Once,
		"capabilities", det.All(), "engines", det.Engines, "workDir", cfg.WorkDir, "shipStage", cfg.ShipStage)

	client := api.New(api.Config{BaseURL: cfg.URL, Token: cfg.Token, Product: cfg.ProductID})
	recv, err := openTransport(ctx, cfg, client, log)
	if err != nil {
		log.Error("open transport", "transport", cfg.Transport, "err", err)
		return int(agent.OutcomeError)
	}
	defer func() {
		if err := recv.Close(context.WithoutCancel(ctx)); err != nil {
			log.Warn("close transport", "err", err)
		}
	}()
	git, err := gitwt.New(gitwt.Options{WorkDir: cfg.WorkDir, RepoBase: cfg.RepoBase, RepoURLs: cfg.RepoURLs,
		GitName: cfg.GitName, GitEmail: cfg.GitEmail, Log: log})
	if err != nil {
		log.Error("git state", "err", err)
		return int(agent.OutcomeError)
	}
	out := agent.New(agent.Deps{Config: cfg, API: client, Receiver: recv, Git: git, Env: caps.Host(), Log: log}).Run(ctx)
	log.Info("factory stopped", "outcome", out.String(), "exitCode", int(out))
	return int(out)
}

func openTransport(ctx context.Context, cfg config.Config, client *api.Client, log *slog.Logger) (transport.Receiver, error) {
	switch cfg.Transport {
	case config.TransportPoll:
		// The agent's clock: agent.New runs on clock.System.
		return transport.NewPoll(client, cfg.Poll, clock.System{}, log), nil
	case config.TransportNATS:
		return transport.OpenNATS(ctx, transport.NATSOptions{URL: cfg.NATSURL, FactoryID: cfg.FactoryID,
			Subscription: cfg.Subscription, Token: cfg.Token, Log: log})
	case config.TransportServiceBus:
		return openServiceBus(ctx, cfg, log)
	}
	return nil, fmt.Errorf("unknown transport %q", cfg.Transport)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: l}))
}

// lockWorkDir takes an exclusive lock on the work directory: GC removes
// whatever no running job claims, which is only safe if no other factory
// process works in the same directory.
func lockWorkDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "factory.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.New("another factory process holds its lock; give each factory its own --work-dir")
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}
