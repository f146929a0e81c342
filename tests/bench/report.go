package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gigafactory/fleet/shared/store/storecount"
)

// Targets.
const (
	targetP99Ms          = 5.0
	targetIdleQueries    = 0
	targetSweepReads     = 1
	targetOpsPerLife     = 10.0
	targetShareOfRawCAS  = 0.5
	targetShareOfRawText = "50%"
)

// results is everything one run measured; the JSON file holds the same.
type results struct {
	Started      time.Time        `json:"started"`
	Config       config           `json:"config"`
	Machine      machineInfo      `json:"machine"`
	ProbeQueries int64            `json:"probeQueriesSubtracted"`
	Latency      *latencyResult   `json:"dispatchLatency,omitempty"`
	Lifecycle    *lifecycleResult `json:"lifecycle,omitempty"`
	Idle         *idleResult      `json:"idle,omitempty"`
	Sweeps       []sweepResult    `json:"sweeps,omitempty"`
	Steps        *stepsResult     `json:"steps,omitempty"`
	CAS          *casResult       `json:"rawCAS,omitempty"`
	Handoff      *handoffResult   `json:"handoverFloor,omitempty"`
	SSE          *sseResult       `json:"liveEvents,omitempty"`
	Webhooks     *webhookResult   `json:"forgeWebhooks,omitempty"`
	LiveLog      *logResult       `json:"liveOutput,omitempty"`
	// Allowed is the lifecycles/s the raw CAS rate allows: raw CAS writes/s
	// ÷ store writes per lifecycle (both processes).
	Allowed float64 `json:"rawCASAllowedLifecyclesPerSec,omitempty"`
	// Budget is the throughput target as CPU time per lifecycle (budget.go).
	Budget *budgetResult `json:"throughputBudget,omitempty"`
	// JobBytes is a shipped job's stored document; Cost prices the
	// operations counted at that size (cost.go).
	JobBytes int         `json:"shippedJobBytes,omitempty"`
	Cost     *costResult `json:"cosmosRequestUnits,omitempty"`
	Targets  []target    `json:"targets"`
}

// target is one target and whether the run met it.
type target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Limit    float64 `json:"limit"`
	Unit     string  `json:"unit"`
	Pass     bool    `json:"pass"`
}

func (r *results) evaluate() {
	r.Targets = nil
	r.Cost = r.costs()
	if l := r.Latency; l != nil {
		r.Targets = append(r.Targets, target{Name: fmt.Sprintf("p99 dispatch latency <= %g ms", targetP99Ms), Measured: l.P99Ms, Limit: targetP99Ms, Unit: "ms", Pass: l.P99Ms <= targetP99Ms})
	}
	if w := r.Webhooks; w != nil {
		r.Targets = append(r.Targets, target{Name: fmt.Sprintf("p99 forge webhook -> iteration queued <= %d ms", targetWebhookP99Ms),
			Measured: w.P99Ms, Limit: targetWebhookP99Ms, Unit: "ms", Pass: w.P99Ms <= targetWebhookP99Ms})
	}
	if i := r.Idle; i != nil {
		q := i.Ops.Total().Queries
		r.Targets = append(r.Targets, target{Name: "store queries while idle = 0", Measured: float64(q), Limit: targetIdleQueries, Unit: "queries", Pass: q <= targetIdleQueries})
	}
	for _, sw := range r.Sweeps {
		c := sw.Idle.Total()
		r.Targets = append(r.Targets, target{Name: "idle " + sw.Function + " tick: 0 queries, <= 1 point read", Measured: float64(c.Reads + c.Queries),
			Limit: targetSweepReads, Unit: "reads+queries", Pass: c.Queries == 0 && c.Reads <= targetSweepReads && c.FeedReads == 0})
	}
	if l := r.LiveLog; l != nil {
		r.Targets = append(r.Targets, target{Name: fmt.Sprintf("%s <= %g ms", logTargetName, targetLogP99), Measured: l.P99Ms, Limit: targetLogP99, Unit: "ms", Pass: l.P99Ms <= targetLogP99})
	}
	if l := r.Lifecycle; l != nil {
		all := l.PerLifecycle.Total.All
		r.Targets = append(r.Targets, target{Name: fmt.Sprintf("store ops per lifecycle <= %g", targetOpsPerLife), Measured: all, Limit: targetOpsPerLife, Unit: "ops", Pass: all <= targetOpsPerLife})
		if c := r.CAS; c != nil && l.PerLifecycle.Total.Written() > 0 {
			r.Allowed = c.PerSec / l.PerLifecycle.Total.Written()
			limit := targetShareOfRawCAS * r.Allowed
			r.Targets = append(r.Targets, target{Name: "lifecycles/s >= 50% of raw-CAS-allowed", Measured: l.PerSec, Limit: limit, Unit: "lifecycles/s", Pass: l.PerSec >= limit})
		}
	}
	r.Budget = r.budget()
}

