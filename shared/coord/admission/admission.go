// Package admission decides whether a job may be assigned now and keeps
// what an assignment takes until its run ends: the product's budget
// (a reservation per run, settled from the usage the run reports) and its
// seat cap (a seat per run). It also takes the holders' usage reports.
// coord's façade and its claim, accept and dispatch call it.
package admission

import (
	"context"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Catalog is what admission needs of the products (coord/catalog).
type Catalog interface {
	// GetProduct reads a product: its seats live on its document.
	GetProduct(ctx context.Context, productID string) (*fleet.Product, error)
	// CachedProduct is GetProduct through the catalog's cache (at most
	// its TTL old): enough to learn a product is uncapped.
	CachedProduct(ctx context.Context, productID string) (*fleet.Product, error)
	// BumpQueueState tells the product's pollers its queue changed.
	BumpQueueState(ctx context.Context, productID string)
}

// Lifecycle is what admission needs of the job lifecycle (coord).
type Lifecycle interface {
	// LeasedJobs are the product's jobs holding a lease.
	LeasedJobs(ctx context.Context, productID string) ([]*fleet.Job, error)
	// DispatchQueued routes a queued job without a target (the push
	// transport); it applies admission, so a job still held stays.
	DispatchQueued(ctx context.Context, productID, jobID string) error
}

// Config is what admission needs of the coordinator's configuration.
type Config struct {
	// LeaseTTL bounds how long an assignment's job CAS may still be
	// landing: what it took is reclaimed only once older than this.
	LeaseTTL time.Duration
	// Push says jobs are dispatched (a publisher is configured): room
	// made routes the held jobs again, besides telling pollers.
	Push bool
	// CacheTTL is how long a product found without a budget, or a cached
	// product found uncapped, is taken as such without a read: a budget
	// or a cap set through another instance applies within it (this
	// instance's own writes at once).
	CacheTTL time.Duration
}

// Service is admission over the kernel's store.
type Service struct {
	k        *kernel.Kernel
	leaseTTL time.Duration
	push     bool
	catalog  Catalog
	life     Lifecycle
	// unbudgeted holds when each product was last found without a budget.
	unbudgeted absentCache
}

// New builds admission and registers its observer: a run's end gives back
// what its assignment took. Construct it before the observers that must
// see a transition after it (dependants).
func New(k *kernel.Kernel, cfg Config, catalog Catalog, life Lifecycle) *Service {
	c := &Service{k: k, leaseTTL: cfg.LeaseTTL, push: cfg.Push, catalog: catalog, life: life,
		unbudgeted: absentCache{ttl: cfg.CacheTTL, at: map[string]time.Time{}}}
	k.Observe(c.endAdmissionOnRunEnd)
	return c
}

// absentCache remembers, per product, when a document was found absent, so
// the common case (no budget) costs no read on every dispatch, accept and
// run end (but one of a run that reported spend: spendUnreserved).
type absentCache struct {
	ttl time.Duration
	mu  sync.Mutex
	at  map[string]time.Time
	// gen moves on every drop: a read that began before a write (and found
	// nothing) must not mark the product absent after the write's drop.
	gen uint64
}

// maxAbsent bounds the cache; past it, it starts over.
const maxAbsent = 10_000

func (a *absentCache) known(id string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.at[id]
	return ok && now.Sub(at) < a.ttl
}

// generation is the value to pass to note for a read starting now.
func (a *absentCache) generation() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen
}

// note marks id absent as of now, found by a read that began at gen.
func (a *absentCache) note(id string, now time.Time, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen {
		return // a write dropped the mark while the read was under way
	}
	if len(a.at) >= maxAbsent {
		clear(a.at)
	}
	a.at[id] = now
}

func (a *absentCache) drop(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.at, id)
	a.gen++
}
