package admission_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// lifecycle is the catalog and the job lifecycle as admission sees them:
// products from the store, and a record of the pollers told.
type lifecycle struct {
	k      *kernel.Kernel
	mu     sync.Mutex
	bumped []string
}

// CachedProduct has no cache here: every read is fresh.
func (l *lifecycle) CachedProduct(ctx context.Context, productID string) (*fleet.Product, error) {
	return l.GetProduct(ctx, productID)
}

func (l *lifecycle) GetProduct(ctx context.Context, productID string) (*fleet.Product, error) {
	p, it, err := kernel.ReadDoc[fleet.Product](ctx, l.k.Store, store.Products, productID, productID, "product")
	if err != nil {
		return nil, err
	}
	p.Rev = it.Rev
	return p, nil
}

func (l *lifecycle) LeasedJobs(context.Context, string) ([]*fleet.Job, error) { return nil, nil }

func (l *lifecycle) BumpQueueState(_ context.Context, productID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bumped = append(l.bumped, productID)
}

func (l *lifecycle) DispatchQueued(context.Context, string, string) error { return nil }

// TestNewObservesRunEnds: the observer admission registers in New gives
// back the seat of a run whose lease ended and tells the product's pollers
// at once; a move that ends no run takes nothing back.
func TestNewObservesRunEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		run       fleet.RunResult
		wantSeats int
		wantBumps []string
	}{
		{name: "run ended", run: fleet.RunLost, wantSeats: 0, wantBumps: []string{"p1"}},
		{name: "no run ended", run: "", wantSeats: 1, wantBumps: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			k := &kernel.Kernel{Store: s, Clock: clocktest.New(now), Log: slog.New(slog.DiscardHandler),
				Counters: &kernel.Counters{}, Jobs: kernel.NewItemCache(16)}
			life := &lifecycle{k: k}
			admission.New(k, admission.Config{LeaseTTL: time.Minute}, life, life)

			p := fleet.Product{ID: "p1", ProductID: "p1", MaxRunning: 1, Seats: map[string]fleet.Seat{"j1": {LeaseEpoch: 1, At: now}}}
			body, err := json.Marshal(p)
			require.NoError(t, err)
			_, err = s.Create(ctx, store.Products, "p1", "p1", body)
			require.NoError(t, err)

			before := &fleet.Job{ID: "j1", ProductID: "p1", Stage: fleet.StageBuilding, LeaseEpoch: 1}
			after := &fleet.Job{ID: "j1", ProductID: "p1", Stage: fleet.StageQueued, LeaseEpoch: 1}
			k.Committed(ctx, kernel.Transition{Before: before, After: after, Run: tc.run})

			got, err := life.GetProduct(ctx, "p1")
			require.NoError(t, err)
			require.Len(t, got.Seats, tc.wantSeats)
			require.Equal(t, tc.wantBumps, life.bumped)
		})
	}
}
