package storetest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

func testCreateReadExists(t *testing.T, s store.Store) {
	ctx := t.Context()
	body := doc(t, store.Jobs, "p1", "j1", fields{"stage": "queued", "n": 1, "tags": []string{"a", "b"}})
	rev, err := s.Create(ctx, store.Jobs, "p1", "j1", body)
	require.NoError(t, err)
	require.NotEmpty(t, rev)

	it := mustRead(t, s, store.Jobs, "p1", "j1")
	require.Equal(t, rev, it.Rev, "Read must return the revision Create returned")
	require.JSONEq(t, string(body), string(it.Body))

	_, err = s.Create(ctx, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"stage": "other"}))
	require.ErrorIs(t, err, store.ErrExists)
	requireUnchanged(t, s, store.Jobs, it)

	rev2 := mustCreate(t, s, store.Jobs, "p1", "j2", doc(t, store.Jobs, "p1", "j2", nil))
	require.NotEqual(t, rev, rev2, "two documents share a revision")
	requireUnchanged(t, s, store.Jobs, it)

	// A body without the id and partition-key fields is accepted and reads
	// back as written (the Cosmos backend adds and strips them).
	bare := []byte(`{"stage":"queued","n":2}`)
	mustCreate(t, s, store.Jobs, "p1", "bare", bare)
	require.JSONEq(t, string(bare), string(mustRead(t, s, store.Jobs, "p1", "bare").Body))
}

func testReadNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.Read(ctx, store.Jobs, "p1", "missing")
	require.ErrorIs(t, err, store.ErrNotFound)

	mustCreate(t, s, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", nil))
	_, err = s.Read(ctx, store.Jobs, "p1", "j2")
	require.ErrorIs(t, err, store.ErrNotFound)
	// The same address in another container is another document.
	_, err = s.Read(ctx, store.Runs, "p1", "j1")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testReplace(t *testing.T, s store.Store) {
	ctx := t.Context()
	rev0 := mustCreate(t, s, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"n": 0}))

	body1 := doc(t, store.Jobs, "p1", "j1", fields{"n": 1})
	rev1, err := s.Replace(ctx, store.Jobs, "p1", "j1", body1, rev0)
	require.NoError(t, err)
	require.NotEmpty(t, rev1)
	require.NotEqual(t, rev0, rev1, "a write must change the revision")
	it := mustRead(t, s, store.Jobs, "p1", "j1")
	require.Equal(t, rev1, it.Rev)
	require.JSONEq(t, string(body1), string(it.Body))

	// Stale revision: refused, nothing changes.
	_, err = s.Replace(ctx, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"n": 2}), rev0)
	require.ErrorIs(t, err, store.ErrPrecondition)
	requireUnchanged(t, s, store.Jobs, it)

	// A revision this store never issued is stale too.
	_, err = s.Replace(ctx, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"n": 3}), "not-a-revision")
	require.ErrorIs(t, err, store.ErrPrecondition)
	requireUnchanged(t, s, store.Jobs, it)

	// Replace is a compare-and-swap: an empty revision is refused.
	_, err = s.Replace(ctx, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"n": 4}), "")
	requireStoreError(t, err)
	requireUnchanged(t, s, store.Jobs, it)

	// Missing document: not found, and not created.
	_, err = s.Replace(ctx, store.Jobs, "p1", "nope", doc(t, store.Jobs, "p1", "nope", nil), rev1)
	require.ErrorIs(t, err, store.ErrNotFound)
	requireAbsent(t, s, store.Jobs, "p1", "nope")

	// No ABA: after a delete and a re-create the old revision is stale.
	require.NoError(t, s.Delete(ctx, store.Jobs, "p1", "j1", ""))
	bodyNew := doc(t, store.Jobs, "p1", "j1", fields{"n": 10})
	mustCreate(t, s, store.Jobs, "p1", "j1", bodyNew)
	recreated := mustRead(t, s, store.Jobs, "p1", "j1")
	for _, old := range []string{rev0, rev1} {
		_, err = s.Replace(ctx, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"n": 11}), old)
		require.ErrorIs(t, err, store.ErrPrecondition, "a revision of the deleted document matched the new one")
		requireUnchanged(t, s, store.Jobs, recreated)
	}
}

