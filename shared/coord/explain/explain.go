// Package explain says why a job is where it is: its dispatch state, how
// every factory a reader may see scores for it now, what a blocked job waits
// for and what holds a queued one back. It only reads: the catalog's
// factories, the dependency tree and admission's snapshot.
package explain

import (
	"context"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/schedule"
)

// Service answers GET /fleet/jobs/{id}/explain.
type Service struct {
	k         *kernel.Kernel
	weights   schedule.Weights
	catalog   *catalog.Service
	dag       *dag.Service
	admission *admission.Service
}

// New builds the service over the packages it reads.
func New(k *kernel.Kernel, weights schedule.Weights, cat *catalog.Service, d *dag.Service, adm *admission.Service) *Service {
	return &Service{k: k, weights: weights, catalog: cat, dag: d, admission: adm}
}

// Explanation is why a job is where it is (view.Explanation).
type Explanation = view.Explanation

// WaitExplanation is what a blocked job waits for.
type WaitExplanation = view.WaitExplanation

// WaitItem is one job waited for and its stage now.
type WaitItem = view.WaitItem

// ProfileExplanation is the part of a job's requirements its profile made.
type ProfileExplanation = view.ProfileExplanation

// Explain scores every factory scope sees for the job as the scheduler
// would now. The factories it cannot see serve none of the job's product
// (the job's product is in scope), so leaving them out changes no verdict,
// only the counts in the reason.
func (c *Service) Explain(ctx context.Context, scope catalog.Scope, productID, jobID string) (*Explanation, error) {
	j, err := c.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	if !scope.Allows(j.ProductID) {
		return nil, kernel.NotFound("job", jobID)
	}
	factories, err := c.catalog.Factories(ctx)
	if err != nil {
		return nil, err
	}
	factories = scope.Visible(c.catalog.WithoutOffer(factories, j.ID))
	e := &Explanation{
		JobID: j.ID, Stage: j.Stage, TargetFactoryID: j.TargetFactoryID, DispatchEpoch: j.DispatchEpoch,
		Dispatch: j.Dispatch, Schedule: schedule.Explain(j, factories, c.k.Now(), c.weights),
	}
	if p := j.Profile; p != nil {
		e.Profile = &ProfileExplanation{Name: p.Name, Version: p.Version, Capabilities: p.Capabilities}
	}
	e.Review = j.Review
	if j.Stage == fleet.StageBlocked {
		w := &WaitExplanation{DepsMode: j.DepsMode, Deps: []WaitItem{}, Children: []WaitItem{}}
		for _, list := range []struct {
			ids []string
			out *[]WaitItem
		}{{j.Deps, &w.Deps}, {j.Children, &w.Children}} {
			for _, id := range list.ids {
				st, err := c.dag.Stage(ctx, j.ProductID, id)
				if err != nil {
					return nil, err
				}
				*list.out = append(*list.out, WaitItem{ID: id, Stage: st})
			}
		}
		e.Waiting = w
	}
	if j.Stage == fleet.StageQueued {
		snap, err := c.admission.Snapshot(ctx, j.ProductID)
		if err != nil {
			return nil, err
		}
		e.Budget = snap.BudgetHold(j)
		e.SeatCap = snap.Product.SeatHold()
	}
	return e, nil
}
