// Package app is the composition root shared by every entry point: it reads
// the configuration and builds the store, the coordinator, the dispatch
// transport and the HTTP API from it.
package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/blob"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/console"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge/github"
	"github.com/gigafactory/fleet/shared/httpapi"
	"github.com/gigafactory/fleet/shared/secret"
	"github.com/gigafactory/fleet/shared/store/cosmos"
	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/store/storecount"
	"github.com/gigafactory/fleet/shared/store/storefault"
	"github.com/gigafactory/fleet/shared/webhook"
)

// App is a configured fleet.
type App struct {
	Store   store.Store
	Blobs   blob.Store // nil when none is configured
	Coord   *coord.Coordinator
	API     http.Handler
	Log     *slog.Logger
	DataDir string
	closers []func() error
}

// Close releases what Open acquired, last first.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	return errors.Join(errs...)
}

// NewLogger builds the JSON logger of FLEET_LOG_LEVEL.
func NewLogger(l config.Lookup) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Get(config.LogLevel))); err != nil {
		return nil, fmt.Errorf("%s: %w", config.LogLevel, err)
	}
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level})), nil
}

// Option adjusts how Open builds the fleet.
type Option func(*options)

type options struct {
	coord *coord.Config
	api   httpapi.Config
}

// WithChangeFeed says this app's job writes are seen by a change feed that
// runs the dispatch function (the Functions app; not the Lambda front
// door), so idle sweeps may skip on the ledger's word (coord.Config.ChangeFeed).
func WithChangeFeed() Option { return func(o *options) { o.coord.ChangeFeed = true } }

// WithBufferedResponses says the front door hands a response on only once
// it is complete (the Lambda front door): the live event streams then end
// as soon as they have sent something, and within BufferedMaxStream
// otherwise, so a client that reconnects with Last-Event-ID long-polls.
func WithBufferedResponses() Option {
	return func(o *options) { o.api.Buffered, o.api.MaxStream = true, BufferedMaxStream }
}

// BufferedMaxStream stays under API Gateway's 30 s integration timeout.
const BufferedMaxStream = 25 * time.Second

// Open builds the fleet from settings.
func Open(ctx context.Context, l config.Lookup, log *slog.Logger, opts ...Option) (*App, error) {
	a := &App{Log: log}
	ok := false
	defer func() {
		if !ok {
			_ = a.Close()
		}
	}()
	cfg, err := coordConfig(l)
	if err != nil {
		return nil, err
	}
	o := options{coord: &cfg}
	for _, opt := range opts {
		opt(&o)
	}
	faults, err := storefault.Parse(l.Get(config.StoreFaults))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.StoreFaults, err)
	}
	st, err := OpenStore(ctx, l)
	if err != nil {
		return nil, err
	}
	var inner store.Store = st.Store
	var injector *storefault.Store
	if faults.Enabled() {
		// Under the counter, so injected failures are counted as calls.
		injector = storefault.New(inner, faults, storefault.Options{})
		inner = injector
		log.Warn("store fault injection is on (testing only)", "setting", config.StoreFaults, "spec", l.Get(config.StoreFaults))
	}
	// Every store call is counted: the figures show in /fleet/metrics and
	// are what the benchmark reports per job lifecycle.
	counted := storecount.New(inner)
	a.Store, a.DataDir = counted, st.DataDir
	a.closers = append(a.closers, st.Close)
	metrics := map[string]coord.MetricsSource{
		"store": func(context.Context, []*fleet.Factory) (any, error) { return counted.Snapshot(), nil },
	}
	if injector != nil {
		metrics["storeFaults"] = func(context.Context, []*fleet.Factory) (any, error) { return injector.Snapshot(), nil }
	}
	if rs, ok := st.Store.(interface{ Stats() cosmos.Stats }); ok {
		metrics["cosmos"] = func(context.Context, []*fleet.Factory) (any, error) { return rs.Stats(), nil }
	}
	blobs, closeBlobs, err := openBlobs(ctx, l, a.DataDir, log)
	if err != nil {
		return nil, err
	}
	a.Blobs = blobs
	a.closers = append(a.closers, closeBlobs)
	hook, err := webhookOptions(l, cfg)
	if err != nil {
		return nil, err
	}
	deps := coord.Deps{Store: a.Store, Clock: clock.System{}, Log: log, Metrics: metrics, Blobs: blobs, Webhook: webhook.New(hook)}
	if deps.RunLogs, err = openRunLogs(ctx, l, a.DataDir, log); err != nil {
		return nil, err
	}
	ghSecret, err := forgeDeps(l, &deps)
	if err != nil {
		return nil, err
	}
	tr, err := openBus(ctx, l, cfg, log)
	if err != nil {
		return nil, err
	}
	if tr != nil {
		deps.Publisher = tr
		metrics["bus"] = tr.depths
		a.closers = append(a.closers, func() error { return tr.client.Close(context.Background()) })
	}
	if a.Coord, err = coord.New(cfg, deps); err != nil {
		return nil, err
	}
	tokens, err := a.operatorTokens(l)
	if err != nil {
		return nil, err
	}
	// The web console rides on the API's handler, so every shape that serves
	// the API (Functions app, local stack, Lambda) serves it at /api/console/.
	api := o.api
	api.OperatorTokens, api.Logger = tokens, log
	if api.GitHubWebhookSecret == nil {
		api.GitHubWebhookSecret = ghSecret
	}
	if api.MaxStreamsPerPrincipal, api.MaxStreams, err = streamCaps(l); err != nil {
		return nil, err
	}
	a.API = console.Mount(httpapi.New(a.Coord, api))
	ok = true
	return a, nil
}

