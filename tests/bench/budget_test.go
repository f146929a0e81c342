package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/store/storecount"
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

// TestAllowedCountsOnlyWritesThatWrote: a refused write (a lost race, a
// ledger bump whose condition did not hold) is an operation but writes no
// page, so the raw CAS rate is divided by the writes that wrote, and the
// budget prices only those at phase 5's cycle.
func TestAllowedCountsOnlyWritesThatWrote(t *testing.T) {
	t.Parallel()
	k := per(storecount.Counts{Writes: 60, Conflicts: 6}, 10)
	require.InDelta(t, 6, k.Writes, 1e-9)
	require.InDelta(t, 0.6, k.Refused, 1e-9)
	require.InDelta(t, 5.4, k.Written(), 1e-9)

	r := &results{
		Machine: machineInfo{CPUs: 2},
		Lifecycle: &lifecycleResult{
			Lifecycles: 1000, PerSec: 600,
			PerLifecycle: perLifecycle{Handler: kinds{Writes: 5, Refused: 1}, Emulator: kinds{Writes: 1}, Total: kinds{Writes: 6, Refused: 1}},
			CPU:          &cpuUse{HandlerSeconds: 3, LocalSeconds: 2, BenchSeconds: 1},
		},
		CAS: &casResult{casRun: casRun{Writes: 6000, PerSec: 6000, CPUSeconds: 1.2}},
	}
	r.evaluate()
	require.InDelta(t, 1200, r.Allowed, 1e-9) // 6000 / 5, not 6000 / 6
	tg, ok := r.target("lifecycles/s >= 50% of raw-CAS-allowed")
	require.True(t, ok)
	require.InDelta(t, 600, tg.Limit, 1e-9)
	require.True(t, tg.Pass)
	require.InDelta(t, 1.0, r.Budget.StoreMs, 1e-9)        // 5 x 0.2 ms
	require.InDelta(t, 0.8, r.Budget.HandlerStoreMs, 1e-9) // 4 x 0.2 ms

	var out bytes.Buffer
	r.print(&out)
	require.Contains(t, out.String(), "6000 / 5.00 = 1200.0 /s")
	require.Contains(t, out.String(), "refused, no page written: 1.00")
}
