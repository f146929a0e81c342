package kernel

import (
	"context"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Transition is a committed change of a job's stage, as its observers see
// it: the job before and after the CAS, the stage machine's rule, and, when
// the move released or revoked a lease, the result of the run it ended.
type Transition struct {
	Before, After *fleet.Job
	Rule          fleet.Rule
	// Run is the ended run's result; "" when no lease ended.
	Run fleet.RunResult
	// Message is the committed event's message.
	Message string
}

// EndsRun reports whether the move ended a run (released or revoked the
// lease).
func (t Transition) EndsRun() bool { return t.Run != "" }

// Observer reacts to a committed transition. It runs after the commit on a
// context the caller's cancellation no longer reaches, and cannot undo the
// move: what it writes is its own follow-up (a seat given back, a
// dependant unblocked), repaired by its own sweep if it fails.
type Observer func(ctx context.Context, t Transition)

// Observe registers fn for every transition that changes a job's stage.
// Observers run in the order they were registered; coord registers them
// at construction, before any use case runs.
func (c *Kernel) Observe(fn Observer) { c.observers = append(c.observers, fn) }

// Committed tells every observer of t.
func (c *Kernel) Committed(ctx context.Context, t Transition) {
	for _, fn := range c.observers {
		fn(ctx, t)
	}
}
