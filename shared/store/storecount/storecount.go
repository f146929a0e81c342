// Package storecount wraps a store.Store and counts its operations by kind,
// so benchmarks can report store operations per job lifecycle (the cost
// that Cosmos DB bills as request units).
package storecount

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/gigafactory/fleet/shared/store"
)

// Counts is a snapshot of the counters. Every call is counted, failed ones
// included: a failed call still costs a round trip.
type Counts struct {
	Reads     int64 `json:"reads"`     // Read
	Writes    int64 `json:"writes"`    // Create, Replace, Upsert, Delete, Increment
	Queries   int64 `json:"queries"`   // Query (one per page)
	FeedReads int64 `json:"feedReads"` // ReadChanges (one per page)
	// Conflicts are writes refused with ErrPrecondition or ErrExists: lost
	// races, the 409/412 rate.
	Conflicts int64 `json:"conflicts"`
}

// Sub returns c - o, the operations between two snapshots.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		Reads:     c.Reads - o.Reads,
		Writes:    c.Writes - o.Writes,
		Queries:   c.Queries - o.Queries,
		FeedReads: c.FeedReads - o.FeedReads,
		Conflicts: c.Conflicts - o.Conflicts,
	}
}

// Total is the number of operations of every kind (conflicts are writes, so
// they are not added again).
func (c Counts) Total() int64 { return c.Reads + c.Writes + c.Queries + c.FeedReads }

// Store is a store.Store that counts the calls it passes to the one it
// wraps. It adds no behaviour: results and errors are the inner store's.
type Store struct {
	inner                                       store.Store
	reads, writes, queries, feedReads, conflict atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New wraps inner.
func New(inner store.Store) *Store { return &Store{inner: inner} }

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() store.Store { return s.inner }

// Snapshot returns the counts so far. Each counter is read atomically; a
// snapshot taken while calls are in flight may count some kinds a call later
// than others.
func (s *Store) Snapshot() Counts {
	return Counts{
		Reads:     s.reads.Load(),
		Writes:    s.writes.Load(),
		Queries:   s.queries.Load(),
		FeedReads: s.feedReads.Load(),
		Conflicts: s.conflict.Load(),
	}
}

// write counts a write and whether it lost a race.
func (s *Store) write(err error) {
	s.writes.Add(1)
	if errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrExists) {
		s.conflict.Add(1)
	}
}

// Create counts a write.
func (s *Store) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	rev, err := s.inner.Create(ctx, container, pk, id, body)
	s.write(err)
	return rev, err
}

// Read counts a read.
func (s *Store) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	s.reads.Add(1)
	return s.inner.Read(ctx, container, pk, id)
}

// Replace counts a write.
func (s *Store) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	rev, err := s.inner.Replace(ctx, container, pk, id, body, ifRev)
	s.write(err)
	return rev, err
}

// Upsert counts a write.
func (s *Store) Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	rev, err := s.inner.Upsert(ctx, container, pk, id, body)
	s.write(err)
	return rev, err
}

// Delete counts a write.
func (s *Store) Delete(ctx context.Context, container, pk, id, ifRev string) error {
	err := s.inner.Delete(ctx, container, pk, id, ifRev)
	s.write(err)
	return err
}

// Increment counts a write.
func (s *Store) Increment(ctx context.Context, container, pk, id, field string, delta int64) (int64, error) {
	v, err := s.inner.Increment(ctx, container, pk, id, field, delta)
	s.write(err)
	return v, err
}

// IncrementIfEqual counts a write, a refused one as a conflict: the store
// was asked to write.
func (s *Store) IncrementIfEqual(ctx context.Context, container, pk, id, field, guard string, delta int64) (int64, error) {
	v, err := s.inner.IncrementIfEqual(ctx, container, pk, id, field, guard, delta)
	s.write(err)
	return v, err
}

// Query counts a query page.
func (s *Store) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	s.queries.Add(1)
	return s.inner.Query(ctx, container, q)
}

// ReadChanges counts a feed page.
func (s *Store) ReadChanges(ctx context.Context, container, continuation string, max int) (store.ChangePage, error) {
	s.feedReads.Add(1)
	return s.inner.ReadChanges(ctx, container, continuation, max)
}

// ChangesHead counts a feed page: on Cosmos it may ask the service.
func (s *Store) ChangesHead(ctx context.Context, container string) (string, error) {
	s.feedReads.Add(1)
	return s.inner.ChangesHead(ctx, container)
}
