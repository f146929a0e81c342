package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// report is what the campaign found.
type report struct {
	Faults map[string]int64
	Wall   time.Duration

	Jobs    int            // jobs the coordinator has
	Stages  map[string]int // by final stage
	Lost    []string       // submitted, not terminal, with no recorded reason
	Double  []string       // two live leases of one job at once
	Stale   []string       // a delivered result made by a run other than the delivering one
	Illegal []string       // a move not in fleet.Transitions, or a path that does not join up
	Budget  budgetResult   // the budget-capped product's spend against its ceiling
	// FaultErrs are faults the stack did not recover from as it must (the
	// emulator not restarting a killed handler, the stack not coming back);
	// Missing are the fault kinds the campaign never injected: a campaign
	// that did not inject every kind proves nothing about the missing one.
	FaultErrs, Missing []string
	// Gaps are events missing from a job's history: every committed change
	// has its event, even when the store failed its write (coord/events.go).
	Gaps []string

	// Not failures, shown for what they say about the run:
	Held          int // budget-product jobs queued at the end, their budget hold recorded (explain names it)
	FencedOverlap int // engine runs of one job that overlapped (an old holder's engine running on after it was fenced)
	EngineRuns    int
	Unverified    int // shipped results whose run record is missing (runs are recorded best effort)
}

// OK reports whether the guarantees held.
func (r *report) OK() bool {
	return len(r.Lost) == 0 && len(r.Double) == 0 && len(r.Stale) == 0 && len(r.Illegal) == 0 &&
		len(r.Budget.Overspend) == 0 && len(r.FaultErrs) == 0 && len(r.Missing) == 0 &&
		len(r.Gaps) == 0
}

