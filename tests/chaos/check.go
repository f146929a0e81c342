package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

	// Not failures, shown for what they say about the run:
	EventGaps     int // events the coordinator could not record (best effort under store faults)
	FencedOverlap int // engine runs of one job that overlapped (an old holder's engine running on after it was fenced)
	EngineRuns    int
	Unverified    int // shipped results whose run record is missing (runs are recorded best effort)
}

// OK reports whether the guarantees held.
func (r *report) OK() bool {
	return len(r.Lost) == 0 && len(r.Double) == 0 && len(r.Stale) == 0 && len(r.Illegal) == 0
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
	fmt.Fprintf(w, "chaos: engine runs %d, overlapping runs of one job (old holder fenced) %d, event gaps %d, ships without a run record %d\n",
		r.EngineRuns, r.FencedOverlap, r.EventGaps, r.Unverified)
	for _, f := range []struct {
		name string
		v    []string
	}{{"lost", r.Lost}, {"double", r.Double}, {"stale ships", r.Stale}, {"illegal paths", r.Illegal}} {
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
	FactoryID  string    `json:"factoryId"`
	LeaseEpoch int64     `json:"leaseEpoch"`
	Result     string    `json:"result"`
	StartedAt  time.Time `json:"startedAt"`
	EndedAt    time.Time `json:"endedAt"`
}

// check reads every job, its events and runs, the origin's job branches
// and the engines' run log.
func (r *runner) check(ctx context.Context, origin, runLog string) (*report, error) {
	rep := &report{Stages: map[string]int{}}
	jobs := r.list(ctx, "")
	byID := map[string]jobView{}
	for _, j := range jobs {
		byID[j.ID] = j
		rep.Stages[j.Stage]++
	}
	rep.Jobs = len(jobs)
	for _, id := range r.ids() {
		j, ok := byID[id]
		switch {
		case !ok:
			rep.Lost = append(rep.Lost, id+": submitted (201) but not listed")
		case !terminal[j.Stage]:
			rep.Lost = append(rep.Lost, fmt.Sprintf("%s: %s at the deadline (%s)", id, j.Stage, j.Title))
		}
	}
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var firstErr error
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			evs, runs, err := r.history(ctx, j.ID)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			res := checkJob(j, evs, runs, origin)
			mu.Lock()
			rep.Double = append(rep.Double, res.double...)
			rep.Stale = append(rep.Stale, res.stale...)
			rep.Illegal = append(rep.Illegal, res.illegal...)
			rep.EventGaps += res.gaps
			rep.Unverified += res.unverified
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	n, overlap, err := engineOverlaps(runLog)
	if err != nil {
		return nil, err
	}
	rep.EngineRuns, rep.FencedOverlap = n, overlap
	for _, s := range [][]string{rep.Lost, rep.Double, rep.Stale, rep.Illegal} {
		sort.Strings(s)
	}
	return rep, nil
}

func (r *runner) history(ctx context.Context, id string) ([]event, []run, error) {
	var evs []event
	after := int64(0)
	for {
		var page struct {
			Items []event `json:"items"`
		}
		if err := r.retry(ctx, func() error {
			return r.op.do(ctx, http.MethodGet, fmt.Sprintf("/jobs/%s/events?after=%d", id, after), "", nil, &page)
		}); err != nil {
			return nil, nil, fmt.Errorf("events of %s: %w", id, err)
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
	if err := r.retry(ctx, func() error { return r.op.do(ctx, http.MethodGet, "/jobs/"+id+"/runs", "", nil, &runs) }); err != nil {
		return nil, nil, fmt.Errorf("runs of %s: %w", id, err)
	}
	return evs, runs.Items, nil
}

type jobResult struct {
	double, stale, illegal []string
	gaps, unverified       int
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
func checkJob(j jobView, evs []event, runs []run, origin string) jobResult {
	var res jobResult
	cur, last, holder := "", int64(0), ""
	var delivered []event
	for _, ev := range evs {
		if ev.Seq != last+1 {
			res.gaps += int(ev.Seq - last - 1)
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
		got, err := gitOut(origin, "show", "refs/heads/aq/job/"+j.ID+":chaos-epoch.txt")
		if err != nil {
			res.stale = append(res.stale, fmt.Sprintf("%s: shipped, but the origin has no aq/job/%s with its result", j.ID, j.ID))
			return res
		}
		epoch, _ := strconv.ParseInt(got, 10, 64)
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

// engineOverlaps reads the engines' run log and counts pairs of runs of one
// job at different epochs that overlapped in time: an old holder's engine
// running on after its lease was taken away (fenced, not a failure).
func engineOverlaps(path string) (runs, overlaps int, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	type span struct{ start, end int64 }
	byJob := map[string]map[string]*span{}
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
	return runs, overlaps, sc.Err()
}
