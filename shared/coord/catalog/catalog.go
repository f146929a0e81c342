// Package catalog holds what the fleet knows of itself: products (their
// repos, seats setting and tracker), persona profiles, factories (enrolment,
// heartbeats, health, draining, tokens) and the scoped views readers get of
// them, with the caches that let the scheduler and the API read them
// without a store read per request. coord's façade calls it; the job
// lifecycle reads factories and products through it.
package catalog

import (
	"context"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Config is the part of coord.Config the catalog reads; coord.Config
// resolves and validates it.
type Config struct {
	// StaleAfter and DownAfter judge a static factory's health from its
	// last heartbeat.
	StaleAfter, DownAfter time.Duration
	// FactoryCacheTTL bounds how stale the cached factory list and
	// products may be; TokenCacheTTL how often the ledger's token
	// generation is re-read.
	FactoryCacheTTL, TokenCacheTTL time.Duration
	// RedispatchAfter is how long a dispatch counts as a taken seat.
	RedispatchAfter time.Duration
	// PruneAfter is how long a static factory may stay silent before the
	// prune timer deregisters it; LeaseTTL how long until a factory spared
	// for the lease it holds is looked at again (prune.go).
	PruneAfter, LeaseTTL time.Duration
}

// Lifecycle is what the catalog asks of the job lifecycle and admission.
type Lifecycle interface {
	// LeasedSeats are a product's seats taken by live leases, for a new
	// seat cap to start from.
	LeasedSeats(ctx context.Context, productID string) (map[string]fleet.Seat, error)
	// ReleaseHeld lets jobs held back by a product's budget or seat cap
	// go, once either may have room.
	ReleaseHeld(ctx context.Context, productID string)
	// HoldsLease reports whether any job is leased (assigned or building)
	// to the factory.
	HoldsLease(ctx context.Context, factoryID string) (bool, error)
}

// Targets judges a tracker webhook URL when it is set.
type Targets interface {
	CheckTarget(rawURL string) error
}

// Deps are what the catalog works with besides its configuration.
type Deps struct {
	Life    Lifecycle
	Targets Targets
	// OnFleetChange, when set, is called after a change of the fleet that
	// may make unroutable jobs routable (enrolment, capabilities, repos).
	OnFleetChange func(context.Context)
}

// Service is the catalog. It is safe for concurrent use.
type Service struct {
	k             *kernel.Kernel
	cfg           Config
	life          Lifecycle
	targets       Targets
	onFleetChange func(context.Context)
	factoryDocs   *kernel.ItemCache
	factories     *factoryCache
	tokens        *tokenCache
	products      *productCache
}

// New builds the catalog and registers its observer (a job back in the
// queue moves its product's queue state).
func New(k *kernel.Kernel, cfg Config, deps Deps) *Service {
	c := &Service{
		k:             k,
		cfg:           cfg,
		life:          deps.Life,
		targets:       deps.Targets,
		onFleetChange: deps.OnFleetChange,
		factoryDocs:   kernel.NewItemCache(4096),
		factories:     newFactoryCache(cfg.FactoryCacheTTL, cfg.RedispatchAfter),
		tokens:        &tokenCache{entries: map[string]tokenEntry{}},
		products:      &productCache{ttl: cfg.FactoryCacheTTL, entries: map[string]productEntry{}},
	}
	k.Observe(c.queueStateOnQueued)
	return c
}

// NoteJob records the seat a job this process just wrote (or read
// unchanged) takes now (its live lease, its dispatch not yet taken, or
// none), so the scheduler's counts follow every write between refreshes.
func (c *Service) NoteJob(j *fleet.Job, written bool) { c.factories.noteJob(j, written, c.k.Now()) }

// WithoutOffer is fs as the job jobID sees it: its own dispatch, when it
// counts on its target, does not take a seat from itself.
func (c *Service) WithoutOffer(fs []*fleet.Factory, jobID string) []*fleet.Factory {
	return c.factories.withoutOffer(fs, jobID)
}

// InvalidateFactories drops the cached factory list: the next read queries.
func (c *Service) InvalidateFactories() { c.factories.invalidate() }
