package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// Cancel and preemption are commands the holder acknowledges (API.md,
// "Cancel and preemption"). The coordinator marks the job (cancelRequested
// or preemptRequested), tells the holder at once with a control message
// when the transport can carry one, and repeats it in every renewal
// answer. The holder stops its engine, checkpoints and releases with the
// matching outcome. A holder that does not answer within the cancel grace
// (frozen, partitioned, dead) has its lease revoked by the reaper, which
// ends the run the same way; the events say which of the two happened.

// ControlPublisher delivers control messages to the holder's subscription;
// the dispatch transport implements it when it can.
type ControlPublisher interface {
	PublishControl(ctx context.Context, msg protocol.ControlMessage) error
}

// errNotLeased: a stop request found the job holding no lease (it was
// released or ended meanwhile); errLeased: an immediate cancel found it
// leased (claimed meanwhile).
var (
	errNotLeased = errors.New("job holds no lease")
	errLeased    = errors.New("job is leased")
)

// cancel is the operator's cancel. A job that holds no lease is cancelled
// at once; a leased one is asked to stop (the job comes back still leased,
// with CancelRequested set: the API answers 202). The two paths race a
// claim or a release, so each gives way to the other when the job has
// moved to the other side meanwhile.
func (c *Coordinator) cancel(ctx context.Context, actor fleet.Actor, actorID, productID, jobID, reason string) (*fleet.Job, error) {
	for attempt := 1; attempt <= 3; attempt++ {
		after, err := c.transition(ctx, move{pk: productID, id: jobID, to: fleet.StageCancelled, actor: actor,
			actorID: actorID, event: fleet.EventCancel, message: reason,
			guard: func(j *fleet.Job) error {
				if j.Stage.Leased() {
					return fmt.Errorf("%w: job %s is held by %s", errLeased, j.ID, j.HolderFactoryID)
				}
				return nil
			}})
		if !errors.Is(err, errLeased) {
			return after, err
		}
		after, err = c.requestStop(ctx, stopRequest{pk: productID, id: jobID, action: protocol.ControlCancel,
			actor: actor, actorID: actorID, message: reason})
		if !errors.Is(err, errNotLeased) {
			return after, err
		}
	}
	return nil, fleet.Errorf(fleet.CodeConflict, "job %s keeps changing hands; try the cancel again", jobID)
}

// cancelTree is cancel, then the job's descendants (a composite's
// children) the same way.
func (c *Coordinator) cancelTree(ctx context.Context, actor fleet.Actor, actorID, productID, jobID, reason string) (*fleet.Job, error) {
	after, err := c.cancel(ctx, actor, actorID, productID, jobID, reason)
	if err != nil {
		return nil, err
	}
	c.dag.CancelDescendants(context.WithoutCancel(ctx), actorID, after, reason)
	return after, nil
}

// stopRequest asks the holder of one job to stop.
type stopRequest struct {
	pk, id string
	action protocol.ControlAction
	// actor and actorID: who cancels (an operator, or the system); the
	// preempting job (preempt).
	actor   fleet.Actor
	actorID string
	// preemptor is the critical job a preemption makes way for.
	preemptor *fleet.JobRef
	message   string
	// leaseEpoch, when set, is the lease the request is for: a preemption
	// chosen from a read of the job must not hit the next lease.
	leaseEpoch int64
}