func testUpsert(t *testing.T, s store.Store) {
	ctx := t.Context()
	body1 := doc(t, store.Jobs, "p1", "u1", fields{"v": "one"})
	rev1, err := s.Upsert(ctx, store.Jobs, "p1", "u1", body1)
	require.NoError(t, err)
	require.NotEmpty(t, rev1)
	it := mustRead(t, s, store.Jobs, "p1", "u1")
	require.Equal(t, rev1, it.Rev)
	require.JSONEq(t, string(body1), string(it.Body))

	body2 := doc(t, store.Jobs, "p1", "u1", fields{"v": "two"})
	rev2, err := s.Upsert(ctx, store.Jobs, "p1", "u1", body2)
	require.NoError(t, err)
	require.NotEqual(t, rev1, rev2)
	it = mustRead(t, s, store.Jobs, "p1", "u1")
	require.Equal(t, rev2, it.Rev)
	require.JSONEq(t, string(body2), string(it.Body))

	// The upsert moved the revision on: a holder of the old one loses.
	_, err = s.Replace(ctx, store.Jobs, "p1", "u1", doc(t, store.Jobs, "p1", "u1", fields{"v": "three"}), rev1)
	require.ErrorIs(t, err, store.ErrPrecondition)
	requireUnchanged(t, s, store.Jobs, it)
	_, err = s.Replace(ctx, store.Jobs, "p1", "u1", doc(t, store.Jobs, "p1", "u1", fields{"v": "three"}), rev2)
	require.NoError(t, err)
}

func testDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, store.Jobs, "p1", "a", doc(t, store.Jobs, "p1", "a", nil))
	require.NoError(t, s.Delete(ctx, store.Jobs, "p1", "a", ""))
	requireAbsent(t, s, store.Jobs, "p1", "a")
	require.ErrorIs(t, s.Delete(ctx, store.Jobs, "p1", "a", ""), store.ErrNotFound)

	b0 := mustCreate(t, s, store.Jobs, "p1", "b", doc(t, store.Jobs, "p1", "b", fields{"n": 0}))
	b1, err := s.Replace(ctx, store.Jobs, "p1", "b", doc(t, store.Jobs, "p1", "b", fields{"n": 1}), b0)
	require.NoError(t, err)
	it := mustRead(t, s, store.Jobs, "p1", "b")
	require.ErrorIs(t, s.Delete(ctx, store.Jobs, "p1", "b", b0), store.ErrPrecondition)
	requireUnchanged(t, s, store.Jobs, it)
	require.NoError(t, s.Delete(ctx, store.Jobs, "p1", "b", b1))
	requireAbsent(t, s, store.Jobs, "p1", "b")
	require.ErrorIs(t, s.Delete(ctx, store.Jobs, "p1", "b", b1), store.ErrNotFound)
}

