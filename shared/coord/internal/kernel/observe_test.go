package kernel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestObserversRunInRegistrationOrder: a committed transition reaches every
// observer, in the order they registered (coord relies on a run being
// recorded before its seat is given back).
func TestObserversRunInRegistrationOrder(t *testing.T) {
	t.Parallel()
	k := &kernel.Kernel{}
	var got []string
	for _, name := range []string{"queue", "run", "admission", "dag"} {
		k.Observe(func(_ context.Context, tr kernel.Transition) {
			got = append(got, name+":"+string(tr.After.Stage))
		})
	}
	k.Committed(t.Context(), kernel.Transition{Before: &fleet.Job{Stage: fleet.StageBuilding}, After: &fleet.Job{Stage: fleet.StageShipped}})
	require.Equal(t, []string{"queue:shipped", "run:shipped", "admission:shipped", "dag:shipped"}, got)
}

func TestTransitionEndsRun(t *testing.T) {
	t.Parallel()
	require.False(t, kernel.Transition{}.EndsRun())
	require.True(t, kernel.Transition{Run: fleet.RunLost}.EndsRun())
}
