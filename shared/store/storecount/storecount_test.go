package storecount_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/store/storecount"
	"github.com/gigafactory/fleet/shared/store/storetest"
)

func newSQLite(t *testing.T) store.Store {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// The decorator changes no behaviour: it passes the conformance suite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return storecount.New(newSQLite(t)) })
}

func TestCounts(t *testing.T) {
	ctx := t.Context()
	s := storecount.New(newSQLite(t))
	require.Equal(t, storecount.Counts{}, s.Snapshot())

	body := []byte(`{"id":"j1","productId":"p1","n":0}`)
	rev, err := s.Create(ctx, store.Jobs, "p1", "j1", body)
	require.NoError(t, err)
	_, err = s.Create(ctx, store.Jobs, "p1", "j1", body) // conflict
	require.ErrorIs(t, err, store.ErrExists)
	_, err = s.Read(ctx, store.Jobs, "p1", "j1")
	require.NoError(t, err)
	_, err = s.Read(ctx, store.Jobs, "p1", "missing") // failed calls count too
	require.ErrorIs(t, err, store.ErrNotFound)
	rev2, err := s.Replace(ctx, store.Jobs, "p1", "j1", body, rev)
	require.NoError(t, err)
	_, err = s.Replace(ctx, store.Jobs, "p1", "j1", body, rev) // conflict
	require.ErrorIs(t, err, store.ErrPrecondition)
	_, err = s.Upsert(ctx, store.Jobs, "p1", "j2", []byte(`{"id":"j2","productId":"p1"}`))
	require.NoError(t, err)
	_, err = s.Increment(ctx, store.Jobs, "p1", "j1", "n", 1)
	require.NoError(t, err)
	require.ErrorIs(t, s.Delete(ctx, store.Jobs, "p1", "j1", rev2), store.ErrPrecondition) // conflict
	require.NoError(t, s.Delete(ctx, store.Jobs, "p1", "j2", ""))
	_, err = s.Query(ctx, store.Jobs, store.Query{PartitionKey: "p1"})
	require.NoError(t, err)
	_, err = s.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)
	_, err = s.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)

	before := storecount.Counts{Reads: 2, Writes: 8, Queries: 1, FeedReads: 2, Conflicts: 3}
	require.Equal(t, before, s.Snapshot())
	require.Equal(t, int64(13), before.Total())

	// Concurrent calls are all counted.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				_, _ = s.Read(ctx, store.Jobs, "p1", "missing")
			}
		})
	}
	wg.Wait()
	require.Equal(t, storecount.Counts{Reads: 400}, s.Snapshot().Sub(before))
}
