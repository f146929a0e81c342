package coord

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"

	"github.com/gigafactory/fleet/shared/fleet"
)

// appendEvent writes the event of a transition already committed to the job
// (the job's EventSeq is the event's seq). The transition stands even if
// this write fails — a job cannot be un-claimed because its audit line was
// lost — so a failure is logged and counted, and shows as a gap in seq.
func (c *Coordinator) appendEvent(ctx context.Context, j *fleet.Job, ev fleet.Event) {
	ev.Seq = j.EventSeq
	ev.ID = fleet.EventID(j.ID, ev.Seq)
	ev.JobID, ev.ProductID = j.ID, j.ProductID
	if ev.At.IsZero() {
		ev.At = j.UpdatedAt
	}
	body, err := json.Marshal(ev)
	if err == nil {
		_, err = c.store.Create(ctx, Events, j.ID, ev.ID, body)
	}
	if err != nil {
		c.stats.eventsLost.Add(1)
		c.log.ErrorContext(ctx, "event not recorded", "job", j.ID, "seq", ev.Seq, "type", ev.Type, "err", err)
	}
}

// Events lists a job's events after seq `after`, oldest first.
func (c *Coordinator) Events(ctx context.Context, productID, jobID string, after int64, limit int) ([]fleet.Event, error) {
	if _, err := c.GetJob(ctx, productID, jobID); err != nil {
		return nil, err
	}
	items, err := c.queryAll(ctx, Events, Query{PartitionKey: jobID})
	if err != nil {
		return nil, err
	}
	out := make([]fleet.Event, 0, len(items))
	for _, it := range items {
		ev, err := decode[fleet.Event](it)
		if err != nil {
			return nil, err
		}
		if ev.Seq > after {
			out = append(out, *ev)
		}
		if limit > 0 && len(out) == limit {
			break
		}
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
		_, err = c.store.Upsert(ctx, Runs, run.JobID, run.ID, body)
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
	items, err := c.queryAll(ctx, Runs, Query{PartitionKey: jobID})
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