func (r *report) print(w io.Writer) {
	fmt.Fprintln(w, "chaos: faults injected")
	for _, k := range sortedKeys(r.Faults) {
		fmt.Fprintf(w, "  %-26s %d\n", k, r.Faults[k])
	}
	fmt.Fprintf(w, "chaos: jobs %d (", r.Jobs)
	for i, k := range sortedKeys(r.Stages) {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprintf(w, "%s %d", k, r.Stages[k])
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintf(w, "chaos: engine runs %d, overlapping runs of one job (old holder fenced) %d, ships without a run record %d, budget-held at the end %d\n",
		r.EngineRuns, r.FencedOverlap, r.Unverified, r.Held)
	b := r.Budget
	fmt.Fprintf(w, "chaos: budget ceiling %.2f USD: spent %.6f (ledger %.6f, %d runs recorded %.6f), reserved %.6f, runs' usage past their estimate %.6f; engines wrote %.6f (killed runs' usage never reported included)\n",
		b.Ceiling, b.Spent, b.Ledger, b.Runs, b.RunsSpent, b.Reserved, b.Excess, b.EngineUSD)
	for _, f := range []struct {
		name string
		v    []string
	}{{"lost", r.Lost}, {"double", r.Double}, {"stale ships", r.Stale}, {"illegal paths", r.Illegal},
		{"overspend", r.Budget.Overspend}, {"fault kinds not injected", r.Missing}, {"faults not recovered", r.FaultErrs}, {"event gaps", r.Gaps}} {
		fmt.Fprintf(w, "chaos: %s %d\n", f.name, len(f.v))
		for i, s := range f.v {
			if i == 10 {
				fmt.Fprintf(w, "  ... and %d more\n", len(f.v)-10)
				break
			}
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	fmt.Fprintf(w, "chaos: wall time %s\n", r.Wall.Round(time.Second))
}

type event struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	From    string `json:"from"`
	To      string `json:"to"`
	Actor   string `json:"actor"`
	ActorID string `json:"actorId"`
	Message string `json:"message"`
}

type run struct {
	FactoryID  string      `json:"factoryId"`
	LeaseEpoch int64       `json:"leaseEpoch"`
	Result     string      `json:"result"`
	StartedAt  time.Time   `json:"startedAt"`
	EndedAt    time.Time   `json:"endedAt"`
	Usage      fleet.Usage `json:"usage"`
}

// check reads every job, its events and runs, the origin's job branches,
// the budget and the engines' run log.
func (r *runner) check(ctx context.Context, origins map[string]string, runLog string) (*report, error) {
	rep := &report{Stages: map[string]int{}}
	var jobs []jobView
	for _, p := range []string{product, budgetProduct} {
		js, err := r.listAll(ctx, p)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, js...)
	}
	byID := map[string]jobView{}
	for _, j := range jobs {
		byID[j.ID] = j
		rep.Stages[j.Stage]++
	}
	rep.Jobs = len(jobs)
	held, err := r.budgetHolds(ctx, jobs)
	if err != nil {
		return nil, err
	}
	rep.Held = len(held)
	var ledger budgetView
	if err := r.retry(ctx, func() error {
		return call(ctx, r.op, http.MethodGet, "/budgets/"+budgetProduct, budgetProduct, nil, &ledger)
	}); err != nil {
		return nil, fmt.Errorf("budget of %s: %w", budgetProduct, err)
	}
	rep.Lost = lostJobs(r.ids(), byID, held, ledger.ReservedUSD)
	shipped := func(id string) (int64, error) {
		got, err := gitOut(origins[repoOf[byID[id].ProductID]], "show", "refs/heads/aq/job/"+id+":chaos-epoch.txt")
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(got, 10, 64)
	}
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var firstErr error
	var spends []runSpend
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			evs, runs, err := r.history(ctx, j)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			res := checkJob(j, evs, runs, shipped)
			mu.Lock()
			rep.Double = append(rep.Double, res.double...)
			rep.Stale = append(rep.Stale, res.stale...)
			rep.Illegal = append(rep.Illegal, res.illegal...)
			rep.Gaps = append(rep.Gaps, res.gaps...)
			rep.Unverified += res.unverified
			if j.ProductID == budgetProduct {
				for _, rn := range runs {
					spends = append(spends, runSpend{Job: j.ID, Epoch: rn.LeaseEpoch, Estimate: j.Budget.USD, USD: rn.Usage.USD})
				}
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	n, overlap, engineUSD, err := engineRuns(runLog)
	if err != nil {
		return nil, err
	}
	rep.EngineRuns, rep.FencedOverlap = n, overlap
	rep.Budget = checkBudget(ledger, spends)
	rep.Budget.EngineUSD = engineUSD
	for _, s := range [][]string{rep.Lost, rep.Double, rep.Stale, rep.Illegal} {
		sort.Strings(s)
	}
	return rep, nil
}

// budgetHolds asks /explain about every queued job of the budget product:
// the ones its budget holds back (a recorded reason: paused, or no room
// under the ceiling) are not lost. It returns their holds by job id.
func (r *runner) budgetHolds(ctx context.Context, jobs []jobView) (map[string]string, error) {
	held := map[string]string{}
	for _, j := range jobs {
		if j.ProductID != budgetProduct || j.Stage != string(fleet.StageQueued) {
			continue
		}
		var ex struct {
			Budget *fleet.Hold `json:"budget"`
		}
		if err := r.retry(ctx, func() error {
			return call(ctx, r.op, http.MethodGet, "/jobs/"+j.ID+"/explain", j.ProductID, nil, &ex)
		}); err != nil {
			return nil, fmt.Errorf("explain %s: %w", j.ID, err)
		}
		if ex.Budget != nil {
			held[j.ID] = string(ex.Budget.Kind) + ": " + ex.Budget.Message
		}
	}
	return held, nil
}

// lostJobs are the submitted jobs the coordinator does not list, or lists
// in a stage that is not terminal without a recorded reason (the only one
// the campaign can meet is its budget holding a queued job back). A hold
// is a reason only while nothing is reserved: at the end every other job
// is terminal, so no run is in flight and a reservation left is one a
// crash leaked, holding the job back for nothing.
func lostJobs(submitted []string, byID map[string]jobView, held map[string]string, reservedUSD float64) []string {
	if micros(reservedUSD) != 0 {
		held = nil
	}
	var lost []string
	for _, id := range submitted {
		j, ok := byID[id]
		switch {
		case !ok:
			lost = append(lost, id+": submitted (201) but not listed")
		case terminal[j.Stage]:
		case held[id] != "":
		case held[id] == "" && reservedUSD > 0 && j.ProductID == budgetProduct && j.Stage == string(fleet.StageQueued):
			lost = append(lost, fmt.Sprintf("%s: queued at the deadline (%s), held behind %.6f USD reserved for no run", id, j.Title, reservedUSD))
		default:
			lost = append(lost, fmt.Sprintf("%s: %s at the deadline (%s)", id, j.Stage, j.Title))
		}
	}
	return lost
}

func (r *runner) history(ctx context.Context, j jobView) ([]event, []run, error) {
	var evs []event
	after := int64(0)
	for {
		var page struct {
			Items []event `json:"items"`
		}
		if err := r.retry(ctx, func() error {
			return call(ctx, r.op, http.MethodGet, fmt.Sprintf("/jobs/%s/events?after=%d", j.ID, after), j.ProductID, nil, &page)
		}); err != nil {
			return nil, nil, fmt.Errorf("events of %s: %w", j.ID, err)
		}
		if len(page.Items) == 0 {
			break
		}
		evs = append(evs, page.Items...)
		after = page.Items[len(page.Items)-1].Seq
	}
	var runs struct {
		Items []run `json:"items"`
	}
	if err := r.retry(ctx, func() error {
		return call(ctx, r.op, http.MethodGet, "/jobs/"+j.ID+"/runs", j.ProductID, nil, &runs)
	}); err != nil {
		return nil, nil, fmt.Errorf("runs of %s: %w", j.ID, err)
	}
	return evs, runs.Items, nil
}

type jobResult struct {
	double, stale, illegal, gaps []string
	unverified                   int
}

// checkJob checks one job's history.
//
//   - Every recorded move (from, to, actor) is in fleet.Transitions, and
//     where no event is missing, each move starts where the last one ended.
//   - One holder at a time: no claim while the job is held, no holder's
//     move by a factory other than the one that claimed it, and no two
//     runs at one lease epoch. (Run end times are taken after the write
//     that ended the lease, so they cannot order leases exactly.)
//   - A result delivered by a factory (to review, testing or shipped) was
//     pushed by the run that delivered it: the epoch the engine left in the
//     job branch on the origin is the delivering run's.
//
// shipped reads the epoch the engine left in the job's result on the
// origin.
func checkJob(j jobView, evs []event, runs []run, shipped func(jobID string) (int64, error)) jobResult {
	var res jobResult
	cur, last, holder := "", int64(0), ""
	var delivered []event
	for _, ev := range evs {
		if ev.Seq != last+1 {
			res.gaps = append(res.gaps, fmt.Sprintf("%s: events %d to %d missing", j.ID, last+1, ev.Seq-1))
			cur, holder = "", "" // unknown after a gap
		}
		last = ev.Seq
		if ev.To == "" {
			continue
		}
		if ev.From == "" { // submitted: the initial stage
			cur = ev.To
			continue
		}
		if ev.From != ev.To {
			actor := fleet.Actor(ev.Actor)
			if ev.Type == string(fleet.EventReviewVote) {
				// A vote's event names the voter (an operator), but the move
				// it causes (quorum reached, or rejected back to the queue)
				// is the system's: coord checks it as such.
				actor = fleet.ActorSystem
			}
			if _, err := fleet.CheckTransition(fleet.Stage(ev.From), fleet.Stage(ev.To), actor); err != nil {
				res.illegal = append(res.illegal, fmt.Sprintf("%s seq %d: %s -> %s by %s (%s): not a transition", j.ID, ev.Seq, ev.From, ev.To, actor, ev.Type))
			}
		}
		if cur != "" && ev.From != cur {
			res.illegal = append(res.illegal, fmt.Sprintf("%s seq %d: %s -> %s by %s, but the job was in %s", j.ID, ev.Seq, ev.From, ev.To, ev.Actor, cur))
		}
		// A claim while the job is held, or a holder's move made by a
		// factory that does not hold it: two live holders at once.
		leased := func(s string) bool { return fleet.Stage(s).Leased() }
		if ev.Type == string(fleet.EventClaimed) && cur != "" && leased(cur) {
			res.double = append(res.double, fmt.Sprintf("%s seq %d: claimed by %s while %s held it", j.ID, ev.Seq, ev.ActorID, holder))
		}
		if ev.Actor == string(fleet.ActorFactory) && ev.Type != string(fleet.EventClaimed) && holder != "" && ev.ActorID != holder {
			res.double = append(res.double, fmt.Sprintf("%s seq %d: %s moved it %s -> %s while %s held it", j.ID, ev.Seq, ev.ActorID, ev.From, ev.To, holder))
		}
		switch {
		case ev.Type == string(fleet.EventClaimed):
			holder = ev.ActorID
		case !leased(ev.To):
			holder = ""
		}
		cur = ev.To
		if ev.Actor == string(fleet.ActorFactory) && (ev.To == "review" || ev.To == "testing" || ev.To == "shipped") {
			delivered = append(delivered, ev)
		}
	}
	if last < j.EventSeq {
		res.gaps = append(res.gaps, fmt.Sprintf("%s: events %d to %d missing (the job is at %d)", j.ID, last+1, j.EventSeq, j.EventSeq))
	}

	// Two runs at one epoch would be two holders under one lease.
	seen := map[int64]string{}
	for _, rn := range runs {
		if f, dup := seen[rn.LeaseEpoch]; dup {
			res.double = append(res.double, fmt.Sprintf("%s: two runs at epoch %d (%s, %s)", j.ID, rn.LeaseEpoch, f, rn.FactoryID))
		}
		seen[rn.LeaseEpoch] = rn.FactoryID
	}

	if len(delivered) > 0 && j.Stage == "shipped" {
		// The last delivery is what shipped. The engine left its lease
		// epoch in the result: that run must be the delivering factory's
		// and must not have lost its lease. Runs are recorded best effort,
		// so one missing under store faults leaves the ship unverified.
		d := delivered[len(delivered)-1]
		epoch, err := shipped(j.ID)
		if err != nil {
			res.stale = append(res.stale, fmt.Sprintf("%s: shipped, but the origin has no aq/job/%s with its result: %v", j.ID, j.ID, err))
			return res
		}
		var made *run
		for i := range runs {
			if runs[i].LeaseEpoch == epoch {
				made = &runs[i]
			}
		}
		switch {
		case made == nil:
			res.unverified++
		case made.FactoryID != d.ActorID:
			res.stale = append(res.stale, fmt.Sprintf("%s: shipped the result of epoch %d (%s), delivered by %s", j.ID, epoch, made.FactoryID, d.ActorID))
		case made.Result == string(fleet.RunLost):
			res.stale = append(res.stale, fmt.Sprintf("%s: shipped the result of epoch %d (%s), whose lease was revoked", j.ID, epoch, made.FactoryID))
		}
	}
	return res
}

// budgetView is the budget-capped product's ledger (GET /budgets/{id}).
type budgetView struct {
	CeilingUSD  float64 `json:"ceilingUsd"`
	SpentUSD    float64 `json:"spentUsd"`
	ReservedUSD float64 `json:"reservedUsd"`
}

// runSpend is one run of a budget-capped job: the estimate admission
// reserved for it (the job's budget.usd) and the usage the run recorded.
type runSpend struct {
	Job           string
	Epoch         int64
	Estimate, USD float64
}

// budgetResult is the budget-capped product's spend against its ceiling.
type budgetResult struct {
	Ceiling, Ledger, Reserved float64
	RunsSpent                 float64 // what the product's runs recorded, summed
	Spent                     float64 // the larger of the ledger and the runs' sum
	Excess                    float64 // runs' usage past their own estimate, summed
	EngineUSD                 float64 // what the engines wrote to their usage files (killed runs' included)
	Runs                      int
	Overspend                 []string
}

// checkBudget applies API.md's admission rule to the spend recorded. A run
// is assigned only while spent + reserved + estimate <= ceiling, and its
// reservation (the estimate) is swapped for its usage when it ends; the
// one thing admission cannot foresee is a run spending more than its
// estimate (the factory stops it, but after the fact). So, summed over the
// period's runs, spend may exceed the ceiling by no more than the runs'
// usage past their estimates:
//
//	overspend = spent - ceiling - sum(max(0, usage - estimate)) > 0
//
// where spent is the larger of the ledger's spentUsd and the sum of the
// runs' recorded usage (a settle the ledger lost must not hide spend).
// Money is compared in micro-dollars, as the ledger keeps it.
func checkBudget(ledger budgetView, runs []runSpend) budgetResult {
	res := budgetResult{Ceiling: ledger.CeilingUSD, Ledger: ledger.SpentUSD, Reserved: ledger.ReservedUSD, Runs: len(runs)}
	var spent, excess int64
	for _, r := range runs {
		spent += micros(r.USD)
		if over := micros(r.USD) - micros(r.Estimate); over > 0 {
			excess += over
		}
	}
	res.RunsSpent, res.Excess = float64(spent)/1e6, float64(excess)/1e6
	spent = max(spent, micros(ledger.SpentUSD))
	res.Spent = float64(spent) / 1e6
	if over := spent - micros(ledger.CeilingUSD) - excess; over > 0 {
		res.Overspend = append(res.Overspend, fmt.Sprintf(
			"spent %.6f USD (ledger %.6f, runs %.6f) > ceiling %.6f + runs' usage past their estimates %.6f, by %.6f",
			res.Spent, res.Ledger, res.RunsSpent, res.Ceiling, res.Excess, float64(over)/1e6))
	}
	return res
}

func micros(usd float64) int64 { return int64(math.Round(usd * 1e6)) }

// engineRuns reads the engines' run log: how many runs started, the pairs
// of runs of one job at different epochs that overlapped in time (an old
// holder's engine running on after its lease was taken away: fenced, not
// a failure), and the USD the engines wrote to their usage files.
func engineRuns(path string) (runs, overlaps int, usd float64, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	type span struct{ start, end int64 }
	byJob := map[string]map[string]*span{}
	var spent int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		ns, _ := strconv.ParseInt(fs[4], 10, 64)
		m := byJob[fs[1]]
		if m == nil {
			m = map[string]*span{}
			byJob[fs[1]] = m
		}
		key := fs[2] + "/" + fs[3]
		s := m[key]
		if s == nil {
			s = &span{}
			m[key] = s
		}
		switch fs[0] {
		case "start":
			s.start = ns
			runs++
			if len(fs) > 5 {
				u, _ := strconv.ParseFloat(fs[5], 64)
				spent += micros(u)
			}
		case "end":
			s.end = ns
		}
	}
	for _, m := range byJob {
		var ss []*span
		for _, s := range m {
			if s.end == 0 {
				s.end = 1<<63 - 1 // killed: ran until killed
			}
			ss = append(ss, s)
		}
		for a := range ss {
			for b := a + 1; b < len(ss); b++ {
				if ss[a].start < ss[b].end && ss[b].start < ss[a].end {
					overlaps++
				}
			}
		}
	}
	return runs, overlaps, float64(spent) / 1e6, sc.Err()
}
