// Package storetest is the conformance suite every store.Store backend
// passes: point operations and their errors, CAS, increments, partition
// isolation, queries and pagination, the change feed, and real concurrency
// (racing CAS writers, racing creates and deletes, a feed tailed while
// written).
//
// The suite asserts only what the store.Store contract promises, so it holds
// for Cosmos DB as well as SQLite: revisions are opaque, bodies are compared
// as JSON unless the same stored document is read twice (then byte for byte),
// cross-partition results are compared as sets, and change-feed order is
// checked within a partition (Cosmos orders its feed per partition key).
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// Run runs the suite. newStore is called once per subtest and must return a
// store whose containers are empty and that nothing else writes while the
// subtest runs (a new file, a new database), because query and change-feed
// assertions are exact; it registers its own cleanup with t.Cleanup.
// Subtests run in parallel, each on its own store.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"CreateReadExists", testCreateReadExists},
		{"ReadNotFound", testReadNotFound},
		{"Replace", testReplace},
		{"Upsert", testUpsert},
		{"Delete", testDelete},
		{"Increment", testIncrement},
		{"IncrementConcurrent", testIncrementConcurrent},
		{"IncrementIfEqual", testIncrementIfEqual},
		{"IncrementIfEqualConcurrent", testIncrementIfEqualConcurrent},
		{"PartitionIsolation", testPartitionIsolation},
		{"InvalidDocuments", testInvalidDocuments},
		{"TooLarge", testTooLarge},
		{"UnknownContainer", testUnknownContainer},
		{"CanceledContext", testCanceledContext},
		{"QuerySinglePartition", testQuerySinglePartition},
		{"QueryCrossPartition", testQueryCrossPartition},
		{"QueryRejectsBadInput", testQueryRejectsBadInput},
		{"QueryBadContinuation", testQueryBadContinuation},
		{"ChangeFeedOrderAndLatestVersion", testChangeFeedOrder},
		{"ChangeFeedPagination", testChangeFeedPagination},
		{"ChangeFeedPartitions", testChangeFeedPartitions},
		{"ChangeFeedContainerIsolation", testChangeFeedContainerIsolation},
		{"ChangeFeedTailWhileWriting", testChangeFeedTail},
		{"ChangesHead", testChangesHead},
		{"ChangeFeedBadContinuation", testChangeFeedBadContinuation},
		{"ChangeFeedCorruptContinuation", testChangeFeedCorruptContinuation},
		{"CASRace", testCASRace},
		{"CreateRace", testCreateRace},
		{"DeleteRace", testDeleteRace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			require.NotNil(t, s, "newStore returned nil")
			tc.fn(t, s)
		})
	}
}

// fields are a document's fields besides its id and partition key.
type fields map[string]any

// pkField is the top-level field holding container's partition key.
func pkField(t testing.TB, container string) string {
	t.Helper()
	for _, c := range store.Containers {
		if c.Name == container {
			return strings.TrimPrefix(c.PartitionKey, "/")
		}
	}
	require.FailNow(t, "unknown container", container)
	return ""
}

// doc builds a body for container that carries its id and partition key,
// as every stored document does.
func doc(t testing.TB, container, pk, id string, f fields) []byte {
	t.Helper()
	m := map[string]any{"id": id, pkField(t, container): pk}
	for k, v := range f {
		m[k] = v
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// decode unmarshals a body into its fields (numbers as float64).
func decode(t testing.TB, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "body %s", body)
	return m
}

// mustCreate creates a document and returns its revision.
func mustCreate(t testing.TB, s store.Store, container, pk, id string, body []byte) string {
	t.Helper()
	rev, err := s.Create(context.Background(), container, pk, id, body)
	require.NoError(t, err, "create %s/%s/%s", container, pk, id)
	require.NotEmpty(t, rev, "create %s/%s/%s returned no revision", container, pk, id)
	return rev
}

// mustRead reads a document that must exist.
func mustRead(t testing.TB, s store.Store, container, pk, id string) store.Item {
	t.Helper()
	it, err := s.Read(context.Background(), container, pk, id)
	require.NoError(t, err, "read %s/%s/%s", container, pk, id)
	require.Equal(t, id, it.ID)
	require.Equal(t, pk, it.PartitionKey)
	require.NotEmpty(t, it.Rev)
	return it
}

// requireAbsent checks that a document does not exist.
func requireAbsent(t testing.TB, s store.Store, container, pk, id string) {
	t.Helper()
	_, err := s.Read(context.Background(), container, pk, id)
	require.ErrorIs(t, err, store.ErrNotFound, "%s/%s/%s should not exist", container, pk, id)
}

// requireUnchanged checks that a document is still exactly before: same
// revision, same bytes.
func requireUnchanged(t testing.TB, s store.Store, container string, before store.Item) {
	t.Helper()
	after := mustRead(t, s, container, before.PartitionKey, before.ID)
	require.Equal(t, before.Rev, after.Rev, "revision of %s/%s changed", before.PartitionKey, before.ID)
	require.Equal(t, string(before.Body), string(after.Body), "body of %s/%s changed", before.PartitionKey, before.ID)
}

// requireStoreError checks that err is an error and not one of the store's
// "the document says no" sentinels: bad input must not look like a missing
// document or a lost race, or callers would act on it.
func requireStoreError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	for _, sentinel := range []error{store.ErrNotFound, store.ErrExists, store.ErrPrecondition} {
		require.False(t, errors.Is(err, sentinel), "%v: bad input reported as %v", err, sentinel)
	}
}

// key names a document across partitions.
func key(pk, id string) string { return pk + "\x00" + id }

// splitKey is the inverse of key.
func splitKey(k string) (pk, id string) {
	pk, id, _ = strings.Cut(k, "\x00")
	return pk, id
}

// firstErr collects the first error reported by worker goroutines, which
// must not call t.FailNow themselves.
type firstErr struct {
	ch chan error
}

func newFirstErr() *firstErr { return &firstErr{ch: make(chan error, 1)} }

func (f *firstErr) set(format string, args ...any) {
	select {
	case f.ch <- fmt.Errorf(format, args...):
	default:
	}
}

func (f *firstErr) failed() bool { return len(f.ch) > 0 }

func (f *firstErr) check(t testing.TB) {
	t.Helper()
	select {
	case err := <-f.ch:
		require.NoError(t, err)
	default:
	}
}
