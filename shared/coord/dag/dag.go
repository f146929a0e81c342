// Package dag is how jobs wait on each other: a job's children (posted to
// it, the job blocked until they ship) and its dependencies (named in its
// manifest), the settling of a blocked job when what it waits for ends,
// and the tree view. coord's façade calls it; what it needs of the job
// lifecycle (making a job, moving one through the stage machine,
// cancelling one) is Lifecycle, which coord provides.
package dag

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Lifecycle is what dag needs of the job lifecycle.
type Lifecycle interface {
	// PrepareJob builds job id of manifest m and checks it without
	// writing anything; dependencies in pending are jobs the same request
	// creates first.
	PrepareJob(ctx context.Context, productID, id string, m *fleet.Manifest, pending map[string]bool) (*fleet.Job, error)
	// CreateJob writes a job PrepareJob built; created is false when its
	// idempotency key named a job already.
	CreateJob(ctx context.Context, j *fleet.Job) (job *fleet.Job, created bool, err error)
	// Move applies m in one compare-and-swap, records its event and, when
	// the stage changed, tells the observers of committed transitions.
	Move(ctx context.Context, m Move) (*fleet.Job, error)
	// Cancel is an operator's cancel of one job (and its descendants).
	Cancel(ctx context.Context, operatorID, productID, jobID, reason string) (*fleet.Job, error)
}

// Move is a stage move dag asks of the lifecycle: the stage machine checks
// it against Actor unless MayStay keeps the job where it is.
type Move = kernel.Move

// Service settles the jobs that wait on others.
type Service struct {
	k  *kernel.Kernel
	lc Lifecycle
}

// New builds the service and registers its observer: a job that ended
// settles the jobs waiting on it. Build it after the observers that must
// run first (the seat given back).
func New(k *kernel.Kernel, lc Lifecycle) *Service {
	s := &Service{k: k, lc: lc}
	k.Observe(s.settleOnEnd)
	return s
}

// settleOnEnd observes transitions: a job that ended settles the jobs
// waiting on it and its parent.
func (s *Service) settleOnEnd(ctx context.Context, t kernel.Transition) {
	if t.After.Stage.Terminal() {
		s.settleDependants(ctx, t.After)
		s.settleParent(ctx, t.After)
	}
}
