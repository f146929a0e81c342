package coord

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// A job's events.
//
// A change of a job and its event are two documents in two containers (the
// job in its product's partition, the event in the job's), and no store
// transacts across them. So the event is committed with the change: the
// job's CAS records it in the job's own ring of recent events
// (fleet.Job.RecentEvents), and the event document is written right after
// (appendEvent). If that write fails, or the process dies before it, the
// event still exists in the job, and:
//
//   - readers never see the gap: Events merges the ring into what the
//     container holds (and writes what is missing);
//   - the dispatch function, which sees every job change on the change
//     feed, writes what is missing (repairChanged);
//   - an event leaves the ring only once it is known to be in the container
//     (recordEvent checks before trimming), so a change feed that coalesces
//     many versions of a job into its latest can never skip past one.
//
// Every write is a Create of the event's fixed id (jobId:seq), so the
// writer, a repair and a reader racing one another write it once; and only
// a committed job holds an event, so no event of a lost CAS is ever written.

// The ring: it grows to eventRingMax, then one query checks its oldest
// entries are in the container (writing those that are not) and it keeps
// the newest eventRingKeep: one single-partition query every
// eventRingMax-eventRingKeep events, skipped when this process saw them
// written. If the check fails the ring grows on (the next event checks
// again) up to eventRingCap, past which the change is refused as the store
// being unavailable rather than let the document grow without bound.
const (
	eventRingKeep = 4
	eventRingMax  = 8
	eventRingCap  = 32
)

// recordEvent, called inside a job's CAS, records ev as the job's next
// event (see above). It may read and write the events container.
func (c *Coordinator) recordEvent(ctx context.Context, j *fleet.Job, ev fleet.Event) error {
	j.RecordEvent(ev)
	n := len(j.RecentEvents) - eventRingKeep
	if len(j.RecentEvents) <= eventRingMax {
		return nil
	}
	old := j.Recent()[:n]
	if c.written.has(j.ID, old[n-1].Seq) {
		j.RecentEvents = slices.Clone(j.RecentEvents[n:])
		return nil
	}
	if _, err := c.materialize(ctx, old, nil); err != nil {
		if len(j.RecentEvents) <= eventRingCap {
			c.log.WarnContext(ctx, "recent events not checked; the job keeps them", "job", j.ID, "held", len(j.RecentEvents), "err", err)
			return nil
		}
		return fmt.Errorf("check events of job %s: %w", j.ID, err)
	}
	// A new slice: the caller's snapshot of the job shares the old one.
	j.RecentEvents = slices.Clone(j.RecentEvents[n:])
	return nil
}

// appendEvent writes the event a job's committed change recorded (its
// latest). A failure leaves it to the repairs, counted as deferred.
func (c *Coordinator) appendEvent(ctx context.Context, j *fleet.Job) {
	ev, ok := j.LatestEvent()
	if !ok {
		return
	}
	err := c.createEvent(ctx, ev)
	if err != nil {
		c.stats.eventsDeferred.Add(1)
		c.log.WarnContext(ctx, "event not written yet; the job holds it until a repair writes it", "job", j.ID, "seq", ev.Seq, "type", ev.Type, "err", err)
		return
	}
	c.written.advance(j.ID, ev.Seq)
}

// createEvent writes ev; already there (a repair was first) is success.
func (c *Coordinator) createEvent(ctx context.Context, ev fleet.Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	if _, err := c.store.Create(ctx, store.Events, ev.JobID, ev.ID, body); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("write event %s: %w", ev.ID, err)
	}
	return nil
}

// materialize writes those of evs (one job's, oldest first) that the
// container lacks. present, when known, is the set of seqs the container
// holds; nil asks it with one single-partition query. It returns how many
// it wrote.
func (c *Coordinator) materialize(ctx context.Context, evs []fleet.Event, present map[int64]bool) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	jobID := evs[0].JobID
	if present == nil {
		seqs := make([]int64, len(evs))
		for i, ev := range evs {
			seqs[i] = ev.Seq
		}
		items, err := c.queryAll(ctx, store.Events, store.Query{PartitionKey: jobID, Where: []store.Cond{store.In("seq", seqs...)}})
		if err != nil {
			return 0, err
		}
		present = make(map[int64]bool, len(items))
		for _, it := range items {
			ev, err := decode[fleet.Event](it)
			if err != nil {
				return 0, err
			}
			present[ev.Seq] = true
		}
	}
	wrote := 0
	for _, ev := range evs {
		if present[ev.Seq] {
			continue
		}
		if err := c.createEvent(ctx, ev); err != nil {
			return wrote, err
		}
		wrote++
		c.stats.eventsRepaired.Add(1)
		c.log.InfoContext(ctx, "event repaired from the job's recent events", "job", jobID, "seq", ev.Seq, "type", ev.Type)
	}
	return wrote, nil
}

// repairChanged writes the recent events of a changed job (a change-feed
// copy) that the container lacks, unless this process saw them written.
func (c *Coordinator) repairChanged(ctx context.Context, j *fleet.Job) error {
	if len(j.RecentEvents) == 0 || c.written.has(j.ID, j.EventSeq) {
		return nil
	}
	if _, err := c.materialize(ctx, j.Recent(), nil); err != nil {
		return fmt.Errorf("repair events of job %s: %w", j.ID, err)
	}
	// Everything before the ring left it checked, so all up to EventSeq
	// is written.
	c.written.checked(j.ID, j.EventSeq)
	return nil
}