func testIncrement(t *testing.T, s store.Store) {
	ctx := t.Context()
	body := doc(t, store.QueueStates, "p1", "p1", fields{
		"version": 5, "name": "x", "nested": map[string]any{"a": []int{1, 2}}, "flag": true, "ratio": 0.5,
	})
	mustCreate(t, s, store.QueueStates, "p1", "p1", body)
	before := mustRead(t, s, store.QueueStates, "p1", "p1")

	v, err := s.Increment(ctx, store.QueueStates, "p1", "p1", "version", 3)
	require.NoError(t, err)
	require.Equal(t, int64(8), v)
	v, err = s.Increment(ctx, store.QueueStates, "p1", "p1", "version", -10)
	require.NoError(t, err)
	require.Equal(t, int64(-2), v)

	after := mustRead(t, s, store.QueueStates, "p1", "p1")
	require.NotEqual(t, before.Rev, after.Rev, "an increment is a write: it must change the revision")
	want, got := decode(t, body), decode(t, after.Body)
	require.Equal(t, float64(-2), got["version"])
	delete(want, "version")
	delete(got, "version")
	require.Equal(t, want, got, "increment changed other fields")

	// A CAS holder of the pre-increment revision loses.
	_, err = s.Replace(ctx, store.QueueStates, "p1", "p1", body, before.Rev)
	require.ErrorIs(t, err, store.ErrPrecondition)

	// A missing field is created with the delta (Cosmos patch semantics).
	v, err = s.Increment(ctx, store.QueueStates, "p1", "p1", "fresh", 4)
	require.NoError(t, err)
	require.Equal(t, int64(4), v)
	require.Equal(t, float64(4), decode(t, mustRead(t, s, store.QueueStates, "p1", "p1").Body)["fresh"])

	_, err = s.Increment(ctx, store.QueueStates, "p1", "nope", "version", 1)
	require.ErrorIs(t, err, store.ErrNotFound)
	requireAbsent(t, s, store.QueueStates, "p1", "nope")

	// A field that holds no number, or a bad field name: refused, no change.
	cur := mustRead(t, s, store.QueueStates, "p1", "p1")
	for _, f := range []string{"name", "nested", "flag", "id", "productId", "", "a.b", "version'", "$.version", "a b", "1x"} {
		_, err = s.Increment(ctx, store.QueueStates, "p1", "p1", f, 1)
		requireStoreError(t, err, "increment of field %q", f)
		requireUnchanged(t, s, store.QueueStates, cur)
	}
	// Overflow is refused rather than wrapped or turned into a float.
	mustCreate(t, s, store.QueueStates, "p2", "p2", doc(t, store.QueueStates, "p2", "p2", fields{"version": 1}))
	_, err = s.Increment(ctx, store.QueueStates, "p2", "p2", "version", math.MaxInt64)
	if err == nil {
		// Cosmos stores numbers as doubles and may accept; then the value
		// read back must at least not have wrapped to a negative.
		require.Greater(t, decode(t, mustRead(t, s, store.QueueStates, "p2", "p2").Body)["version"], float64(0))
	}
}

func testIncrementIfEqual(t *testing.T, s store.Store) {
	ctx := t.Context()
	body := doc(t, store.QueueStates, "p1", "p1", fields{"n": 4, "g": 4, "other": 9, "name": "x"})
	mustCreate(t, s, store.QueueStates, "p1", "p1", body)

	// Equal: written, as an increment is.
	before := mustRead(t, s, store.QueueStates, "p1", "p1")
	v, err := s.IncrementIfEqual(ctx, store.QueueStates, "p1", "p1", "n", "g", 1)
	require.NoError(t, err)
	require.Equal(t, int64(5), v)
	after := mustRead(t, s, store.QueueStates, "p1", "p1")
	require.NotEqual(t, before.Rev, after.Rev, "a conditional increment that matched is a write")
	got := decode(t, after.Body)
	require.Equal(t, float64(5), got["n"])
	require.Equal(t, float64(4), got["g"], "the guard is only compared")

	// Now unequal, a guard that is absent, a field that is absent: refused
	// as a precondition, nothing written.
	for _, c := range []struct{ field, guard string }{{"n", "g"}, {"n", "missing"}, {"missing", "g"}, {"n", "other"}} {
		_, err = s.IncrementIfEqual(ctx, store.QueueStates, "p1", "p1", c.field, c.guard, 1)
		require.ErrorIs(t, err, store.ErrPrecondition, "%s if %s", c.field, c.guard)
		requireUnchanged(t, s, store.QueueStates, after)
	}

	// Equal again once the guard catches up; a negative delta too.
	_, err = s.Increment(ctx, store.QueueStates, "p1", "p1", "g", 1)
	require.NoError(t, err)
	v, err = s.IncrementIfEqual(ctx, store.QueueStates, "p1", "p1", "n", "g", -3)
	require.NoError(t, err)
	require.Equal(t, int64(2), v)

	_, err = s.IncrementIfEqual(ctx, store.QueueStates, "p1", "nope", "n", "g", 1)
	require.ErrorIs(t, err, store.ErrNotFound)
	requireAbsent(t, s, store.QueueStates, "p1", "nope")

	cur := mustRead(t, s, store.QueueStates, "p1", "p1")
	for _, c := range []struct{ field, guard string }{{"id", "g"}, {"productId", "g"}, {"n", ""}, {"n", "a.b"}, {"n", "g'"}, {"a b", "g"}} {
		_, err = s.IncrementIfEqual(ctx, store.QueueStates, "p1", "p1", c.field, c.guard, 1)
		requireStoreError(t, err, "increment of %q if %q", c.field, c.guard)
		requireUnchanged(t, s, store.QueueStates, cur)
	}
}

