// Package coord holds the fleet's use cases: submit, claim and accept, fenced
// updates, leases, failure, reaping, dispatch, factories and products. It
// declares the interfaces it needs (Store, Publisher) and knows
// nothing of HTTP, SQL or any cloud SDK.
package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/artifacts"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/echo"
	"github.com/gigafactory/fleet/shared/coord/explain"
	"github.com/gigafactory/fleet/shared/coord/live"
	"github.com/gigafactory/fleet/shared/coord/runlogs"

	"github.com/gigafactory/fleet/shared/blob"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/coord/pulls"
	"github.com/gigafactory/fleet/shared/coord/review"
	"github.com/gigafactory/fleet/shared/forge"
	"github.com/gigafactory/fleet/shared/runlog"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/schedule"
)

// Config tunes the coordinator. Zero fields take the defaults; Resolve
// applies them and rejects the rest of what cannot work.
type Config struct {
	// LeaseTTL is how long a claim holds without renewal.
	LeaseTTL time.Duration
	// StaleAfter marks a static factory stale after this long without a
	// heartbeat; DownAfter marks it down. Elastic pools never go stale.
	StaleAfter time.Duration
	DownAfter  time.Duration
	// PruneAfter is how long a static factory may stay silent before the
	// prune timer deregisters it (Prune). Longer than DownAfter.
	PruneAfter time.Duration
	// RetryBackoff is the first delay before a retryable failure is retried;
	// it doubles per attempt up to MaxRetryBackoff.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// RedispatchAfter is how long a dispatched, unaccepted job waits before the
	// sweep sends it again.
	RedispatchAfter time.Duration
	// FactoryCacheTTL bounds how stale the factory list the scheduler sees
	// (and the products submit checks repo ownership against, and the
	// product list a forge webhook searches) may be; writes made through
	// this coordinator refresh them at once.
	FactoryCacheTTL time.Duration
	// TokenCacheTTL is how often a process re-reads the ledger's token
	// generation (one point read, whatever the number of factories) to
	// learn of revocations elsewhere. Revoking, rotating or deregistering
	// takes effect at once in the process that does it, and within this
	// bound in every other.
	TokenCacheTTL time.Duration
	// ChangeFeed says a change-feed handler runs DispatchChanged on every
	// job write (the Functions app, the local stack). Only then may timer
	// sweeps trust the ledger and skip a tick that has nothing to do
	// (internal/kernel/ledger.go); without it (the Lambda front door) every tick scans.
	ChangeFeed bool
	// LivePoll is how often the live event watcher reads the change feeds
	// while a stream is connected to this process (writes made by this
	// process wake it at once). Nothing is read while no stream is.
	LivePoll time.Duration
	// CancelGrace is how long the holder of a job has to acknowledge a
	// cancel or a preemption (stop, checkpoint, release) before the reaper
	// revokes its lease and ends the run itself. A poll factory hears of
	// the request only at its next renewal, so the default leaves room
	// for the factory's default renewal cadence (a third of the lease)
	// plus the time to stop an engine and push a checkpoint.
	CancelGrace time.Duration
	// NoPreemption turns preemption off (FLEET_PREEMPTION=off): a critical
	// job then waits for a free seat like any other.
	NoPreemption bool
	// ArtifactMaxBytes bounds one artifact upload; more is 413 and
	// nothing is stored.
	ArtifactMaxBytes int64
	// EchoBackoff is the wait after a failed tracker echo delivery; it
	// doubles with every failure in a row up to EchoMaxBackoff. EchoTimeout
	// bounds one webhook request.
	EchoBackoff    time.Duration
	EchoMaxBackoff time.Duration
	EchoTimeout    time.Duration
	// EchoParallel bounds the deliveries one product's lane runs at once
	// (coord/echo); EchoBreakerFailures failed deliveries in a row stop
	// a webhook from being tried for EchoBreakerCooldown.
	EchoParallel        int
	EchoBreakerFailures int
	EchoBreakerCooldown time.Duration
	Weights             schedule.Weights
}

