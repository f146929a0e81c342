package main

import "fmt"

// The throughput target as CPU time. Phase 2 keeps every CPU busy, so its
// rate is the CPUs divided by the CPU time a lifecycle costs, and the
// target (a share of the raw-CAS-allowed rate) is a CPU budget per
// lifecycle. Phase 5 measures what a read -> Replace(ifRev) cycle costs on
// its own, so the budget can be split into the store's cycles, which the
// target is made of, and everything else: the host's proxy, the change
// feed, the broker and the clients. The split says how far everything
// else is from fitting, and whether it could fit at all while the
// emulator, NATS and the clients share the machine with the handler.

// budgetResult is that split, in ms of CPU per lifecycle.
type budgetResult struct {
	CPUs int `json:"cpus"`
	// TargetPerSec is the throughput target, lifecycles/s.
	TargetPerSec float64 `json:"targetLifecyclesPerSec"`
	// BudgetMs is what a lifecycle may cost at the target with every CPU
	// busy: CPUs / TargetPerSec.
	BudgetMs float64 `json:"budgetMs"`
	// HandlerMs, LocalMs and ClientsMs are phase 2's measured CPU per
	// lifecycle (fleet-local is the emulator and NATS).
	HandlerMs float64 `json:"handlerMs"`
	LocalMs   float64 `json:"fleetLocalMs"`
	ClientsMs float64 `json:"clientsMs"`
	// CycleMs is phase 5's CPU per raw lifecycle write (a create, or a
	// read -> Replace cycle, lost races included); StoreMs is a lifecycle's writes (both
	// processes) at that cost, HandlerStoreMs the handler's.
	CycleMs        float64 `json:"rawCycleMs"`
	StoreMs        float64 `json:"storeMs"`
	HandlerStoreMs float64 `json:"handlerStoreMs"`
}

// SpentMs is phase 2's CPU per lifecycle, all three processes.
func (b *budgetResult) SpentMs() float64 { return b.HandlerMs + b.LocalMs + b.ClientsMs }

// OtherAllowedMs and OtherSpentMs are the CPU per lifecycle left for, and
// taken by, everything but the store's cycles.
func (b *budgetResult) OtherAllowedMs() float64 { return b.BudgetMs - b.StoreMs }
func (b *budgetResult) OtherSpentMs() float64   { return b.SpentMs() - b.StoreMs }

// LeanHandlerMs is what a lifecycle would cost if the handler did nothing
// but its store cycles, the emulator, NATS and the clients unchanged: over
// BudgetMs, no work on the handler alone reaches the target here.
func (b *budgetResult) LeanHandlerMs() float64 { return b.HandlerStoreMs + b.LocalMs + b.ClientsMs }

// budget splits the throughput target's CPU budget; nil unless phase 2
// and phase 5 both measured CPU time.
func (r *results) budget() *budgetResult {
	l, c := r.Lifecycle, r.CAS
	if l == nil || l.CPU == nil || c == nil || c.CPUSeconds <= 0 || c.Writes == 0 || r.Allowed <= 0 || l.Lifecycles == 0 || r.Machine.CPUs == 0 {
		return nil
	}
	p := l.CPU.per(l.Lifecycles)
	b := &budgetResult{
		CPUs:         r.Machine.CPUs,
		TargetPerSec: targetShareOfRawCAS * r.Allowed,
		HandlerMs:    p.Handler,
		LocalMs:      p.Local,
		ClientsMs:    p.Bench,
		CycleMs:      1000 * c.CPUSeconds / float64(c.Writes),
	}
	b.BudgetMs = 1000 * float64(b.CPUs) / b.TargetPerSec
	b.StoreMs = l.PerLifecycle.Total.Written() * b.CycleMs
	b.HandlerStoreMs = l.PerLifecycle.Handler.Written() * b.CycleMs
	return b
}

// addTo adds figure 2b to the summary table.
func (b *budgetResult) addTo(tbl *table) {
	row, heading := tbl.row, tbl.heading
	heading("2b. The throughput target as CPU time per lifecycle (%d CPUs, all busy, / %.1f lifecycles/s)", b.CPUs, b.TargetPerSec)
	row("   budget at the target", f2(b.BudgetMs)+" ms", "", "")
	row("   spent in phase 2: handler + emulator and NATS + clients",
		fmt.Sprintf("%s ms (%s + %s + %s)", f2(b.SpentMs()), f2(b.HandlerMs), f2(b.LocalMs), f2(b.ClientsMs)), "", "")
	row("   its store writes at phase 5's CPU per lifecycle write (with its read)",
		fmt.Sprintf("%s ms (%.2f writes x %.3f ms)", f2(b.StoreMs), b.StoreMs/b.CycleMs, b.CycleMs), "", "")
	row("   everything else: spent / left by the budget",
		fmt.Sprintf("%s / %s ms", f2(b.OtherSpentMs()), f2(b.OtherAllowedMs())), "", "")
	verdict := "fits"
	if b.LeanHandlerMs() > b.BudgetMs {
		verdict = "over the budget"
	}
	row("   a handler doing nothing but its writes, the rest as measured",
		fmt.Sprintf("%s ms (%s + %s + %s)", f2(b.LeanHandlerMs()), f2(b.HandlerStoreMs), f2(b.LocalMs), f2(b.ClientsMs)), "", verdict)
}
