package catalog

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// TestNotedVersions: once a refresh has read the change feed, a job
// version this process writes is noted with what a refresh reads of it,
// and given back for exactly that version; a version it did not write
// (another process's, or one read unchanged), or a write before the first
// refresh, is left for the refresh to decode.
func TestNotedVersions(t *testing.T) {
	t.Parallel()
	leased := &fleet.Job{ID: "j1", Rev: "r1", Stage: fleet.StageAssigned, HolderFactoryID: "f1",
		LeaseExpiresAt: time.Unix(5000, 0), TargetFactoryID: "f1"}
	want := &leaseView{Stage: fleet.StageAssigned, HolderFactoryID: "f1", LeaseExpiresAt: time.Unix(5000, 0).UTC(), TargetFactoryID: "f1"}
	item := func(id, rev string) store.Item { return store.Item{ID: id, Rev: rev} }
	for _, tt := range []struct {
		name    string
		feed    string        // the cache's continuation: "" before any refresh
		feedAge time.Duration // since the last refresh, when the job is written
		written bool
		read    store.Item
		noted   bool
	}{
		{"the version written", "c1", time.Second, true, item("j1", "r1"), true},
		{"a later version (another process's)", "c1", time.Second, true, item("j1", "r2"), false},
		{"another job", "c1", time.Second, true, item("j2", "r1"), false},
		{"read unchanged, not written", "c1", time.Second, false, item("j1", "r1"), false},
		{"written before the first refresh", "", time.Second, true, item("j1", "r1"), false},
		{"written past leaseFeedMaxGap after the last refresh", "c1", leaseFeedMaxGap + time.Second, true, item("j1", "r1"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fc := newFactoryCache(time.Second, time.Minute)
			fc.feed, fc.feedAt = tt.feed, time.Unix(4000, 0)
			fc.noteJob(leased, tt.written, fc.feedAt.Add(tt.feedAge))
			got, noted := fc.notedView(tt.read)
			require.Equal(t, tt.noted, noted)
			if tt.noted {
				require.Equal(t, want, got)
			}
			_, other := fc.notedView(item("j3", "r9"))
			require.False(t, other)
		})
	}

	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		fc := newFactoryCache(time.Second, time.Minute)
		fc.feed = "c1"
		for i := range maxNoted + 1 {
			fc.noteJob(&fleet.Job{ID: strconv.Itoa(i), Rev: "r1", Stage: fleet.StageQueued}, true, time.Time{})
		}
		require.Len(t, fc.noted, 1, "past maxNoted the notes start again")
	})
}

// TestRefreshTakesNotedVersionsInFeedOrder: a refresh takes what it reads
// of a version this process wrote from the note, without decoding it, in
// the feed's order: a job another process queued and this process leased
// while the refresh read holds its seat (the older version read first
// does not undo it). A version another process wrote is decoded and
// counted, and the notes a refresh read past are dropped.
func TestRefreshTakesNotedVersionsInFeedOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	hs := &hookStore{Store: db}
	clk := clocktest.New(time.Unix(1_000_000, 0))
	k := &kernel.Kernel{Store: hs, Clock: clk, Log: slog.New(slog.DiscardHandler), Counters: &kernel.Counters{}, Jobs: kernel.NewItemCache(16)}
	c := New(k, Config{StaleAfter: time.Hour, DownAfter: 2 * time.Hour, FactoryCacheTTL: time.Second, TokenCacheTTL: time.Second,
		RedispatchAfter: time.Minute, PruneAfter: 24 * time.Hour, LeaseTTL: time.Minute}, Deps{})
	k.JobWritten = c.NoteJob

	write := func(id string, j *fleet.Job, ifRev string) {
		t.Helper()
		body, err := json.Marshal(j)
		require.NoError(t, err)
		if ifRev == "" {
			_, err = db.Create(ctx, store.Jobs, j.ProductID, id, body)
		} else {
			_, err = db.Replace(ctx, store.Jobs, j.ProductID, id, body, ifRev)
		}
		require.NoError(t, err)
	}
	body, err := json.Marshal(&fleet.Factory{ID: "f1", LastHeartbeatAt: clk.Now()})
	require.NoError(t, err)
	_, err = db.Create(ctx, store.Factories, "f1", "f1", body)
	require.NoError(t, err)
	leases := func() int {
		t.Helper()
		fs, err := c.Factories(ctx)
		require.NoError(t, err)
		require.Len(t, fs, 1)
		return fs[0].Leases
	}
	counts := func() [2]int64 { return [2]int64{k.Counters.SeatFeedDecoded.Load(), k.Counters.SeatFeedNoted.Load()} }
	require.Zero(t, leases(), "the first refresh queries the leased jobs: none")

	// Another process queues j1; this process leases it while the next
	// refresh reads: that refresh reads the queued version, then the
	// leased one.
	write("j1", &fleet.Job{ID: "j1", ProductID: "p1", Stage: fleet.StageQueued, Deps: []string{}}, "")
	hs.afterJobsRead(func() {
		_, err := k.MutateJob(ctx, "p1", "j1", func(j *fleet.Job) error {
			j.Stage, j.HolderFactoryID, j.LeaseExpiresAt = fleet.StageAssigned, "f1", clk.Now().Add(time.Hour)
			return nil
		})
		require.NoError(t, err)
	})
	clk.Advance(2 * time.Second)
	require.Equal(t, 1, leases(), "the lease written here counts after the queued version read before it")
	require.Equal(t, [2]int64{1, 1}, counts(), "the queued version decoded, the leased one taken from its note")
	it, err := db.Read(ctx, store.Jobs, "p1", "j1")
	require.NoError(t, err)
	stored, err := kernel.Decode[leaseView](it)
	require.NoError(t, err)
	c.factories.mu.Lock()
	require.Len(t, c.factories.noted, 1, "a note made while the refresh read is kept for the next")
	require.Equal(t, note{rev: it.Rev, seq: 1, view: *stored}, c.factories.noted["j1"], "the note is what decoding the stored version gives")
	c.factories.mu.Unlock()

	// Another process ends the lease: its version is decoded and counted.
	write("j1", &fleet.Job{ID: "j1", ProductID: "p1", Stage: fleet.StageQueued, Deps: []string{}}, it.Rev)
	clk.Advance(2 * time.Second)
	require.Zero(t, leases(), "another process's release is counted")
	require.Equal(t, [2]int64{2, 1}, counts())
	c.factories.mu.Lock()
	require.Empty(t, c.factories.noted, "the notes a refresh read past are dropped")
	c.factories.mu.Unlock()
}

// hookStore runs a function once, after the next read of the jobs change
// feed returned its page.
type hookStore struct {
	store.Store
	mu    sync.Mutex
	after func()
}

func (s *hookStore) afterJobsRead(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = f
}

func (s *hookStore) ReadChanges(ctx context.Context, container, cont string, max int) (store.ChangePage, error) {
	page, err := s.Store.ReadChanges(ctx, container, cont, max)
	var f func()
	s.mu.Lock()
	if container == store.Jobs {
		f, s.after = s.after, nil
	}
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return page, err
}
