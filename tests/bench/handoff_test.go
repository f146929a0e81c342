package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMain lets runHandoff start this test binary as its echo server, as
// it starts the bench binary.
func TestMain(m *testing.M) {
	if os.Getenv(handoffServerEnv) != "" {
		if err := serveHandoff(); err != nil {
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// TestHandoffFloor: the floor's round trips reach another process and come
// back, and the dispatch path's floor is its hand-overs at the paced p50.
func TestHandoffFloor(t *testing.T) {
	t.Parallel()
	r, err := runHandoff(t.Context(), 2000)
	require.NoError(t, err)
	require.Equal(t, handoffTrips, r.Trips)
	for name, v := range map[string]float64{"paced p50": r.PacedP50Ms, "back-to-back p50": r.HotP50Ms} {
		require.Positive(t, v, name)
	}
	require.GreaterOrEqual(t, r.PacedP99Ms, r.PacedP50Ms)
	require.GreaterOrEqual(t, r.HotP99Ms, r.HotP50Ms)
	require.InDelta(t, r.PacedP50Ms*handoffHops/2, r.PathFloorMs, 1e-9)

	_, err = runHandoff(t.Context(), 0)
	require.ErrorContains(t, err, "rate must be positive")
}