// forgeDeps reads the GitHub settings: the client the coordinator opens
// and merges pull requests with (when a token file is set), the link to a
// job's console page, and the webhook secret it returns for the API.
func forgeDeps(l config.Lookup, deps *coord.Deps) ([]byte, error) {
	token, err := secretSetting(l, config.GitHubToken, config.GitHubTokenFile)
	if err != nil {
		return nil, err
	}
	if token != nil {
		gh, err := github.New(github.Config{APIURL: l.Get(config.GitHubAPIURL), Token: string(token)})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", config.GitHubAPIURL, err)
		}
		deps.Forge = gh
	}
	if base := strings.TrimRight(l.Get(config.PublicURL), "/"); base != "" {
		if u, err := url.Parse(base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("%s: %q is not an absolute http(s) URL", config.PublicURL, base)
		}
		deps.JobURL = func(_, jobID string) string { return base + "/api/console/#/job/" + url.PathEscape(jobID) }
	}
	return secretSetting(l, config.GitHubSecret, config.GitHubSecretFile)
}

// secretSetting reads a secret given as a value (in Azure, a Key Vault
// reference the platform resolves) or in a file; nil when neither is set.
func secretSetting(l config.Lookup, value, file string) ([]byte, error) {
	s, err := secret.Resolve(secret.Setting{Value: l.Get(value), ValueName: value, File: l.Get(file), FileName: file})
	if s == "" {
		return nil, err
	}
	return []byte(s), nil
}

// streamCaps reads the caps on streams and long polls (httpapi, streamcap.go).
func streamCaps(l config.Lookup) (perPrincipal, total int, err error) {
	if perPrincipal, err = l.Count(config.MaxStreamsPerPrincipal); err != nil {
		return 0, 0, err
	}
	if total, err = l.Count(config.MaxStreams); err != nil {
		return 0, 0, err
	}
	if perPrincipal > total {
		return 0, 0, fmt.Errorf("%s=%d is above %s=%d: the process cap would always refuse first", config.MaxStreamsPerPrincipal, perPrincipal, config.MaxStreams, total)
	}
	return perPrincipal, total, nil
}

func coordConfig(l config.Lookup) (coord.Config, error) {
	var cfg coord.Config
	var err error
	if cfg.LeaseTTL, err = l.Duration(config.LeaseTTL); err != nil {
		return cfg, err
	}
	if cfg.StaleAfter, err = l.Duration(config.StaleAfter); err != nil {
		return cfg, err
	}
	if cfg.DownAfter, err = l.Duration(config.DownAfter); err != nil {
		return cfg, err
	}
	if cfg.PruneAfter, err = l.Duration(config.PruneAfter); err != nil {
		return cfg, err
	}
	if cfg.RedispatchAfter, err = l.Duration(config.RedispatchAfter); err != nil {
		return cfg, err
	}
	if cfg.CancelGrace, err = l.Duration(config.CancelGrace); err != nil {
		return cfg, err
	}
	switch v := l.Get(config.Preemption); v {
	case "on":
	case "off":
		cfg.NoPreemption = true
	default:
		return cfg, fmt.Errorf("%s=%q: want on or off", config.Preemption, v)
	}
	if cfg.ArtifactMaxBytes, err = l.Bytes(config.ArtifactMaxBytes); err != nil {
		return cfg, err
	}
	if cfg.EchoBackoff, err = l.Duration(config.EchoBackoff); err != nil {
		return cfg, err
	}
	if cfg.EchoMaxBackoff, err = l.Duration(config.EchoMaxBackoff); err != nil {
		return cfg, err
	}
	if cfg.EchoTimeout, err = l.Duration(config.EchoTimeout); err != nil {
		return cfg, err
	}
	if cfg.EchoParallel, err = l.Count(config.EchoParallel); err != nil {
		return cfg, err
	}
	if cfg.EchoBreakerFailures, err = l.Count(config.EchoBreakerFails); err != nil {
		return cfg, err
	}
	if cfg.EchoBreakerCooldown, err = l.Duration(config.EchoBreakerCool); err != nil {
		return cfg, err
	}
	// Resolved here, not only in coord.New: the bus is built from the
	// effective configuration before the coordinator exists.
	return cfg.Resolve()
}

