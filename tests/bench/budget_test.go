package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBudget: the throughput target becomes CPU per lifecycle (CPUs over
// the target rate), split into the writes at phase 5's CPU per cycle and
// everything else; it needs both phases' CPU times.
func TestBudget(t *testing.T) {
	t.Parallel()
	measured := func() *results {
		return &results{
			Machine: machineInfo{CPUs: 2},
			Lifecycle: &lifecycleResult{
				Lifecycles:   1000,
				PerLifecycle: perLifecycle{Handler: kinds{Writes: 5}, Emulator: kinds{Writes: 1}, Total: kinds{Writes: 6}},
				// 3 + 2 + 1 ms per lifecycle.
				CPU: &cpuUse{HandlerSeconds: 3, LocalSeconds: 2, BenchSeconds: 1},
			},
			// 6000 writes/s for 1.2 s of CPU: 0.2 ms a cycle; 1000 lifecycles/s allowed.
			CAS: &casResult{casRun: casRun{Writes: 6000, PerSec: 6000, CPUSeconds: 1.2}},
		}
	}
	r := measured()
	r.evaluate()
	b := r.Budget
	require.NotNil(t, b)
	require.InDelta(t, 500, b.TargetPerSec, 1e-9)
	require.InDelta(t, 4, b.BudgetMs, 1e-9) // 2 CPUs / 500 per s
	require.InDelta(t, 0.2, b.CycleMs, 1e-9)
	require.InDelta(t, 1.2, b.StoreMs, 1e-9)
	require.InDelta(t, 1.0, b.HandlerStoreMs, 1e-9)
	require.InDelta(t, 6, b.SpentMs(), 1e-9)
	require.InDelta(t, 4.8, b.OtherSpentMs(), 1e-9)
	require.InDelta(t, 2.8, b.OtherAllowedMs(), 1e-9)
	require.InDelta(t, 4, b.LeanHandlerMs(), 1e-9) // 1 + 2 + 1: exactly the budget, so it fits

	var out bytes.Buffer
	r.print(&out)
	require.Contains(t, out.String(), "2b. The throughput target as CPU time per lifecycle")
	require.Regexp(t, `a handler doing nothing but its writes.*4\.00 ms \(1\.00 \+ 2\.00 \+ 1\.00\)\s+fits`, out.String())

	r = measured()
	r.Lifecycle.CPU.LocalSeconds = 2.5
	r.evaluate()
	out.Reset()
	r.print(&out)
	require.Regexp(t, `a handler doing nothing but its writes.*4\.50 ms.*over the budget`, out.String())

	for name, unmeasured := range map[string]func(*results){
		"no phase-2 CPU": func(r *results) { r.Lifecycle.CPU = nil },
		"no phase-5 CPU": func(r *results) { r.CAS.CPUSeconds = 0 },
		"no phase 5":     func(r *results) { r.CAS = nil },
	} {
		r := measured()
		unmeasured(r)
		r.evaluate()
		require.Nil(t, r.Budget, name)
	}
}