// Events lists a job's events after seq `after`, oldest first: the events
// container's, with any the job holds that it lacks yet (those are
// written now too).
func (c *Coordinator) Events(ctx context.Context, productID, jobID string, after int64, limit int) ([]fleet.Event, error) {
	// The container first, the job second: an event is written only after
	// its job's change committed, so every seq the container holds is at
	// most the job's EventSeq as read next, and the job's ring holds every
	// seq up to it that may still be missing.
	items, err := c.queryAll(ctx, store.Events, store.Query{PartitionKey: jobID})
	if err != nil {
		return nil, err
	}
	j, err := c.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	out := make([]fleet.Event, 0, len(items))
	present := make(map[int64]bool, len(items))
	for _, it := range items {
		ev, err := decode[fleet.Event](it)
		if err != nil {
			return nil, err
		}
		present[ev.Seq] = true
		if ev.Seq > after {
			out = append(out, *ev)
		}
	}
	var missing []fleet.Event
	for _, ev := range j.Recent() {
		// Past the container's TTL an event is gone on purpose.
		if !present[ev.Seq] && c.now().Sub(ev.At) < store.EventsTTL {
			missing = append(missing, ev)
		}
	}
	if len(missing) > 0 {
		if _, err := c.materialize(context.WithoutCancel(ctx), missing, present); err != nil {
			// Shown anyway: the job holds them, committed.
			c.log.WarnContext(ctx, "events: repair on read failed", "job", jobID, "err", err)
		}
		for _, ev := range missing {
			if ev.Seq > after {
				out = append(out, ev)
			}
		}
		slices.SortFunc(out, func(a, b fleet.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// recordRun writes the run that ends when a lease is released or revoked.
// Runs are written once, at their end; the run in progress is the job's
// lease, which Runs shows alongside.
func (c *Coordinator) recordRun(ctx context.Context, before *fleet.Job, result fleet.RunResult, reason string) {
	run := fleet.Run{
		ID:         fleet.RunID(before.ID, before.LeaseEpoch),
		JobID:      before.ID,
		ProductID:  before.ProductID,
		FactoryID:  before.HolderFactoryID,
		LeaseEpoch: before.LeaseEpoch,
		Result:     result,
		Reason:     reason,
		StartedAt:  before.LeaseAcquiredAt,
		EndedAt:    c.now(),
	}
	withReport(&run, before)
	body, err := json.Marshal(run)
	if err == nil {
		_, err = c.store.Upsert(ctx, store.Runs, run.JobID, run.ID, body)
	}
	if err != nil {
		c.log.ErrorContext(ctx, "run not recorded", "job", before.ID, "epoch", before.LeaseEpoch, "err", err)
	}
}

// Runs lists a job's runs, the one in progress (if any) last.
func (c *Coordinator) Runs(ctx context.Context, productID, jobID string) ([]fleet.Run, error) {
	j, err := c.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	items, err := c.queryAll(ctx, store.Runs, store.Query{PartitionKey: jobID})
	if err != nil {
		return nil, err
	}
	out := make([]fleet.Run, 0, len(items)+1)
	for _, it := range items {
		r, err := decode[fleet.Run](it)
		if err != nil {
			return nil, err
		}
		out = append(out, *r)
	}
	sortRuns(out)
	if l, ok := j.Lease(); ok {
		run := fleet.Run{
			ID: fleet.RunID(j.ID, l.LeaseEpoch), JobID: j.ID, ProductID: j.ProductID,
			FactoryID: l.HolderFactoryID, LeaseEpoch: l.LeaseEpoch, Result: fleet.RunRunning,
			StartedAt: j.LeaseAcquiredAt,
		}
		withReport(&run, j)
		out = append(out, run)
	}
	return out, nil
}

// sortRuns orders by epoch: ids sort as text, so "j:10" would precede "j:9".
func sortRuns(rs []fleet.Run) {
	slices.SortFunc(rs, func(a, b fleet.Run) int { return cmp.Compare(a.LeaseEpoch, b.LeaseEpoch) })
}

// withReport copies what the holder reported about run from j.
func withReport(run *fleet.Run, j *fleet.Job) {
	if r := j.ReportFor(run.LeaseEpoch); r != nil {
		run.Engine, run.Usage, run.Head = r.Engine, r.Usage, r.Head
		if r.Diff != nil {
			d := *r.Diff
			run.Diff = &d
		}
	}
}

// writtenSeqs remembers, per job, a seq up to which this process knows every
// event is in the container (it wrote them in order, or checked them), so
// that the repairs and the ring's trim skip their query. It only saves
// reads: forgetting (it is cleared when full) costs a query, never an event.
type writtenSeqs struct {
	mu sync.Mutex
	m  map[string]int64
}

const writtenSeqsMax = 8192

func newWrittenSeqs() *writtenSeqs { return &writtenSeqs{m: map[string]int64{}} }

// has reports whether every event of jobID up to seq is known written.
func (w *writtenSeqs) has(jobID string, seq int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[jobID] >= seq
}

// advance records that the event seq of jobID is written: the mark moves
// only if every one before it was known written already.
func (w *writtenSeqs) advance(jobID string, seq int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[jobID] == seq-1 {
		w.set(jobID, seq)
	}
}

// checked records that every event of jobID up to seq is written.
func (w *writtenSeqs) checked(jobID string, seq int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[jobID] < seq {
		w.set(jobID, seq)
	}
}

// forget drops jobID (it ended: no more events to spare queries for).
func (w *writtenSeqs) forget(jobID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, jobID)
}

func (w *writtenSeqs) set(jobID string, seq int64) {
	if _, ok := w.m[jobID]; !ok && len(w.m) >= writtenSeqsMax {
		clear(w.m)
	}
	w.m[jobID] = seq
}
