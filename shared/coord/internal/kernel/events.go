package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// A job's events.
//
// A job's events ride on its own writes: the CAS that changes a job
// records the change's event in the job's ring of recent events
// (fleet.Job.RecentEvents), and no second document is written. The ring
// grows to eventRingMax; then the oldest go to the events container (one
// Create each, of the event's fixed id jobId:seq, so a retried or lost CAS
// writing them again changes nothing) and the ring keeps the newest
// eventRingKeep. A job's history is the container's events followed by its
// ring's (live.Events); the live streams read the jobs' change feed, whose
// every version carries the ring (coord/live).
//
// An event leaves the ring only once it is in the container: if the write
// fails the ring grows on (the next event tries again) up to eventRingCap,
// past which the change is refused as the store being unavailable rather
// than let the document grow without bound.
const (
	eventRingKeep = 4
	eventRingMax  = 8
	eventRingCap  = fleet.MaxRecentEvents
)

// RecordEvent, called inside a job's CAS, records ev as the job's next
// event (see above). It may write to the events container.
func (c *Kernel) RecordEvent(ctx context.Context, j *fleet.Job, ev fleet.Event) error {
	j.RecordEvent(ev)
	if len(j.RecentEvents) <= eventRingMax {
		return nil
	}
	n := len(j.RecentEvents) - eventRingKeep
	for _, old := range j.Recent()[:n] {
		if err := c.CreateEvent(ctx, old); err != nil {
			c.Counters.EventsDeferred.Add(1)
			if len(j.RecentEvents) <= eventRingCap {
				c.Log.WarnContext(ctx, "recent events not archived; the job keeps them", "job", j.ID, "held", len(j.RecentEvents), "err", err)
				return nil
			}
			return fmt.Errorf("archive events of job %s: %w", j.ID, err)
		}
		c.Counters.EventsRepaired.Add(1)
	}
	// A new slice: the caller's snapshot of the job shares the old one.
	j.RecentEvents = slices.Clone(j.RecentEvents[n:])
	return nil
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
