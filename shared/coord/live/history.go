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

// Events lists a job's events after seq `after`, oldest first: those the
// events container holds (archived from the job's ring), then the ring's.
func (l *Service) Events(ctx context.Context, productID, jobID string, after int64, limit int) ([]fleet.Event, error) {
	// The job first, the container second: an event leaves the ring only
	// after it was written to the container, so what the job read no
	// longer holds, the container read next does.
	j, err := l.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	ring := j.Recent()
	out := []fleet.Event{}
	for _, ev := range ring {
		// Past the container's TTL an event is gone on purpose.
		if ev.Seq > after && l.k.Now().Sub(ev.At) < store.EventsTTL {
			out = append(out, ev)
		}
	}
	if !covers(ring, after) {
		inRing := make(map[int64]bool, len(ring))
		for _, ev := range ring {
			inRing[ev.Seq] = true
		}
		older, err := l.archived(ctx, jobID, func(ev *fleet.Event) bool { return ev.Seq > after && !inRing[ev.Seq] })
		if err != nil {
			return nil, err
		}
		out = append(older, out...)
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
			l.k.Undecodable(ctx, store.Runs, it, err)
			continue
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

// covers reports whether ring (oldest first) holds every event after seq
// `after`, so the container need not be read.
func covers(ring []fleet.Event, after int64) bool {
	if len(ring) == 0 || ring[0].Seq > after+1 {
		return false
	}
	for i := 1; i < len(ring); i++ {
		if ring[i].Seq != ring[i-1].Seq+1 {
			return false
		}
	}
	return true
}