// Defaults: the one place they are written. shared/config documents the
// settings that override them from these constants.
const (
	DefaultLeaseTTL        = 5 * time.Minute
	DefaultStaleAfter      = 90 * time.Second
	DefaultDownAfter       = 10 * time.Minute
	DefaultPruneAfter      = 7 * 24 * time.Hour
	DefaultRetryBackoff    = 30 * time.Second
	DefaultMaxRetryBackoff = 30 * time.Minute
	DefaultRedispatchAfter = 2 * time.Minute
	DefaultFactoryCacheTTL = time.Second
	DefaultTokenCacheTTL   = time.Minute
	DefaultLivePoll        = time.Second
	DefaultCancelGrace     = 2 * time.Minute
	// DefaultArtifactMaxBytes stays under the Functions host's 100 MiB
	// request limit; factories bound their run logs by it too.
	DefaultArtifactMaxBytes = fleet.DefaultArtifactMaxBytes
)

// Resolve returns c with zero fields set to their defaults, or an invalid
// error naming the first field that cannot work: a negative duration, a
// factory that would be down before it is stale (or pruned before it is
// down), a backoff cap below the first backoff, or weights Validate rejects.
func (c Config) Resolve() (Config, error) {
	durations := [...]struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"leaseTTL", &c.LeaseTTL, DefaultLeaseTTL},
		{"staleAfter", &c.StaleAfter, DefaultStaleAfter},
		{"downAfter", &c.DownAfter, DefaultDownAfter},
		{"pruneAfter", &c.PruneAfter, DefaultPruneAfter},
		{"retryBackoff", &c.RetryBackoff, DefaultRetryBackoff},
		{"maxRetryBackoff", &c.MaxRetryBackoff, DefaultMaxRetryBackoff},
		{"redispatchAfter", &c.RedispatchAfter, DefaultRedispatchAfter},
		{"factoryCacheTTL", &c.FactoryCacheTTL, DefaultFactoryCacheTTL},
		{"tokenCacheTTL", &c.TokenCacheTTL, DefaultTokenCacheTTL},
		{"livePoll", &c.LivePoll, DefaultLivePoll},
		{"cancelGrace", &c.CancelGrace, DefaultCancelGrace},
		{"echoBackoff", &c.EchoBackoff, echo.DefaultBackoff},
		{"echoMaxBackoff", &c.EchoMaxBackoff, echo.DefaultMaxBackoff},
		{"echoTimeout", &c.EchoTimeout, echo.DefaultTimeout},
		{"echoBreakerCooldown", &c.EchoBreakerCooldown, echo.DefaultBreakerCooldown},
	}
	for _, d := range durations {
		switch {
		case *d.v < 0:
			return c, fleet.Invalid("config."+d.name, "must be a positive duration (0 for the default), got %v", *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	switch {
	case c.ArtifactMaxBytes < 0:
		return c, fleet.Invalid("config.artifactMaxBytes", "must be a positive number of bytes (0 for the default), got %d", c.ArtifactMaxBytes)
	case c.ArtifactMaxBytes == 0:
		c.ArtifactMaxBytes = DefaultArtifactMaxBytes
	}
	counts := [...]struct {
		name string
		v    *int
		def  int
	}{
		{"echoParallel", &c.EchoParallel, echo.DefaultParallel},
		{"echoBreakerFailures", &c.EchoBreakerFailures, echo.DefaultBreakerFailures},
	}
	for _, n := range counts {
		switch {
		case *n.v < 0:
			return c, fleet.Invalid("config."+n.name, "must be a positive number (0 for the default), got %d", *n.v)
		case *n.v == 0:
			*n.v = n.def
		}
	}
	if c.StaleAfter >= c.DownAfter {
		return c, fleet.Invalid("config.staleAfter", "must be shorter than downAfter (%v), got %v", c.DownAfter, c.StaleAfter)
	}
	if c.PruneAfter <= c.DownAfter {
		return c, fleet.Invalid("config.pruneAfter", "must be longer than downAfter (%v), got %v", c.DownAfter, c.PruneAfter)
	}
	if c.EchoMaxBackoff < c.EchoBackoff {
		return c, fleet.Invalid("config.echoMaxBackoff", "must be at least echoBackoff (%v), got %v", c.EchoBackoff, c.EchoMaxBackoff)
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		return c, fleet.Invalid("config.maxRetryBackoff", "must be at least retryBackoff (%v), got %v", c.RetryBackoff, c.MaxRetryBackoff)
	}
	if c.Weights == (schedule.Weights{}) {
		c.Weights = schedule.DefaultWeights
	}
	if err := c.Weights.Validate(); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// Deps are what a coordinator works with besides its configuration. Store
// and Clock are required; the rest are optional.
type Deps struct {
	Store store.Store
	Clock clock.Clock
	// Log may be nil: nothing is logged.
	Log *slog.Logger
	// Publisher is the dispatch transport. Without one, jobs are only
	// handed out through the poll path (Claim). With one, a change of the
	// fleet (enrollment, new capabilities or repos) retries jobs nobody
	// could take; if it is also a GCPublisher or DeadLetterSource, GC
	// sweeps and dead-letter drains use it.
	Publisher Publisher
	// Metrics are named sections Metrics adds to the fleet view.
	Metrics map[string]MetricsSource
	// Blobs keeps artifact bytes; without it artifact routes answer
	// unavailable.
	Blobs blob.Store
	// RunLogs keeps the runs' live output; without it the log routes
	// answer unavailable.
	RunLogs runlog.Store
	// Webhook sends tracker echo deliveries; without it they fail and
	// are retried (only the echo function's process needs one).
	Webhook echo.Webhook
	// Forge holds the pull requests of products with a forge; without it
	// their syncs fail visibly and are retried. JobURL, when set, links
	// a job from its pull request.
	Forge  forge.Forge
	JobURL func(productID, jobID string) string
}

// Coordinator runs the use cases over a Store. It is safe for concurrent use
// and for many coordinators (processes) sharing one store: every decision is
// a compare-and-swap, and the caches only ever save a read.
type Coordinator struct {
	k             *kernel.Kernel
	cfg           Config
	publisher     Publisher
	catalog       *catalog.Service
	metricSources map[string]MetricsSource
	live          *live.Service
	echo          *echo.Service
	artifacts     *artifacts.Service
	runlogs       *runlogs.Service
	dag           *dag.Service
	explain       *explain.Service
	admission     *admission.Service
	review        *review.Service
	pulls         *pulls.Service
	sweeps        kernel.SweepState
}

// New builds a coordinator from a configuration Resolve accepts.
func New(cfg Config, deps Deps) (*Coordinator, error) {
	cfg, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	switch {
	case deps.Store == nil:
		return nil, errors.New("coord.New: Deps.Store is required")
	case deps.Clock == nil:
		return nil, errors.New("coord.New: Deps.Clock is required")
	}
	timers, ok := deps.Clock.(clock.Timers)
	if !ok {
		return nil, errors.New("coord.New: Deps.Clock must make tickers (clock.Timers) for the live event watcher")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{
		k: &kernel.Kernel{
			Store:      deps.Store,
			Clock:      deps.Clock,
			Log:        log,
			Counters:   &kernel.Counters{},
			Jobs:       kernel.NewItemCache(4096),
			ChangeFeed: cfg.ChangeFeed,
		},
		cfg:           cfg,
		publisher:     deps.Publisher,
		metricSources: maps.Clone(deps.Metrics),
	}
	// The packages behind the façade, each registering its own observer of
	// committed transitions as it is built, so in this order: catalog
	// moves the queue state, admission settles its budget and gives the
	// seat back, and dependants settle last. (An ended run is recorded by
	// the move's own CAS, before any observer.)
	var onFleetChange func(context.Context)
	if c.publisher != nil {
		onFleetChange = c.retryUnroutable
	}
	c.catalog = catalog.New(c.k, catalog.Config{
		StaleAfter: cfg.StaleAfter, DownAfter: cfg.DownAfter,
		FactoryCacheTTL: cfg.FactoryCacheTTL, TokenCacheTTL: cfg.TokenCacheTTL,
		RedispatchAfter: cfg.RedispatchAfter,
		PruneAfter:      cfg.PruneAfter, LeaseTTL: cfg.LeaseTTL,
	}, catalog.Deps{Life: lifecycle{c}, Targets: lifecycle{c}, OnFleetChange: onFleetChange})
	c.live = live.New(c.k, timers, cfg.LivePoll, c.catalog.EffectiveHealth)
	c.echo = echo.New(c.k, echo.Config{
		Backoff: cfg.EchoBackoff, MaxBackoff: cfg.EchoMaxBackoff, Timeout: cfg.EchoTimeout,
		Parallel: cfg.EchoParallel, BreakerFailures: cfg.EchoBreakerFailures, BreakerCooldown: cfg.EchoBreakerCooldown,
	}, deps.Webhook, c.catalog, c.live, lifecycle{c})
	c.k.Store = c.live.Waking(deps.Store)
	c.artifacts = artifacts.New(c.k, deps.Blobs, cfg.ArtifactMaxBytes)
	c.runlogs = runlogs.New(c.k, deps.RunLogs)
	// The seats the scheduler counts follow every lease granted or ended
	// and every dispatch sent here, not only each refresh.
	c.k.JobWritten = c.catalog.NoteJob
	c.admission = admission.New(c.k, admission.Config{LeaseTTL: cfg.LeaseTTL, Push: c.publisher != nil, CacheTTL: cfg.FactoryCacheTTL}, c.catalog, lifecycle{c})
	// Built last, so dependants settle after the seat is given back.
	c.dag = dag.New(c.k, lifecycle{c})
	c.explain = explain.New(c.k, cfg.Weights, c.catalog, c.dag, c.admission)
	c.review = review.New(c.k, lifecycle{c})
	c.pulls = pulls.New(c.k, pulls.Config{JobURL: deps.JobURL}, deps.Forge, c.catalog, lifecycle{c})
	return c, nil
}

// lifecycle is what the packages behind the façade may ask of the job
// lifecycle and admission (catalog.Lifecycle, catalog.Targets,
// admission.Lifecycle, dag.Lifecycle in dag.go), without those use cases
// joining Coordinator's exported API.
type lifecycle struct{ c *Coordinator }

func (l lifecycle) LeasedJobs(ctx context.Context, productID string) ([]*fleet.Job, error) {
	return l.c.leasedJobs(ctx, productID)
}

func (l lifecycle) LeasedSeats(ctx context.Context, productID string) (map[string]fleet.Seat, error) {
	return l.c.admission.LeasedSeats(ctx, productID)
}

func (l lifecycle) ReleaseHeld(ctx context.Context, productID string) {
	l.c.admission.ReleaseHeld(ctx, productID)
}

func (l lifecycle) HoldsLease(ctx context.Context, factoryID string) (bool, error) {
	return l.c.holdsLease(ctx, factoryID)
}

func (l lifecycle) DispatchQueued(ctx context.Context, productID, jobID string) error {
	_, err := l.c.dispatch(ctx, productID, jobID, nil)
	return err
}

func (l lifecycle) CheckTarget(rawURL string) error { return l.c.echo.CheckTarget(rawURL) }

// GetJob reads one job. Without productID (an operator's global lookup)
// it queries across products by id.
func (c *Coordinator) GetJob(ctx context.Context, productID, id string) (*fleet.Job, error) {
	return c.k.GetJob(ctx, productID, id)
}

// Config returns the effective configuration.
func (c *Coordinator) Config() Config { return c.cfg }
