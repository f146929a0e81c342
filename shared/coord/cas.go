package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// maxCASAttempts bounds optimistic retries on one document. Each retry
// means another writer won; past this the caller gets a ConflictError.
const maxCASAttempts = 16

// errNoChange tells cas the closure decided nothing needs writing.
var errNoChange = errors.New("no change")

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

// docKind is what cas needs to know of one container's documents.
type docKind[T any] struct {
	name      string // for errors: "job", "factory"
	container string
	// cache, when set, saves the read; a stale entry only costs a lost CAS.
	cache *itemCache
	// setRev stores the revision the document was read at.
	setRev func(*T, string)
}

var (
	jobDocs     = docKind[fleet.Job]{name: "job", container: store.Jobs, setRev: func(j *fleet.Job, r string) { j.Rev = r }}
	factoryDocs = docKind[fleet.Factory]{name: "factory", container: store.Factories, setRev: func(f *fleet.Factory, r string) { f.Rev = r }}
	tokenDocs   = docKind[fleet.Token]{name: "token", container: store.Tokens, setRev: func(t *fleet.Token, r string) { t.Rev = r }}
	productDocs = docKind[fleet.Product]{name: "product", container: store.Products, setRev: func(p *fleet.Product, r string) { p.Rev = r }}
)

// withCache returns k reading through cache.
func (k docKind[T]) withCache(cache *itemCache) docKind[T] {
	k.cache = cache
	return k
}

// cas is the one read-modify-write loop: it reads the document (from the
// cache when there), lets fn change it, and writes it back at the revision
// read. A lost race is retried on fresh data, up to maxCASAttempts, then a
// *ConflictError. fn sees a fresh copy on every attempt, so it must decide
// only from the document it is given; an error fn returns on a cached copy
// is never returned (the document is read again and fn tried once more).
// errNoChange from fn returns the document unwritten (written false). A
// missing document is a not_found error naming it.
func cas[T any](ctx context.Context, c *Coordinator, k docKind[T], pk, id string, fn func(*T) error) (v *T, written bool, err error) {
	drop := func() {
		if k.cache != nil {
			k.cache.drop(pk, id)
		}
	}
	gone := func() error {
		drop()
		return notFound(k.name, id)
	}
	for range maxCASAttempts {
		var it store.Item
		cached := false
		if k.cache != nil {
			it, cached = k.cache.get(pk, id)
		}
		if !cached {
			if it, err = c.store.Read(ctx, k.container, pk, id); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return nil, false, gone()
				}
				return nil, false, readError(k.name, id, err)
			}
		}
		if v, err = decode[T](it); err != nil {
			return nil, false, err
		}
		k.setRev(v, it.Rev)
		if err := fn(v); err != nil {
			if cached {
				drop()
				continue
			}
			if errors.Is(err, errNoChange) {
				return v, false, nil
			}
			return nil, false, err
		}
		body, err := json.Marshal(v)
		if err != nil {
			return nil, false, fmt.Errorf("encode %s %s: %w", k.name, id, err)
		}
		rev, err := c.store.Replace(ctx, k.container, pk, id, body, it.Rev)
		switch {
		case errors.Is(err, store.ErrPrecondition):
			drop()
			c.stats.casConflicts.Add(1)
			continue
		case errors.Is(err, store.ErrNotFound):
			return nil, false, gone()
		case err != nil:
			return nil, false, fmt.Errorf("write %s %s: %w", k.name, id, err)
		}
		k.setRev(v, rev)
		if k.cache != nil {
			k.cache.put(pk, id, store.Item{ID: id, PartitionKey: pk, Rev: rev, Body: body})
		}
		return v, true, nil
	}
	return nil, false, &ConflictError{Kind: k.name, ID: id, Attempts: maxCASAttempts}
}
