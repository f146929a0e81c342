package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/syncbuf"
)

// TestChaosShort is `make chaos` in small, run by `make test`: 4 factory
// processes and 80 jobs under 45 s of every fault kind (each process fault
// comes once among the first four, each network fault once among the first
// three broken requests, and the campaign fails on a kind it did not
// inject), then the same checks: nothing lost, double-assigned,
// shipped from a stale epoch, moved illegally or spent past the budget.
func TestChaosShort(t *testing.T) {
	c := campaign{Factories: 4, Seats: 2, Jobs: 80, Faults: 45 * time.Second, FaultEvery: 2500 * time.Millisecond,
		Drain: 90 * time.Second, StoreFaults: "errors:0.02,latency:0.05:50ms", Seed: uint64(time.Now().UnixNano())}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out syncbuf.Buffer // the campaign's goroutines write its report
	rep, err := c.Run(ctx, &out)
	t.Log("\n" + strings.TrimSpace(out.String()))
	require.NoError(t, err)
	require.True(t, rep.OK(), "the campaign found violations (report above); rerun with go run ./tests/chaos -seed %d -factories 4 -jobs 80 -faults 45s", c.Seed)
}
