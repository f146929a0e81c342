package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// TestLifecycleStoreOperations pins what each step of a pushed job's life
// costs the store, for a product with no budget and no seat cap (the
// common case), the scheduler's factory list fresh as under load: the job's
// own writes, and nothing else. Events, the run record and what admission
// took ride on the job's CAS; admission reads nothing it knows is absent.
func TestLifecycleStoreOperations(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	e, _ := dispatchEnv(t, withConfig(feedConfig), countingStore(&counted))
	e.factory("f1")
	fd := &feeder{e: e, c: e.c}
	// A first job warms what a busy coordinator holds: the factory list,
	// the product, the knowledge that the product has no budget.
	warm := e.submit()
	fd.run()
	_, err := e.c.Accept(e.ctx, "f1", prod, warm.ID, e.job(warm.ID).DispatchEpoch)
	require.NoError(t, err)

	var j *fleet.Job
	var epoch, dispatchEpoch int64
	steps := []struct {
		name string
		run  func()
		want storecount.Counts
	}{
		{"submit", func() { j = e.submit() }, storecount.Counts{Writes: 1}},
		// The stamp (the feed's copy of the job saves the read), then once
		// per batch, however many jobs it carries: the ledger and the
		// product's queue state.
		{"dispatch", fd.run, storecount.Counts{Writes: 3}},
		{"accept", func() {
			cl, err := e.c.Accept(e.ctx, "f1", prod, j.ID, dispatchEpoch)
			require.NoError(t, err)
			epoch = cl.LeaseEpoch
		}, storecount.Counts{Writes: 1}},
		{"building", func() {
			_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: epoch})
			require.NoError(t, err)
		}, storecount.Counts{Writes: 1}},
		{"shipped", func() {
			_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: epoch})
			require.NoError(t, err)
		}, storecount.Counts{Writes: 1}},
	}
	for _, s := range steps {
		if j != nil {
			dispatchEpoch = e.job(j.ID).DispatchEpoch // as the dispatch message says; not counted
		}
		before := counted.Snapshot()
		s.run()
		require.Equal(t, s.want, counted.Snapshot().Sub(before), s.name)
	}
	got := e.job(j.ID)
	require.Equal(t, fleet.StageShipped, got.Stage)
	require.Len(t, got.Runs, 1, "the run is recorded on the job")
	require.Len(t, e.events(j.ID), 4, "submitted, claimed, building, shipped")
}
