package coord

import (
	"context"
	"errors"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

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
	j, err := c.mutateJob(ctx, critical.ProductID, critical.JobID, func(j *fleet.Job) error {
		stamped = false
		if j.Stage != fleet.StageQueued || j.NotBefore.After(c.now()) {
			return errNoChange
		}
		j.DispatchEpoch++
		j.TargetFactoryID = factoryID
		j.Dispatch.Unroutable, j.Dispatch.UnroutableKind, j.Dispatch.At = "", "", c.now()
		stamped = true
		return nil
	})
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return
	case err != nil:
		c.log.ErrorContext(ctx, "dispatch the preempting job to the freed seat", "job", critical.JobID, "factory", factoryID, "err", err)
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
		c.stats.publishFailed.Add(1)
		c.log.ErrorContext(ctx, "publish the preempting job to the freed seat", "job", j.ID, "factory", factoryID, "err", err)
		return
	}
	c.stats.dispatched.Add(1)
}