func (r *results) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "MISS"
}

func (r *results) target(prefix string) (target, bool) {
	for _, t := range r.Targets {
		if strings.HasPrefix(t.Name, prefix) {
			return t, true
		}
	}
	return target{}, false
}

// print writes the report: the summary table with targets, then the
// operation breakdowns.
func (r *results) print(out io.Writer) {
	m := r.Machine
	fmt.Fprintf(out, "\nGigafactory fleet bench: the local stack (fleet-local + handler, SQLite, embedded NATS, FLEET_BUS=nats, other settings default)\n")
	fmt.Fprintf(out, "machine: %s, %d CPUs, %s; load average (1/5/15 min) %s at start, %s at end\n", m.OS, m.CPUs, m.Go, m.LoadAvgStart, orNA(m.LoadAvgEnd))
	fmt.Fprintf(out, "settings: -jobs %d -warmup %d -rate %g -lifecycles %d -idle %s -steps %d -cas %s -sse %d -webhooks %d\n\n",
		r.Config.Jobs, r.Config.Warmup, r.Config.Rate, r.Config.Lifecycles, r.Config.Idle, r.Config.Steps, r.Config.CAS, r.Config.SSE, r.Config.Webhooks)

	var tbl table
	row, heading := tbl.row, tbl.heading
	row("FIGURE", "VALUE", "TARGET", "RESULT")
	if l := r.Latency; l != nil {
		heading("1. Dispatch latency, submit -> message received by the target factory (%d jobs, %.1f jobs/s offered, %d factories)",
			l.Jobs, l.RateAchieved, l.Factories)
		t, _ := r.target("p99")
		row("   p50", f2(l.P50Ms)+" ms", "", "")
		row("   p90", f2(l.P90Ms)+" ms", "", "")
		row("   p99", f2(l.P99Ms)+" ms", fmt.Sprintf("<= %g ms", targetP99Ms), verdict(t.Pass))
		row("   max", f2(l.MaxMs)+" ms", "", "")
		row("   mean", f2(l.MeanMs)+" ms", "", "")
		row("   submit POST alone, p50", f2(l.SubmitP50Ms)+" ms", "", "")
		if w := l.Warmup; w != nil {
			row(fmt.Sprintf("   the %d warm-up jobs just before them (not above): first / p50 / max", w.Jobs),
				f2(w.FirstMs)+" / "+f2(w.P50Ms)+" / "+f2(w.MaxMs)+" ms", "", "")
		}
		if c := l.CPU; c != nil {
			p := c.per(l.Jobs)
			row(fmt.Sprintf("   CPU per job: handler + emulator and NATS + clients; the %d CPUs' share busy", m.CPUs),
				fmt.Sprintf("%s ms (%s + %s + %s); %.0f%%", f2(p.Total()), f2(p.Handler), f2(p.Local), f2(p.Bench), 100*c.Busy), "", "")
			if c.Wait != nil {
				row("   waiting runnable for a CPU, each process's threads summed, share of the phase", c.Wait.String(), "", "")
			}
		}
	}
	if h := r.Handoff; h != nil {
		heading("1b. This machine's hand-over floor: an HTTP round trip between two processes, nothing else running (%d B POST on loopback, answered at once)", handoffBodyBytes)
		row(fmt.Sprintf("   paced at %g/s (both processes idle between trips), p50 / p99", h.Rate), f2(h.PacedP50Ms)+" / "+f2(h.PacedP99Ms)+" ms", "", "")
		row("   back to back, p50 / p99", f2(h.HotP50Ms)+" / "+f2(h.HotP99Ms)+" ms", "", "")
		row(fmt.Sprintf("   phase 1's %d cross-process hand-overs at the paced p50 (no work done)", h.PathHops), f2(h.PathFloorMs)+" ms", "", "")
	}
	if l := r.Lifecycle; l != nil {
		heading("2. Full-lifecycle throughput (%d jobs; %d factories x %d no-op workers; %d submitters)",
			l.Lifecycles, l.Factories, l.WorkersPerFactory, l.Submitters)
		value := fmt.Sprintf("%.1f /s (%.2f s)", l.PerSec, l.Seconds)
		if t, ok := r.target("lifecycles/s"); ok {
			row("   lifecycles/s, first submit -> last shipped", value,
				fmt.Sprintf(">= %s of raw-CAS-allowed = %.1f /s", targetShareOfRawText, t.Limit),
				fmt.Sprintf("%s (%.0f%% of allowed)", verdict(t.Pass), 100*l.PerSec/r.Allowed))
		} else {
			row("   lifecycles/s, first submit -> last shipped", value, "", "")
		}
		row("   jobs shipped exactly once", fmt.Sprintf("%d of %d", l.Lifecycles, l.Lifecycles), "all", "ok")
		if b := r.Budget; b != nil {
			b.addTo(&tbl)
		}
		pl := l.PerLifecycle
		t, _ := r.target("store ops per")
		heading("3. Store operations per lifecycle (handler + emulator processes)")
		row("   all kinds", fmt.Sprintf("%.2f ops (%.2f + %.2f)", pl.Total.All, pl.Handler.All, pl.Emulator.All), fmt.Sprintf("<= %g ops", targetOpsPerLife), verdict(t.Pass))
		row("   writes", fmt.Sprintf("%.2f (%.2f + %.2f); refused, no page written: %.2f", pl.Total.Writes, pl.Handler.Writes, pl.Emulator.Writes, pl.Total.Refused), "", "")
		row("   reads / queries / feed reads", fmt.Sprintf("%.2f / %.2f / %.2f", pl.Total.Reads, pl.Total.Queries, pl.Total.FeedReads), "", "")
	}
	if i := r.Idle; i != nil {
		c := i.Ops.Total()
		heading("4. Store operations while idle (%.0f s; %d factories heartbeating every %s, blocked in Receive)", i.Seconds, i.Factories, heartbeatEvery)
		row("   read ops (reads + queries + feed reads)", fmt.Sprintf("%d (%d + %d + %d)", i.ReadOps, c.Reads, c.Queries, c.FeedReads), "", "")
		t, _ := r.target("store queries while idle")
		row("   queries", fmt.Sprintf("%d", c.Queries), "0", verdict(t.Pass))
		row("   point reads per minute (sweep ticks' ledger reads, token generation)", fmt.Sprintf("%.1f", float64(c.Reads)*60/i.Seconds), "", "")
		row("   writes", fmt.Sprintf("%d (%d heartbeats sent)", i.Writes, i.Heartbeats), "none (heartbeats write)", "")
	}
	for _, sw := range r.Sweeps {
		t, _ := r.target("idle " + sw.Function + " tick")
		f, c := sw.First.Total(), sw.Idle.Total()
		row(fmt.Sprintf("   %s tick: reads/queries/writes (first after phase 1: %d/%d/%d)", sw.Function, f.Reads, f.Queries, f.Writes),
			fmt.Sprintf("%d / %d / %d", c.Reads, c.Queries, c.Writes), "<= 1 / 0 / 0", verdict(t.Pass))
	}
	if c := r.CAS; c != nil {
		heading("5. Raw SQLite CAS: a lifecycle's job writes straight on the store, in this run (%d writers, each a create and %d read -> Replace(ifRev) through the stages; %d earlier jobs of %d B; %.1f s)",
			c.Writers, len(lifecycleWrites)-1, c.Docs, c.BodyBytes, c.Seconds)
		row("   raw CAS write rate", fmt.Sprintf("%.0f writes/s (%d lifecycles, %d lost races)", c.PerSec, c.Cycles, c.Conflicts), "", "")
		if w := c.Window; w != nil {
			row("   the idle stack's CPU meanwhile: handler + fleet-local",
				fmt.Sprintf("%.0f + %.0f ms in %.1f s = %.1f%% of one CPU", 1000*w.HandlerSeconds, 1000*w.LocalSeconds, w.WallSeconds,
					100*(w.HandlerSeconds+w.LocalSeconds)/w.WallSeconds), "", "")
		}
		if l := r.Lifecycle; l != nil && r.Allowed > 0 {
			row("   phase-2 store writes/s (its writes that wrote / its duration)",
				fmt.Sprintf("%.0f writes/s = %.0f%% of raw", l.WritesPerSec, 100*l.WritesPerSec/c.PerSec), "", "")
			row("   raw-CAS-allowed lifecycles/s (raw / writes per lifecycle that wrote)",
				fmt.Sprintf("%.0f / %.2f = %.1f /s", c.PerSec, l.PerLifecycle.Total.Written(), r.Allowed), "", "")
		}
		if s := c.SameDocument; s.PerSec > 0 {
			share := ""
			if l := r.Lifecycle; l != nil {
				share = fmt.Sprintf("; phase 2 at %.0f%% of it", 100*l.WritesPerSec/s.PerSec)
			}
			row("   same-document CAS, no indexed field changing (the yardstick until 2026-11-28)",
				fmt.Sprintf("%.0f writes/s%s", s.PerSec, share), "", "")
		}
	}
	if e := r.SSE; e != nil {
		heading("6. Live events: a job's event visible to an SSE client of GET /api/fleet/events/stream after its write (%d jobs, one at a time)", e.Events)
		row("   p50", f2(e.P50Ms)+" ms", "", "")
		row("   p90", f2(e.P90Ms)+" ms", "", "")
		row("   p99", f2(e.P99Ms)+" ms", "", "")
		row("   max", f2(e.MaxMs)+" ms", "", "")
		row("   submit POST alone, p50", f2(e.SubmitP50Ms)+" ms", "", "")
	}
	if w := r.Webhooks; w != nil {
		heading("7. Forge webhook -> iteration queued: a signed changes-requested review's POST, applied before it answers (%d, one at a time)", w.Deliveries)
		row("   p50", f2(w.P50Ms)+" ms", "", "")
		row("   p90", f2(w.P90Ms)+" ms", "", "")
		row("   p99", f2(w.P99Ms)+" ms", fmt.Sprintf("<= %d ms", targetWebhookP99Ms), verdict(w.P99Ms <= targetWebhookP99Ms))
		row("   max", f2(w.MaxMs)+" ms", "", "")
	}
	if l := r.LiveLog; l != nil {
		heading("8. Live output: an engine's line visible to a follower of GET …/log/stream after it was written (%d runs at once, %d lines; shipped every %v)", l.Runs, l.Lines, logShipEvery)
		t, _ := r.target(logTargetName)
		row("   p50", f2(l.P50Ms)+" ms", "", "")
		row("   p90", f2(l.P90Ms)+" ms", "", "")
		row("   p99", f2(l.P99Ms)+" ms", fmt.Sprintf("<= %g ms", targetLogP99), verdict(t.Pass))
		row("   max", f2(l.MaxMs)+" ms", "", "")
	}
	tbl.write(out)

	if l := r.Latency; l != nil {
		printStages(out, l.Stages)
		if l.Tail != nil {
			printTail(out, l.Tail)
		}
		fmt.Fprintf(out, "\nDispatch latency: jobs per factory: %s; %d redeliveries, %d accept 409s\n", perFactory(l.PerFactory), l.Redeliveries, l.AcceptConflicts)
	}
	if l := r.Lifecycle; l != nil {
		fmt.Fprintf(out, "\nStore operations per lifecycle (phase 3: counters before the first submit and after the feed settled past the last shipped job, / %d)\n", l.Lifecycles)
		kindTable(out, []string{"handler", "emulator", "total"}, []kinds{l.PerLifecycle.Handler, l.PerLifecycle.Emulator, l.PerLifecycle.Total}, "%.2f")
		fmt.Fprintf(out, "handler: %d dispatched, %d CAS conflicts, %d claim conflicts, %d ledger bumps not written (no sweep armed); emulator: %d feed batches carrying %d job documents\n",
			l.Coord.Dispatched, l.Coord.CASConflicts, l.Coord.ClaimConflicts, l.Coord.BumpsSkipped, l.FeedBatches, l.FeedDocuments)
		fmt.Fprintf(out, "the factory list's refreshes read %d job versions in the change feed: %d taken from the handler's notes of its own writes, %d decoded\n",
			l.Coord.SeatFeedNoted+l.Coord.SeatFeedDecoded, l.Coord.SeatFeedNoted, l.Coord.SeatFeedDecoded)
		fmt.Fprintf(out, "jobs per factory: %s\n", perFactory(l.PerFactory))
		if c := l.CPU; c != nil {
			p := c.per(l.Lifecycles)
			fmt.Fprintf(out, "CPU per lifecycle: handler %.2f ms, fleet-local (emulator + NATS) %.2f ms, bench (clients) %.2f ms; all %d CPUs %.0f%% busy over %.2f s\n",
				p.Handler, p.Local, p.Bench, r.Machine.CPUs, 100*c.Busy, c.WallSeconds)
			if c.Wait != nil {
				fmt.Fprintf(out, "waiting runnable for a CPU (each process's threads summed, share of the phase): %s\n", c.Wait)
			}
		}
	}
	if i := r.Idle; i != nil {
		fmt.Fprintf(out, "\nStore operations in the idle window (%.0f s, %d factories heartbeating every %s, receivers blocked in Receive)\n", i.Seconds, i.Factories, heartbeatEvery)
		kindTable(out, []string{"handler", "emulator", "total"}, []kinds{count(i.Ops.Handler), count(i.Ops.Emulator), count(i.Ops.Total())}, "%.0f")
	}
	if c := r.Cost; c != nil {
		printCosts(out, c)
	}
	if s := r.Steps; s != nil {
		fmt.Fprintf(out, "\nStore operations per step of one lifecycle, run alone (median of %d runs; columns: handler | emulator | both;\n"+
			"the counters are read after each step once the change feed has settled; the handler does no feed reads, the emulator no queries)\n", s.Runs)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "STEP\treads\twrites\tqueries\t|\tfeed reads\twrites\t|\tALL\t")
		line := func(name string, h, e storecount.Counts) {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t|\t%d\t%d\t|\t%d\t\n", name, h.Reads, h.Writes, h.Queries, e.FeedReads, e.Writes, h.Total()+e.Total())
		}
		for _, st := range s.Steps {
			line(st.Step, st.Handler, st.Emulator)
		}
		line("sum", s.Sum.Handler, s.Sum.Emulator)
		_ = tw.Flush()
	}
	fmt.Fprintf(out, "\nNotes: handler figures come from GET /api/fleet/metrics (adapters.store), emulator figures from GET /admin/host/status (store);\n"+
		"each metrics probe runs %d store queries itself, taken off every window (exact to +-1 query: the probe's bus section may run on either side of its snapshot).\n"+
		"raw-CAS-allowed lifecycles/s = raw CAS writes/s / store writes per lifecycle that wrote (both processes; a refused write writes no page); the throughput target is >= %s of it,\n"+
		"which is the same as: store writes/s during phase 2 >= %s of the raw CAS write rate.\n",
		r.ProbeQueries, targetShareOfRawText, targetShareOfRawText)
	if len(r.Targets) > 0 {
		passed := 0
		for _, t := range r.Targets {
			if t.Pass {
				passed++
			}
		}
		fmt.Fprintf(out, "Targets met: %d of %d.\n", passed, len(r.Targets))
	}
}

