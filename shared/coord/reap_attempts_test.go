package coord_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestReapCountsLostRuns: every reaped run is an attempt; a job whose holder
// dies every time ends in dead_letter after maxAttempts instead of looping.
func TestReapCountsLostRuns(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute
	e := newEnv(t, withConfig(coord.Config{LeaseTTL: ttl}))
	e.factory("f1")
	j := e.submit("maxAttempts: 2")
	for attempt := 1; attempt <= 2; attempt++ {
		cl := e.claim("f1")
		require.Equal(t, j.ID, cl.Job.ID)
		e.clock.Advance(ttl)
		n, err := e.c.Reap(e.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		got := e.job(j.ID)
		require.Equal(t, attempt, got.Attempts)
		require.Equal(t, "lease expired", got.LastFailure.Reason)
		require.Equal(t, "f1", got.LastFailure.FactoryID)
		if attempt < 2 {
			require.Equal(t, fleet.StageQueued, got.Stage)
		} else {
			require.Equal(t, fleet.StageDeadLetter, got.Stage, "attempts exhausted")
			require.Empty(t, got.HolderFactoryID)
		}
	}
	cl, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, cl, "a dead-lettered job is not handed out again")
}