// testIncrementIfEqualConcurrent: the condition and the increment are one
// atomic step. Each round, with the guard equal to the field, several
// writers race to increment the field if it still equals the guard: exactly
// one wins (a check apart from the write would let several through).
func testIncrementIfEqualConcurrent(t *testing.T, s store.Store) {
	const rounds, workers = 20, 8
	mustCreate(t, s, store.QueueStates, "p1", "p1", doc(t, store.QueueStates, "p1", "p1", fields{"n": 0, "g": 0}))
	for round := range rounds {
		var (
			wg   sync.WaitGroup
			won  atomic.Int64
			errs = newFirstErr()
		)
		for range workers {
			wg.Go(func() {
				_, err := s.IncrementIfEqual(context.Background(), store.QueueStates, "p1", "p1", "n", "g", 1)
				switch {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, store.ErrPrecondition):
					errs.set("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		errs.check(t)
		require.EqualValues(t, 1, won.Load(), "round %d: one writer wins", round)
		_, err := s.Increment(t.Context(), store.QueueStates, "p1", "p1", "g", 1)
		require.NoError(t, err)
	}
	got := decode(t, mustRead(t, s, store.QueueStates, "p1", "p1").Body)
	require.Equal(t, float64(rounds), got["n"])
	require.Equal(t, float64(rounds), got["g"])
}

func testIncrementConcurrent(t *testing.T, s store.Store) {
	const workers, each = 16, 25
	mustCreate(t, s, store.QueueStates, "p1", "p1", doc(t, store.QueueStates, "p1", "p1", fields{"version": 0, "keep": "me"}))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen []int64
		errs = newFirstErr()
	)
	for range workers {
		wg.Go(func() {
			for range each {
				v, err := s.Increment(context.Background(), store.QueueStates, "p1", "p1", "version", 1)
				if err != nil {
					errs.set("increment: %v", err)
					return
				}
				mu.Lock()
				seen = append(seen, v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	errs.check(t)
	got := decode(t, mustRead(t, s, store.QueueStates, "p1", "p1").Body)
	require.Equal(t, float64(workers*each), got["version"], "increments were lost")
	require.Equal(t, "me", got["keep"])
	// Each increment is atomic, so each returned a distinct value: 1..N.
	slices.Sort(seen)
	want := make([]int64, workers*each)
	for i := range want {
		want[i] = int64(i + 1)
	}
	require.Equal(t, want, seen, "increments returned duplicate or impossible values")
}

func testPartitionIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	bodyA := doc(t, store.Jobs, "pA", "same", fields{"v": "a", "n": 0})
	bodyB := doc(t, store.Jobs, "pB", "same", fields{"v": "b", "n": 0})
	revA := mustCreate(t, s, store.Jobs, "pA", "same", bodyA)
	revB := mustCreate(t, s, store.Jobs, "pB", "same", bodyB)
	require.JSONEq(t, string(bodyA), string(mustRead(t, s, store.Jobs, "pA", "same").Body))
	require.JSONEq(t, string(bodyB), string(mustRead(t, s, store.Jobs, "pB", "same").Body))
	requireAbsent(t, s, store.Jobs, "pC", "same")

	itB := mustRead(t, s, store.Jobs, "pB", "same")
	// B's revision does not unlock A.
	_, err := s.Replace(ctx, store.Jobs, "pA", "same", doc(t, store.Jobs, "pA", "same", fields{"v": "x"}), revB)
	require.ErrorIs(t, err, store.ErrPrecondition)
	_, err = s.Replace(ctx, store.Jobs, "pA", "same", doc(t, store.Jobs, "pA", "same", fields{"v": "a2", "n": 0}), revA)
	require.NoError(t, err)
	requireUnchanged(t, s, store.Jobs, itB)

	_, err = s.Increment(ctx, store.Jobs, "pA", "same", "n", 5)
	require.NoError(t, err)
	requireUnchanged(t, s, store.Jobs, itB)

	require.NoError(t, s.Delete(ctx, store.Jobs, "pA", "same", ""))
	requireAbsent(t, s, store.Jobs, "pA", "same")
	requireUnchanged(t, s, store.Jobs, itB)

	page, err := s.Query(ctx, store.Jobs, store.Query{PartitionKey: "pB"})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, "pB", page.Items[0].PartitionKey)
}

func testInvalidDocuments(t *testing.T, s store.Store) {
	ctx := t.Context()
	good := doc(t, store.Jobs, "p1", "j1", fields{"n": 1})
	bodies := map[string][]byte{
		"not JSON":              []byte(`{"id":"j1",`),
		"JSON array":            []byte(`[{"id":"j1"}]`),
		"JSON string":           []byte(`"j1"`),
		"JSON null":             []byte(`null`),
		"empty":                 nil,
		"trailing data":         []byte(`{"id":"j1","productId":"p1"} {}`),
		"duplicate field":       []byte(`{"id":"j1","productId":"p1","n":1,"n":2}`),
		"id mismatch":           doc(t, store.Jobs, "p1", "other", nil),
		"id not a string":       []byte(`{"id":1,"productId":"p1"}`),
		"partition key differs": doc(t, store.Jobs, "p2", "j1", nil),
		"partition key number":  []byte(`{"id":"j1","productId":7}`),
		"over 2 MB":             doc(t, store.Jobs, "p1", "j1", fields{"blob": strings.Repeat("x", 3<<20)}),
	}
	for name, body := range bodies {
		_, err := s.Create(ctx, store.Jobs, "p1", "j1", body)
		requireStoreError(t, err, "create with %s", name)
		requireAbsent(t, s, store.Jobs, "p1", "j1")
		_, err = s.Upsert(ctx, store.Jobs, "p1", "j1", body)
		requireStoreError(t, err, "upsert with %s", name)
		requireAbsent(t, s, store.Jobs, "p1", "j1")
	}
	rev := mustCreate(t, s, store.Jobs, "p1", "j1", good)
	it := mustRead(t, s, store.Jobs, "p1", "j1")
	for name, body := range bodies {
		_, err := s.Replace(ctx, store.Jobs, "p1", "j1", body, rev)
		requireStoreError(t, err, "replace with %s", name)
		requireUnchanged(t, s, store.Jobs, it)
		_, err = s.Upsert(ctx, store.Jobs, "p1", "j1", body)
		requireStoreError(t, err, "upsert over a document with %s", name)
		requireUnchanged(t, s, store.Jobs, it)
	}

	// Ids Cosmos DB cannot address are refused everywhere.
	for _, id := range []string{"", "a/b", `a\b`, "a?b", "a#b", strings.Repeat("x", 256)} {
		_, err := s.Create(ctx, store.Jobs, "p1", id, doc(t, store.Jobs, "p1", id, nil))
		requireStoreError(t, err, "create with id %q", id)
	}
	// A container partitioned on /id takes pk == id only.
	_, err := s.Create(ctx, store.Factories, "f1", "f2", doc(t, store.Factories, "f2", "f2", nil))
	requireStoreError(t, err)
	_, err = s.Create(ctx, store.Factories, "f2", "f2", doc(t, store.Factories, "f2", "f2", nil))
	require.NoError(t, err)
}

// testTooLarge: a document over fleet.MaxDocumentBytes is refused with
// store.ErrTooLarge (so callers can answer 413, not 500) by every write, and
// nothing is written; a document at the limit's edge is stored.
func testTooLarge(t *testing.T, s store.Store) {
	ctx := t.Context()
	big := doc(t, store.Jobs, "p1", "j1", fields{"blob": strings.Repeat("x", fleet.MaxDocumentBytes)})
	_, err := s.Create(ctx, store.Jobs, "p1", "j1", big)
	require.ErrorIs(t, err, store.ErrTooLarge, "create")
	requireAbsent(t, s, store.Jobs, "p1", "j1")
	_, err = s.Upsert(ctx, store.Jobs, "p1", "j1", big)
	require.ErrorIs(t, err, store.ErrTooLarge, "upsert of a new document")
	requireAbsent(t, s, store.Jobs, "p1", "j1")

	// Just under the limit, with room for what a backend adds.
	fits := doc(t, store.Jobs, "p1", "j1", fields{"blob": ""})
	fits = doc(t, store.Jobs, "p1", "j1", fields{"blob": strings.Repeat("x", fleet.MaxDocumentBytes-len(fits)-1024)})
	rev := mustCreate(t, s, store.Jobs, "p1", "j1", fits)
	it := mustRead(t, s, store.Jobs, "p1", "j1")
	_, err = s.Replace(ctx, store.Jobs, "p1", "j1", big, rev)
	require.ErrorIs(t, err, store.ErrTooLarge, "replace")
	requireUnchanged(t, s, store.Jobs, it)
	_, err = s.Upsert(ctx, store.Jobs, "p1", "j1", big)
	require.ErrorIs(t, err, store.ErrTooLarge, "upsert over a document")
	requireUnchanged(t, s, store.Jobs, it)
}

func testUnknownContainer(t *testing.T, s store.Store) {
	ctx := t.Context()
	const c = "no_such_container"
	body := []byte(`{"id":"x","productId":"p"}`)
	_, err := s.Create(ctx, c, "p", "x", body)
	requireStoreError(t, err)
	_, err = s.Read(ctx, c, "p", "x")
	requireStoreError(t, err)
	_, err = s.Replace(ctx, c, "p", "x", body, "1")
	requireStoreError(t, err)
	_, err = s.Upsert(ctx, c, "p", "x", body)
	requireStoreError(t, err)
	requireStoreError(t, s.Delete(ctx, c, "p", "x", ""))
	_, err = s.Increment(ctx, c, "p", "x", "n", 1)
	requireStoreError(t, err)
	_, err = s.Query(ctx, c, store.Query{})
	requireStoreError(t, err)
	_, err = s.ReadChanges(ctx, c, "", 10)
	requireStoreError(t, err)
}

func testCanceledContext(t *testing.T, s store.Store) {
	body := doc(t, store.Jobs, "p1", "j1", fields{"n": 1})
	rev := mustCreate(t, s, store.Jobs, "p1", "j1", body)
	it := mustRead(t, s, store.Jobs, "p1", "j1")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Create(ctx, store.Jobs, "p1", "j2", doc(t, store.Jobs, "p1", "j2", nil))
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Read(ctx, store.Jobs, "p1", "j1")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Replace(ctx, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"n": 2}), rev)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Upsert(ctx, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"n": 3}))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.Delete(ctx, store.Jobs, "p1", "j1", ""), context.Canceled)
	_, err = s.Increment(ctx, store.Jobs, "p1", "j1", "n", 1)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Query(ctx, store.Jobs, store.Query{PartitionKey: "p1"})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Query(ctx, store.Jobs, store.Query{})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.ReadChanges(ctx, store.Jobs, "", 10)
	require.ErrorIs(t, err, context.Canceled)

	// None of the canceled writes happened.
	requireAbsent(t, s, store.Jobs, "p1", "j2")
	requireUnchanged(t, s, store.Jobs, it)
}
