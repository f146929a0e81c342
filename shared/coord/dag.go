package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// A job's children and dependencies live in coord/dag; these are their
// façade, and the lifecycle adapter's methods below what dag asks of the
// job lifecycle.

// PostChildren creates the children of job parentID (each idempotent by its
// idempotencyKey; a child without one is keyed by its parent and manifest)
// and makes the parent wait for them. A holder factory's parent gives its
// lease back. Every child is checked before any is written; created is
// false when every child already existed and the parent waits on each.
func (c *Coordinator) PostChildren(ctx context.Context, productID, parentID string, req dag.ChildrenRequest) (children []*fleet.Job, created bool, err error) {
	return c.dag.PostChildren(ctx, productID, parentID, req)
}

// DAG returns the tree job id belongs to: its root, every job below it,
// and the jobs outside it that one of them depends on, with child and dep
// edges and a count per stage.
func (c *Coordinator) DAG(ctx context.Context, productID, id string) (*dag.View, error) {
	return c.dag.View(ctx, productID, id)
}

// UnblockReady settles every blocked job: queued when its dependencies are
// met, failed (dependency_failed) when they can no longer be. Reaching a
// terminal stage settles a job's dependants at once; this pass, run by the
// redispatch sweep, catches the ones that pass missed (the process died
// between the two, or the store failed then). It returns how many jobs it
// moved.
func (c *Coordinator) UnblockReady(ctx context.Context) (int, error) {
	n, _, err := c.dag.UnblockReady(ctx)
	return n, err
}

// dag.Lifecycle, over prepareJob, createJob, transition and Act (move
// stays unexported).

func (l lifecycle) PrepareJob(ctx context.Context, productID, id string, m *fleet.Manifest, pending map[string]bool) (*fleet.Job, error) {
	return l.c.prepareJob(ctx, productID, id, m, pending)
}

func (l lifecycle) CreateJob(ctx context.Context, j *fleet.Job) (*fleet.Job, bool, error) {
	return l.c.createJob(ctx, j)
}

func (l lifecycle) Move(ctx context.Context, m kernel.Move) (*fleet.Job, error) {
	mv := move{pk: m.ProductID, id: m.JobID, to: m.To, decide: m.Decide, actor: m.Actor, actorID: m.ActorID,
		event: m.Event, message: m.Message, guard: m.Guard, mayStay: m.MayStay, eventActor: m.EventActor, messageOf: m.MessageOf}
	if m.Effect != nil {
		mv.effect = func(_, j *fleet.Job) { m.Effect(j) }
	}
	return l.c.transition(ctx, mv)
}

func (l lifecycle) Cancel(ctx context.Context, operatorID, productID, jobID, reason string) (*fleet.Job, error) {
	return l.c.Act(ctx, operatorID, productID, jobID, ActionCancel, reason)
}

// CancelBySystem is the cancel the fleet decides itself (a pull request
// merged or closed mid-iteration): an operator's cancel, recorded as the
// system's.
func (l lifecycle) CancelBySystem(ctx context.Context, actorID, productID, jobID, reason string) (*fleet.Job, error) {
	return l.c.cancelTree(ctx, fleet.ActorSystem, actorID, productID, jobID, reason)
}
