// Package kernel is what the coordinator's use-case packages stand on: the
// store (wrapped so writes wake the live watcher), the clock, the log, the
// process's counters, the one compare-and-swap loop, the job cache, a job's
// event ring and the ledger. It holds no use case of its own; coord and
// the packages behind its façade (admission, catalog, dag, echo, live)
// share it, so each rule here is written once.
package kernel

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// Kernel is shared by every use-case package of one coordinator.
type Kernel struct {
	// Store is the coordinator's store; coord wraps it so every write
	// wakes the live event watcher.
	Store store.Store
	Clock clock.Clock
	Log   *slog.Logger
	// Counters are this process's, for /fleet/metrics.
	Counters *Counters
	// Jobs caches job documents for the next CAS.
	Jobs *ItemCache
	// ChangeFeed: a change-feed handler sees every job write, so timer
	// sweeps may trust the ledger's quiet marks (coord.Config.ChangeFeed).
	ChangeFeed bool
	// JobWritten, when set, is told of every job MutateJob returned, and
	// whether it wrote it (else j is the stored version its function left
	// unchanged): the seats the scheduler counts follow every lease granted
	// or ended and every dispatch sent, not only each refresh.
	JobWritten func(j *fleet.Job, written bool)

	observers []Observer
}

// Now is the clock's time in UTC: every stored time is.
func (c *Kernel) Now() time.Time { return c.Clock.Now().UTC() }

// NewID returns a random, URL-safe, time-ordered id with a prefix: ids made
// later sort later, so listing a partition in id order lists it in creation
// order.
func (c *Kernel) NewID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%013x%x", prefix, c.Now().UnixMilli(), b)
}

// MutateJob applies fn to the job and writes it back (see cas).
func (c *Kernel) MutateJob(ctx context.Context, pk, id string, fn func(j *fleet.Job) error) (*fleet.Job, error) {
	j, written, err := CAS(ctx, c, JobDocs.WithCache(c.Jobs), pk, id, fn)
	if err == nil && j != nil {
		if c.JobWritten != nil {
			c.JobWritten(j, written)
		}
	}
	return j, err
}

// NotFound is the one way a use case reports a missing document: a fleet
// not_found error naming it, wrapping the store's ErrNotFound, so errors.Is
// matches fleet.ErrNotFound (what callers and the HTTP layer test) and
// ErrNotFound (what the store said) alike.
func NotFound(what, id string) error {
	return &fleet.Error{Code: fleet.CodeNotFound, Message: fmt.Sprintf("%s %s not found", what, id), Err: store.ErrNotFound}
}

// ReadError classifies a failed read of what id.
func ReadError(what, id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return NotFound(what, id)
	}
	return fmt.Errorf("read %s %s: %w", what, id, err)
}

func DecodeJob(it store.Item) (*fleet.Job, error) {
	var j fleet.Job
	if err := unmarshal(it.Body, &j); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", it.ID, err)
	}
	j.Rev = it.Rev
	return &j, nil
}

// ReadDoc reads and decodes one document; a missing one is a not_found
// error naming what.
func ReadDoc[T any](ctx context.Context, s store.Store, container, pk, id, what string) (*T, store.Item, error) {
	it, err := s.Read(ctx, container, pk, id)
	if err != nil {
		return nil, it, ReadError(what, id, err)
	}
	v, err := Decode[T](it)
	return v, it, err
}

func Decode[T any](it store.Item) (*T, error) {
	var v T
	if err := unmarshal(it.Body, &v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", it.ID, err)
	}
	return &v, nil
}

// QueryAll drains every page of q.
func (c *Kernel) QueryAll(ctx context.Context, container string, q store.Query) ([]store.Item, error) {
	var out []store.Item
	for {
		page, err := c.Store.Query(ctx, container, q)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", container, err)
		}
		out = append(out, page.Items...)
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}

// QueryJobs drains q over the jobs container and decodes every job.
func (c *Kernel) QueryJobs(ctx context.Context, q store.Query) ([]*fleet.Job, error) {
	items, err := c.QueryAll(ctx, store.Jobs, q)
	if err != nil {
		return nil, err
	}
	jobs := make([]*fleet.Job, 0, len(items))
	for _, it := range items {
		j, err := DecodeJob(it)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// CheckJob runs check on the job as stored (a cached copy may be stale):
// a use case that writes elsewhere before its move checks the move's guard
// first, so that a move refused writes nothing there either.
func (c *Kernel) CheckJob(ctx context.Context, productID, id string, check func(*fleet.Job) error) error {
	j, err := c.GetJob(ctx, productID, id)
	if err != nil {
		return err
	}
	return check(j)
}

// GetJob reads a job. With productID empty it looks the id up across
// products (a plain cross-partition filter).
// PeekJob is the job as this process last wrote or read it for writing,
// else as stored; cached says which. A cached copy may be stale: a
// decision it does not support must be checked on GetJob's.
func (c *Kernel) PeekJob(ctx context.Context, productID, id string) (j *fleet.Job, cached bool, err error) {
	if it, ok := c.Jobs.Get(productID, id); ok {
		if j, err := DecodeJob(it); err == nil {
			return j, true, nil
		}
	}
	j, err = c.GetJob(ctx, productID, id)
	return j, false, err
}

func (c *Kernel) GetJob(ctx context.Context, productID, id string) (*fleet.Job, error) {
	if productID != "" {
		it, err := c.Store.Read(ctx, store.Jobs, productID, id)
		if err != nil {
			return nil, ReadError("job", id, err)
		}
		return DecodeJob(it)
	}
	jobs, err := c.QueryJobs(ctx, store.Query{Where: []store.Cond{store.Eq("id", id)}})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, NotFound("job", id)
	}
	return jobs[0], nil
}