// table is the summary: rows of cells aligned in columns, and headings
// across the whole width that take no part in the alignment.
type table struct {
	lines [][]string // a heading is one cell with heading set
	heads map[int]bool
}

func (t *table) row(cells ...string) { t.lines = append(t.lines, cells) }

func (t *table) heading(format string, args ...any) {
	if t.heads == nil {
		t.heads = map[int]bool{}
	}
	t.heads[len(t.lines)] = true
	t.lines = append(t.lines, []string{fmt.Sprintf(format, args...)})
}

func (t *table) write(out io.Writer) {
	var widths []int
	for i, cells := range t.lines {
		if t.heads[i] {
			continue
		}
		for j, c := range cells {
			if j == len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], len(c))
		}
	}
	for i, cells := range t.lines {
		if t.heads[i] {
			fmt.Fprintln(out, cells[0])
			continue
		}
		var b strings.Builder
		for j, c := range cells {
			b.WriteString(c)
			if j < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", widths[j]-len(c)+2))
			}
		}
		fmt.Fprintln(out, strings.TrimRight(b.String(), " "))
	}
}

func count(c storecount.Counts) kinds {
	return kinds{Reads: float64(c.Reads), Writes: float64(c.Writes), Queries: float64(c.Queries), FeedReads: float64(c.FeedReads), All: float64(c.Total())}
}

func kindTable(out io.Writer, names []string, rows []kinds, format string) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PROCESS\treads\twrites\tqueries\tfeed reads\tall\t")
	for i, k := range rows {
		fmt.Fprintf(tw, "%s\t"+format+"\t"+format+"\t"+format+"\t"+format+"\t"+format+"\t\n", names[i], k.Reads, k.Writes, k.Queries, k.FeedReads, k.All)
	}
	_ = tw.Flush()
}

func perFactory(m map[string]int) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", id, m[id]))
	}
	return strings.Join(parts, ", ")
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}
