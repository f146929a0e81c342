package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// TestHostLeasesInTheirOwnFile: the host's leases are written to their own
// SQLite file, so a checkpoint never waits for the fleet file's write lock;
// every other container stays in the fleet's file; a checkpoint written
// there before the move is still read, so a restarted host resumes.
func TestHostLeasesInTheirOwnFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	fleetFile, err := sqlite.Open(ctx, filepath.Join(dir, "fleet.db"))
	require.NoError(t, err)
	defer fleetFile.Close()
	leasesFile, err := sqlite.Open(ctx, filepath.Join(dir, hostLeasesFile))
	require.NoError(t, err)
	defer leasesFile.Close()
	h := hostLeases{Store: fleetFile, leases: leasesFile}

	// A checkpoint of the old layout, in the fleet's file.
	_, err = fleetFile.Upsert(ctx, store.Leases, "old", "old", []byte(`{"id":"old","continuation":"7"}`))
	require.NoError(t, err)
	it, err := h.Read(ctx, store.Leases, "old", "old")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"old","continuation":"7"}`, string(it.Body))

	// Written through the host, it goes to the leases file and wins.
	_, err = h.Upsert(ctx, store.Leases, "old", "old", []byte(`{"id":"old","continuation":"9"}`))
	require.NoError(t, err)
	it, err = h.Read(ctx, store.Leases, "old", "old")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"old","continuation":"9"}`, string(it.Body))
	it, err = leasesFile.Read(ctx, store.Leases, "old", "old")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"old","continuation":"9"}`, string(it.Body))
	it, err = fleetFile.Read(ctx, store.Leases, "old", "old")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"old","continuation":"7"}`, string(it.Body), "the fleet file is not written")

	// Jobs stay in the fleet's file, and its change feed is the one read.
	_, err = h.Create(ctx, store.Jobs, "p1", "j1", []byte(`{"id":"j1","productId":"p1"}`))
	require.NoError(t, err)
	_, err = fleetFile.Read(ctx, store.Jobs, "p1", "j1")
	require.NoError(t, err)
	_, err = leasesFile.Read(ctx, store.Jobs, "p1", "j1")
	require.ErrorIs(t, err, store.ErrNotFound)
	page, err := h.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
}
