package coord

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestClaimOrder: a poller starts at one of the first few jobs of the top
// priority, never at a lower priority, and still tries every job once.
func TestClaimOrder(t *testing.T) {
	t.Parallel()
	mk := func(ids string, p fleet.Priority) []*fleet.Job {
		var js []*fleet.Job
		for _, id := range ids {
			js = append(js, &fleet.Job{ID: string(id), Priority: p})
		}
		return js
	}
	ranked := append(mk("abcdefghijkl", fleet.PriorityHigh), mk("mn", fleet.PriorityNormal)...)
	starts := map[string]bool{}
	for range 2000 {
		order := claimOrder(ranked)
		require.ElementsMatch(t, ranked, order, "every job tried exactly once")
		require.Contains(t, "abcdefgh", order[0].ID, "starts among the first claimSpread of the top band")
		require.Equal(t, "m", order[12].ID, "lower priorities come after the whole top band")
		starts[order[0].ID] = true
	}
	require.Len(t, starts, claimSpread, "every start in the spread is used")

	// A top band of one job is tried first, always.
	single := append(mk("a", fleet.PriorityCritical), mk("bc", fleet.PriorityHigh)...)
	for range 100 {
		require.Equal(t, single, claimOrder(single))
	}
	require.Empty(t, claimOrder(nil))
}