// requestStop marks the job and tells its holder. A cancel of a job
// already asked to cancel changes nothing and answers the job; a cancel
// outranks a pending preemption (the job ends cancelled, not queued). A
// preemption of a job already asked to stop is a conflict: that seat is
// being freed for someone else.
func (c *Coordinator) requestStop(ctx context.Context, req stopRequest) (*fleet.Job, error) {
	after, written, err := kernel.CAS(ctx, c.k, kernel.JobDocs.WithCache(c.k.Jobs), req.pk, req.id, func(j *fleet.Job) error {
		if !j.Stage.Leased() || j.HolderFactoryID == "" {
			return fmt.Errorf("%w: job %s is %s", errNotLeased, j.ID, j.Stage)
		}
		if req.leaseEpoch != 0 && j.LeaseEpoch != req.leaseEpoch {
			return fleet.Errorf(fleet.CodeConflict, "job %s moved on to lease %d", j.ID, j.LeaseEpoch)
		}
		now := c.k.Now()
		switch req.action {
		case protocol.ControlCancel:
			if j.CancelRequested {
				return kernel.ErrNoChange
			}
			j.CancelRequested = true
		case protocol.ControlPreempt:
			if j.StopRequested() {
				return fleet.Errorf(fleet.CodeConflict, "job %s is already asked to stop", j.ID)
			}
			j.PreemptRequested, j.PreemptedBy = true, req.preemptor
		}
		if j.StopRequestedAt.IsZero() {
			j.StopRequestedAt = now
		}
		j.UpdatedAt = now
		ev := fleet.Event{Type: fleet.EventCancelRequested, Actor: req.actor, ActorID: req.actorID,
			Message: fmt.Sprintf("cancel requested: %s must acknowledge by %s or the lease is revoked", j.HolderFactoryID,
				j.StopRequestedAt.Add(c.cfg.CancelGrace).Format(time.RFC3339))}
		if req.message != "" {
			ev.Message += "; reason: " + req.message
		}
		if req.action == protocol.ControlPreempt {
			ev = fleet.Event{Type: fleet.EventPreemptedBy, Actor: fleet.ActorSystem, ActorID: req.actorID,
				Message: fmt.Sprintf("preempted by critical job %s: %s must release by %s or the lease is revoked", req.actorID,
					j.HolderFactoryID, j.StopRequestedAt.Add(c.cfg.CancelGrace).Format(time.RFC3339))}
		}
		return c.k.RecordEvent(ctx, j, ev)
	})
	if err != nil || !written {
		return after, err
	}
	ctx = context.WithoutCancel(ctx)
	c.publishControl(ctx, after, req.action)
	return after, nil
}

// publishControl tells the holder at once. Best effort: the renewal answer
// carries the request too, and the reaper forces it after the grace.
func (c *Coordinator) publishControl(ctx context.Context, j *fleet.Job, action protocol.ControlAction) {
	cp, ok := c.publisher.(ControlPublisher)
	if !ok {
		return
	}
	msg := protocol.ControlMessage{Action: action, JobID: j.ID, ProductID: j.ProductID,
		TargetFactoryID: j.HolderFactoryID, LeaseEpoch: j.LeaseEpoch}
	if err := cp.PublishControl(ctx, msg); err != nil {
		c.k.Counters.PublishFailed.Add(1)
		c.k.Log.WarnContext(ctx, "control message not sent; the holder learns at its next renewal", "job", j.ID,
			"action", action, "factory", j.HolderFactoryID, "err", err)
	}
}

// ReleaseRequest is a holder's release of its lease.
type ReleaseRequest struct {
	LeaseEpoch int64
	// Outcome acknowledges a cancel or a preemption; plain (empty) gives
	// the job back to the queue.
	Outcome fleet.ReleaseOutcome
	// Checkpoint, when set, records where the holder's work is.
	Checkpoint *string
}

// Release gives the job back to the queue, keeping its checkpoint.
func (c *Coordinator) Release(ctx context.Context, factoryID, productID, jobID string, leaseEpoch int64) (*fleet.Job, error) {
	return c.ReleaseWith(ctx, factoryID, productID, jobID, ReleaseRequest{LeaseEpoch: leaseEpoch})
}

// ReleaseWith is the holder's release with its outcome. A job whose cancel
// was requested ends cancelled whatever the outcome says (an operator's
// cancel outranks a preemption or a shutdown's plain release); outcome
// cancelled without a cancel requested, or preempted without a preemption,
// is a conflict. A preempted job goes back to the queue without spending an
// attempt, and the critical job it made way for is dispatched to the seat.
func (c *Coordinator) ReleaseWith(ctx context.Context, factoryID, productID, jobID string, req ReleaseRequest) (*fleet.Job, error) {
	if req.Checkpoint != nil {
		if err := fleet.ValidateText("checkpoint", *req.Checkpoint, 1024); err != nil {
			return nil, err
		}
	}
	var ack stopAck
	after, err := c.transition(ctx, move{pk: productID, id: jobID, actor: fleet.ActorFactory, actorID: factoryID,
		event: fleet.EventReleased,
		decide: func(j *fleet.Job) fleet.Stage {
			ack = stopAckOf(j)
			if j.CancelRequested {
				return fleet.StageCancelled
			}
			return fleet.StageQueued
		},
		guard: func(j *fleet.Job) error {
			if err := j.CheckFence(factoryID, req.LeaseEpoch); err != nil {
				return err
			}
			switch {
			case req.Outcome == fleet.ReleaseCancelled && !j.CancelRequested:
				return fleet.Errorf(fleet.CodeConflict, "job %s has no cancel requested; release it without an outcome", j.ID)
			case req.Outcome == fleet.ReleasePreempted && !j.StopRequested():
				return fleet.Errorf(fleet.CodeConflict, "job %s has no preemption requested; release it without an outcome", j.ID)
			}
			return nil
		},
		effect: func(_, j *fleet.Job) {
			if req.Checkpoint != nil {
				j.Checkpoint = *req.Checkpoint
			}
		},
		describe: func(before *fleet.Job) (fleet.EventType, string, fleet.RunResult) {
			return stopAckOf(before).acknowledged(factoryID)
		}})
	if err != nil {
		return nil, err
	}
	if ack.preemptedBy != nil && after.Stage == fleet.StageQueued {
		c.seatFreed(context.WithoutCancel(ctx), *ack.preemptedBy, factoryID)
	}
	return after, nil
}

