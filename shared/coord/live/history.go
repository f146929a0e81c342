package live

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// RepairChanged writes the recent events of a changed job (a change-feed
// copy) that the container lacks, unless this process saw them written.
func (l *Service) RepairChanged(ctx context.Context, j *fleet.Job) error {
	if len(j.RecentEvents) == 0 || l.k.Written.Has(j.ID, j.EventSeq) {
		return nil
	}
	if _, err := l.k.Materialize(ctx, j.Recent(), nil); err != nil {
		return fmt.Errorf("repair events of job %s: %w", j.ID, err)
	}
	// Everything before the ring left it checked, so all up to EventSeq
	// is written.
	l.k.Written.Checked(j.ID, j.EventSeq)
	return nil
}

// Events lists a job's events after seq `after`, oldest first: the events
// container's, with any the job holds that it lacks yet (those are
// written now too).
func (l *Service) Events(ctx context.Context, productID, jobID string, after int64, limit int) ([]fleet.Event, error) {
	// The container first, the job second: an event is written only after
	// its job's change committed, so every seq the container holds is at
	// most the job's EventSeq as read next, and the job's ring holds every
	// seq up to it that may still be missing.
	items, err := l.k.QueryAll(ctx, store.Events, store.Query{PartitionKey: jobID})
	if err != nil {
		return nil, err
	}
	j, err := l.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	out := make([]fleet.Event, 0, len(items))
	present := make(map[int64]bool, len(items))
	for _, it := range items {
		ev, err := kernel.Decode[fleet.Event](it)
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
		if !present[ev.Seq] && l.k.Now().Sub(ev.At) < store.EventsTTL {
			missing = append(missing, ev)
		}
	}
	if len(missing) > 0 {
		if _, err := l.k.Materialize(context.WithoutCancel(ctx), missing, present); err != nil {
			// Shown anyway: the job holds them, committed.
			l.k.Log.WarnContext(ctx, "events: repair on read failed", "job", jobID, "err", err)
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

// KeepRuns writes the ended runs a job document no longer holds
// (fleet.Job.EndRun) to the runs container. Written with their fixed ids,
// so a retried move writes each once.
func (l *Service) KeepRuns(ctx context.Context, runs []fleet.Run) error {
	for _, run := range runs {
		body, err := json.Marshal(run)
		if err == nil {
			_, err = l.k.Store.Upsert(ctx, store.Runs, run.JobID, run.ID, body)
		}
		if err != nil {
			return fmt.Errorf("keep run %s: %w", run.ID, err)
		}
	}
	return nil
}

// Runs lists a job's runs, the one in progress (if any) last.
func (l *Service) Runs(ctx context.Context, productID, jobID string) ([]fleet.Run, error) {
	j, err := l.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	items, err := l.k.QueryAll(ctx, store.Runs, store.Query{PartitionKey: jobID})
	if err != nil {
		return nil, err
	}
	// The container holds the runs the job document let go of (and, for
	// jobs older than runs on the job, all of them); the job the rest.
	out := make([]fleet.Run, 0, len(items)+len(j.Runs)+1)
	for _, it := range items {
		r, err := kernel.Decode[fleet.Run](it)
		if err != nil {
			return nil, err
		}
		if _, held := j.RunAt(r.LeaseEpoch); !held {
			out = append(out, *r)
		}
	}
	out = append(out, j.Runs...)
	sortRuns(out)
	if _, ok := j.Lease(); ok {
		out = append(out, fleet.RunOf(j, fleet.RunRunning, "", time.Time{}))
	}
	return out, nil
}

// sortRuns orders by epoch: ids sort as text, so "j:10" would precede "j:9".
func sortRuns(rs []fleet.Run) {
	slices.SortFunc(rs, func(a, b fleet.Run) int { return cmp.Compare(a.LeaseEpoch, b.LeaseEpoch) })
}
