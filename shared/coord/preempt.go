package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/schedule"
)

// preempt makes room for a critical job that no eligible factory has a
// free seat for (API.md, "Cancel and preemption"): among the jobs running
// on the factories that fail its hard filter only for want of a seat it
// picks a victim (schedule.PreemptionVictim) and asks the victim's holder
// to stop; the holder checkpoints and releases with outcome preempted (or
// the reaper forces it after the grace), the victim is queued again
// without spending an attempt and the critical job is dispatched to the
// freed seat (seatFreed). One preemption per critical job at a time: while
// one is pending, the dispatcher's retries choose no second victim.
func (c *Coordinator) preempt(ctx context.Context, critical *fleet.Job, factories []*fleet.Factory) {
	if c.cfg.NoPreemption || critical.Priority != fleet.PriorityCritical {
		return
	}
	blocked := schedule.SeatBlocked(critical, factories, c.k.Now())
	if len(blocked) == 0 {
		return
	}
	holders := make([]string, len(blocked))
	for i, f := range blocked {
		holders[i] = f.ID
	}
	leased, err := c.leasedJobs(ctx, "")
	if err != nil {
		c.k.Log.ErrorContext(ctx, "preemption: list running jobs", "job", critical.ID, "err", err)
		return
	}
	var running []*fleet.Job
	for _, j := range leased {
		if p := j.PreemptedBy; p != nil && p.JobID == critical.ID && p.ProductID == critical.ProductID && j.PreemptRequested {
			return // a seat is already being freed for it
		}
		if slices.Contains(holders, j.HolderFactoryID) {
			running = append(running, j)
		}
	}
	victim, ok := schedule.PreemptionVictim(critical, running)
	if !ok {
		return
	}
	ref := &fleet.JobRef{ProductID: critical.ProductID, JobID: critical.ID}
	after, err := c.requestStop(ctx, stopRequest{pk: victim.ProductID, id: victim.ID, action: protocol.ControlPreempt,
		actorID: critical.ID, preemptor: ref, leaseEpoch: victim.LeaseEpoch})
	if err != nil {
		// Released, ended or asked to stop meanwhile: the next dispatch
		// attempt looks again.
		if !errors.Is(err, errNotLeased) && !errors.Is(err, fleet.ErrConflict) {
			c.k.Log.ErrorContext(ctx, "preemption: ask the victim to stop", "job", critical.ID, "victim", victim.ID, "err", err)
		}
		return
	}
	// The link the other way: the critical job's own history names its
	// victim.
	msg := fmt.Sprintf("preempting %s/%s (priority %s) on %s for a seat", victim.ProductID, victim.ID, victim.Priority, after.HolderFactoryID)
	_, written, err := kernel.CAS(ctx, c.k, kernel.JobDocs.WithCache(c.k.Jobs), critical.ProductID, critical.ID, func(j *fleet.Job) error {
		j.UpdatedAt = c.k.Now()
		return c.k.RecordEvent(ctx, j, fleet.Event{Type: fleet.EventPreempted, Actor: fleet.ActorSystem, Message: msg})
	})
	if err != nil || !written {
		c.k.Log.ErrorContext(ctx, "preemption: record it on the critical job", "job", critical.ID, "err", err)
		return
	}
}

// seatFreed hands the seat a preempted job gave up on factoryID to the
// critical job it was taken for: the critical job is dispatched to that
// factory directly, before the victim (queued again too) or anything else
// can be routed there. Without a dispatch transport the critical job needs
// nothing: it outranks everything in the freed factory's next claim.
func (c *Coordinator) seatFreed(ctx context.Context, critical fleet.JobRef, factoryID string) {
	if c.publisher == nil {
		return
	}
	stamped := false
	j, err := c.k.MutateJob(ctx, critical.ProductID, critical.JobID, func(j *fleet.Job) error {
		stamped = false
		if j.Stage != fleet.StageQueued || j.NotBefore.After(c.k.Now()) {
			return kernel.ErrNoChange
		}
		j.DispatchEpoch++
		j.TargetFactoryID = factoryID
		j.Dispatch.Unroutable, j.Dispatch.UnroutableKind, j.Dispatch.At = "", "", c.k.Now()
		stamped = true
		return nil
	})
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return
	case err != nil:
		c.k.Log.ErrorContext(ctx, "dispatch the preempting job to the freed seat", "job", critical.JobID, "factory", factoryID, "err", err)
		return
	case !stamped:
		return
	}
	msg := protocol.DispatchMessage{
		JobID: j.ID, ProductID: j.ProductID, Repo: j.Repo, Capabilities: j.Capabilities,
		Priority: j.Priority, TargetFactoryID: j.TargetFactoryID, DispatchEpoch: j.DispatchEpoch,
	}
	if err := c.publisher.Publish(ctx, msg); err != nil {
		// The redispatch sweep sends it again.
		c.k.Counters.PublishFailed.Add(1)
		c.k.Log.ErrorContext(ctx, "publish the preempting job to the freed seat", "job", j.ID, "factory", factoryID, "err", err)
		return
	}
	c.k.Counters.Dispatched.Add(1)
}
