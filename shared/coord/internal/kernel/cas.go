package kernel

import (
	"context"
	"errors"
	"fmt"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// MaxCASAttempts bounds optimistic retries on one document. Each retry
// means another writer won; past this the caller gets a ConflictError.
const MaxCASAttempts = 16

// ErrNoChange tells cas the closure decided nothing needs writing.
var ErrNoChange = errors.New("no change")

// ConflictError is a compare-and-swap that kept losing: the document
// changed under every one of Attempts tries. It is a fleet conflict: errors.Is
// matches fleet.ErrConflict and errors.As finds a *fleet.Error, so clients
// get a 409 to retry.
type ConflictError struct {
	Kind     string // "job", "factory", "token", "product", "repo"
	ID       string
	Attempts int
}

func (e *ConflictError) Error() string { return e.Unwrap().Error() }

func (e *ConflictError) Unwrap() error {
	return fleet.Errorf(fleet.CodeConflict, "%s %s changed concurrently %d times; try again", e.Kind, e.ID, e.Attempts)
}

// DocKind is what CAS needs to know of one container's documents.
type DocKind[T any] struct {
	Name      string // for errors: "job", "factory"
	Container string
	// cache, when set, saves the read; a stale entry only costs a lost CAS.
	Cache *ItemCache
	// setRev stores the revision the document was read at.
	SetRev func(*T, string)
	// BeforeWrite, when set, readies a document for its write.
	BeforeWrite func(*T)
}

// The document kinds more than one use-case package writes with CAS.
var (
	// JobDocs: MutateJob reads it through the job cache.
	// Its growing fields are bounded before each write (EncodeJob).
	JobDocs = DocKind[fleet.Job]{Name: "job", Container: store.Jobs, SetRev: func(j *fleet.Job, r string) { j.Rev = r },
		BeforeWrite: (*fleet.Job).BoundGrowth}
	FactoryDocs = DocKind[fleet.Factory]{Name: "factory", Container: store.Factories, SetRev: func(f *fleet.Factory, r string) { f.Rev = r }}
	TokenDocs   = DocKind[fleet.Token]{Name: "token", Container: store.Tokens, SetRev: func(t *fleet.Token, r string) { t.Rev = r }}
	ProductDocs = DocKind[fleet.Product]{Name: "product", Container: store.Products, SetRev: func(p *fleet.Product, r string) { p.Rev = r }}
)

// WithCache returns k reading through cache.
func (k DocKind[T]) WithCache(cache *ItemCache) DocKind[T] {
	k.Cache = cache
	return k
}

// CAS is the one read-modify-write loop: it reads the document (from the
// cache when there), lets fn change it, and writes it back at the revision
// read. A lost race is retried on fresh data, up to MaxCASAttempts, then a
// *ConflictError. fn sees a fresh copy on every attempt, so it must decide
// only from the document it is given; an error fn returns on a cached copy
// is never returned (the document is read again and fn tried once more).
// ErrNoChange from fn returns the document unwritten (written false). A
// missing document is a not_found error naming it.
func CAS[T any](ctx context.Context, c *Kernel, k DocKind[T], pk, id string, fn func(*T) error) (v *T, written bool, err error) {
	drop := func() {
		if k.Cache != nil {
			k.Cache.Drop(pk, id)
		}
	}
	gone := func() error {
		drop()
		return NotFound(k.Name, id)
	}
	for range MaxCASAttempts {
		var it store.Item
		cached := false
		if k.Cache != nil {
			it, cached = k.Cache.Get(pk, id)
		}
		if !cached {
			if it, err = c.Store.Read(ctx, k.Container, pk, id); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return nil, false, gone()
				}
				return nil, false, ReadError(k.Name, id, err)
			}
		}
		if v, err = Decode[T](it); err != nil {
			return nil, false, err
		}
		k.SetRev(v, it.Rev)
		if err := fn(v); err != nil {
			if cached {
				drop()
				continue
			}
			if errors.Is(err, ErrNoChange) {
				return v, false, nil
			}
			return nil, false, err
		}
		if k.BeforeWrite != nil {
			k.BeforeWrite(v)
		}
		body, err := marshal(v)
		if err != nil {
			return nil, false, fmt.Errorf("encode %s %s: %w", k.Name, id, err)
		}
		rev, err := c.Store.Replace(ctx, k.Container, pk, id, body, it.Rev)
		switch {
		case errors.Is(err, store.ErrPrecondition):
			drop()
			c.Counters.CASConflicts.Add(1)
			continue
		case errors.Is(err, store.ErrNotFound):
			return nil, false, gone()
		case err != nil:
			return nil, false, fmt.Errorf("write %s %s: %w", k.Name, id, err)
		}
		k.SetRev(v, rev)
		if k.Cache != nil {
			k.Cache.Put(pk, id, store.Item{ID: id, PartitionKey: pk, Rev: rev, Body: body})
		}
		return v, true, nil
	}
	return nil, false, &ConflictError{Kind: k.Name, ID: id, Attempts: MaxCASAttempts}
}