// webhookOptions reads the tracker webhook client's settings.
func webhookOptions(l config.Lookup, cfg coord.Config) (webhook.Options, error) {
	o := webhook.Options{Timeout: cfg.EchoTimeout}
	var err error
	if o.DialTimeout, err = l.Duration(config.EchoDialTimeout); err != nil {
		return o, err
	}
	if o.TLSTimeout, err = l.Duration(config.EchoTLSTimeout); err != nil {
		return o, err
	}
	if o.HeaderTimeout, err = l.Duration(config.EchoHeaderTimeout); err != nil {
		return o, err
	}
	if o.Allow, err = webhook.ParseAllow(l.Get(config.WebhookAllowCIDRs)); err != nil {
		return o, fmt.Errorf("%s: %w", config.WebhookAllowCIDRs, err)
	}
	return o, nil
}

// OpenedStore is a store and what is needed to release it.
type OpenedStore struct {
	Store store.Store
	// DataDir is the local data directory; "" for a cloud store.
	DataDir string
	// Path is the SQLite database file; "" for a cloud store.
	Path string
	// ChangeMarker, when set, names a file whose modification time moves
	// whenever a container changes (SQLite only).
	ChangeMarker func(container string) string
	Close        func() error
}

// OpenStore opens the store the settings select: Cosmos DB when its endpoint
// is set (or FLEET_STORE=cosmos), else SQLite in the data directory.
func OpenStore(ctx context.Context, l config.Lookup) (*OpenedStore, error) {
	kind := l.Get(config.Store)
	if l.Get(config.CosmosEndpoint) != "" {
		kind = "cosmos"
	}
	switch kind {
	case "sqlite":
		dir, err := l.DataDirPath()
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "fleet.db")
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			return nil, err
		}
		return &OpenedStore{Store: s, DataDir: dir, Path: path, ChangeMarker: s.ChangeMarker, Close: s.Close}, nil
	case "cosmos":
		return openCosmos(ctx, l)
	}
	return nil, fmt.Errorf("%s=%q: want sqlite or cosmos", config.Store, kind)
}

// operatorTokens reads FLEET_OPERATOR_TOKEN. Unset on one machine, a token is
// generated once and kept in the data dir, so the local stack and a handler
// started alone agree on it; in the cloud it must be configured.
func (a *App) operatorTokens(l config.Lookup) ([]httpapi.OperatorToken, error) {
	if v := l.Get(config.OperatorToken); v != "" {
		return httpapi.ParseOperatorTokens(v)
	}
	if a.DataDir == "" {
		return nil, fmt.Errorf("%s must be set when the store is not local", config.OperatorToken)
	}
	tok, err := LocalOperatorToken(a.DataDir)
	if err != nil {
		return nil, err
	}
	return []httpapi.OperatorToken{{Name: "local", Token: tok}}, nil
}

// OperatorTokenFile is where the generated local operator token lives.
const OperatorTokenFile = "operator-token"

// LocalOperatorToken returns the data dir's operator token, creating it on
// first use. The file appears whole or not at all (written aside, then
// linked into place), so two processes starting at once agree on one token
// and a crash mid-write leaves no empty file behind.
func LocalOperatorToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, OperatorTokenFile)
	read := func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("%s is empty: delete it to have a new operator token generated", path)
		}
		return tok, nil
	}
	if tok, err := read(); !errors.Is(err, os.ErrNotExist) {
		return tok, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := "fop_" + base64.RawURLEncoding.EncodeToString(b[:])
	tmp, err := os.CreateTemp(dataDir, OperatorTokenFile+".*")
	if err != nil {
		return "", fmt.Errorf("create operator token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.WriteString(tok + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write operator token: %w", err)
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return "", fmt.Errorf("write operator token: %w", err)
	}
	// Link fails if the file exists: of two processes, one wins, and the
	// other reads the winner's token.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return read()
		}
		return "", fmt.Errorf("install %s: %w", path, err)
	}
	return tok, nil
}
