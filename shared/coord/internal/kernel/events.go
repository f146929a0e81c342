package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// A job's events.
//
// A change of a job and its event are two documents in two containers (the
// job in its product's partition, the event in the job's), and no store
// transacts across them. So the event is committed with the change: the
// job's CAS records it in the job's own ring of recent events
// (fleet.Job.RecentEvents), and the event document is written right after
// (AppendEvent). If that write fails, or the process dies before it, the
// event still exists in the job, and:
//
//   - readers never see the gap: Events merges the ring into what the
//     container holds (and writes what is missing);
//   - the dispatch function, which sees every job change on the change
//     feed, writes what is missing (coord's repairChanged);
//   - an event leaves the ring only once it is known to be in the container
//     (RecordEvent checks before trimming), so a change feed that coalesces
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

// RecordEvent, called inside a job's CAS, records ev as the job's next
// event (see above). It may read and write the events container.
func (c *Kernel) RecordEvent(ctx context.Context, j *fleet.Job, ev fleet.Event) error {
	j.RecordEvent(ev)
	n := len(j.RecentEvents) - eventRingKeep
	if len(j.RecentEvents) <= eventRingMax {
		return nil
	}
	old := j.Recent()[:n]
	if c.Written.Has(j.ID, old[n-1].Seq) {
		j.RecentEvents = slices.Clone(j.RecentEvents[n:])
		return nil
	}
	if _, err := c.Materialize(ctx, old, nil); err != nil {
		if len(j.RecentEvents) <= eventRingCap {
			c.Log.WarnContext(ctx, "recent events not checked; the job keeps them", "job", j.ID, "held", len(j.RecentEvents), "err", err)
			return nil
		}
		return fmt.Errorf("check events of job %s: %w", j.ID, err)
	}
	// A new slice: the caller's snapshot of the job shares the old one.
	j.RecentEvents = slices.Clone(j.RecentEvents[n:])
	return nil
}

// AppendEvent writes the event a job's committed change recorded (its
// latest). A failure leaves it to the repairs, counted as deferred.
func (c *Kernel) AppendEvent(ctx context.Context, j *fleet.Job) {
	ev, ok := j.LatestEvent()
	if !ok {
		return
	}
	err := c.CreateEvent(ctx, ev)
	if err != nil {
		c.Counters.EventsDeferred.Add(1)
		c.Log.WarnContext(ctx, "event not written yet; the job holds it until a repair writes it", "job", j.ID, "seq", ev.Seq, "type", ev.Type, "err", err)
		return
	}
	c.Written.Advance(j.ID, ev.Seq)
}

// CreateEvent writes ev; already there (a repair was first) is success.
func (c *Kernel) CreateEvent(ctx context.Context, ev fleet.Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	if _, err := c.Store.Create(ctx, store.Events, ev.JobID, ev.ID, body); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("write event %s: %w", ev.ID, err)
	}
	return nil
}

// Materialize writes those of evs (one job's, oldest first) that the
// container lacks. present, when known, is the set of seqs the container
// holds; nil asks it with one single-partition query. It returns how many
// it wrote.
func (c *Kernel) Materialize(ctx context.Context, evs []fleet.Event, present map[int64]bool) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	jobID := evs[0].JobID
	if present == nil {
		seqs := make([]int64, len(evs))
		for i, ev := range evs {
			seqs[i] = ev.Seq
		}
		items, err := c.QueryAll(ctx, store.Events, store.Query{PartitionKey: jobID, Where: []store.Cond{store.In("seq", seqs...)}})
		if err != nil {
			return 0, err
		}
		present = make(map[int64]bool, len(items))
		for _, it := range items {
			ev, err := Decode[fleet.Event](it)
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
		if err := c.CreateEvent(ctx, ev); err != nil {
			return wrote, err
		}
		wrote++
		c.Counters.EventsRepaired.Add(1)
		c.Log.InfoContext(ctx, "event repaired from the job's recent events", "job", jobID, "seq", ev.Seq, "type", ev.Type)
	}
	return wrote, nil
}

// WrittenSeqs remembers, per job, a seq up to which this process knows every
// event is in the container (it wrote them in order, or checked them), so
// that the repairs and the ring's trim skip their query. It only saves
// reads: forgetting (it is cleared when full) costs a query, never an event.
type WrittenSeqs struct {
	mu sync.Mutex
	m  map[string]int64
}

const writtenSeqsMax = 8192

func NewWrittenSeqs() *WrittenSeqs { return &WrittenSeqs{m: map[string]int64{}} }

// Has reports whether every event of jobID up to seq is known written.
func (w *WrittenSeqs) Has(jobID string, seq int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[jobID] >= seq
}

// Advance records that the event seq of jobID is written: the mark moves
// only if every one before it was known written already.
func (w *WrittenSeqs) Advance(jobID string, seq int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[jobID] == seq-1 {
		w.set(jobID, seq)
	}
}

// Checked records that every event of jobID up to seq is written.
func (w *WrittenSeqs) Checked(jobID string, seq int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[jobID] < seq {
		w.set(jobID, seq)
	}
}

// Forget drops jobID (it ended: no more events to spare queries for).
func (w *WrittenSeqs) Forget(jobID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, jobID)
}

func (w *WrittenSeqs) set(jobID string, seq int64) {
	if _, ok := w.m[jobID]; !ok && len(w.m) >= writtenSeqsMax {
		clear(w.m)
	}
	w.m[jobID] = seq
}