// stopAck is what a stop request looked like when the lease ended.
type stopAck struct {
	cancel      bool
	preemptedBy *fleet.JobRef
}

func stopAckOf(j *fleet.Job) stopAck {
	if j.CancelRequested {
		return stopAck{cancel: true}
	}
	if j.PreemptRequested {
		return stopAck{preemptedBy: j.PreemptedBy}
	}
	return stopAck{}
}

// acknowledged names the event and run result of a holder's release under
// a stop request; zero values for a plain release.
func (a stopAck) acknowledged(factoryID string) (fleet.EventType, string, fleet.RunResult) {
	switch {
	case a.cancel:
		return fleet.EventCancelAcknowledged, "cancel acknowledged by " + factoryID, fleet.RunCancelled
	case a.preemptedBy != nil:
		return fleet.EventPreemptAcknowledged, "preemption acknowledged by " + factoryID + ": queued again for critical job " +
			a.preemptedBy.JobID + ", no attempt spent", fleet.RunPreempted
	}
	return "", "", ""
}

// forceStops ends every leased job whose stop request went unacknowledged
// past the grace (or whose lease expired meanwhile): the lease is revoked
// (epoch+1, fencing the holder) and the job is cancelled, or queued again
// without spending an attempt for a preemption. It returns how many it
// ended; the reaper calls it with the leased jobs it read.
func (c *Coordinator) forceStops(ctx context.Context, leased []*fleet.Job) (int, error) {
	n := 0
	var errs []error
	for _, j := range leased {
		if !j.StopOverdue(c.k.Now(), c.cfg.CancelGrace) {
			continue
		}
		holder, epoch := j.HolderFactoryID, j.LeaseEpoch
		var ack stopAck
		after, err := c.transition(ctx, move{pk: j.ProductID, id: j.ID, actor: fleet.ActorSystem, actorID: "reaper",
			decide: func(cur *fleet.Job) fleet.Stage {
				ack = stopAckOf(cur)
				if cur.CancelRequested {
					return fleet.StageCancelled
				}
				return fleet.StageQueued
			},
			guard: func(cur *fleet.Job) error {
				if cur.LeaseEpoch != epoch || !cur.StopOverdue(c.k.Now(), c.cfg.CancelGrace) {
					return fleet.Errorf(fleet.CodeConflict, "job %s was released meanwhile", cur.ID)
				}
				return nil
			},
			describe: func(before *fleet.Job) (fleet.EventType, string, fleet.RunResult) {
				waited := c.k.Now().Sub(before.StopRequestedAt).Round(time.Second)
				if before.CancelRequested {
					return fleet.EventCancelForced, fmt.Sprintf("cancel forced: %s did not acknowledge within %s (waited %s); lease revoked",
						holder, c.cfg.CancelGrace, waited), fleet.RunCancelled
				}
				return fleet.EventPreemptForced, fmt.Sprintf("preemption forced: %s did not release within %s (waited %s); lease revoked, queued again for critical job %s, no attempt spent",
					holder, c.cfg.CancelGrace, waited, preemptorID(before)), fleet.RunPreempted
			}})
		switch {
		case err == nil:
			n++
			if ack.preemptedBy != nil && after.Stage == fleet.StageQueued {
				c.seatFreed(ctx, *ack.preemptedBy, holder)
			}
		case errors.Is(err, fleet.ErrConflict), errors.Is(err, fleet.ErrNotFound):
		default:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

func preemptorID(j *fleet.Job) string {
	if j.PreemptedBy == nil {
		return ""
	}
	return j.PreemptedBy.JobID
}
