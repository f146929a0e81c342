package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/pulls"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge"
)

// The pull-request use cases live in coord/pulls; these are its façade.

// forgeDelivery wraps a delivery's effect (to review or testing) so that,
// for a product whose forge maps the job's repo, its pull request sync is
// due in the same compare-and-swap; forge says whether it may be.
func (c *Coordinator) forgeDelivery(ctx context.Context, productID string, to fleet.Stage, effect func(before, j *fleet.Job)) (func(before, j *fleet.Job), bool) {
	if to != fleet.StageReview && to != fleet.StageTesting {
		return effect, false
	}
	p, err := c.catalog.CachedProduct(ctx, productID)
	if err != nil || p == nil || p.Forge == nil {
		return effect, false
	}
	return func(before, j *fleet.Job) {
		effect(before, j)
		if pulls.Wants(p, j) {
			pulls.MarkDelivered(j)
		}
	}, true
}

// ForgeWebhook acts on a verified forge webhook event.
func (c *Coordinator) ForgeWebhook(ctx context.Context, ev forge.Event, d pulls.Delivery) (pulls.Outcome, string, error) {
	return c.pulls.Apply(ctx, ev, d)
}

// ForgeSweep re-drives the pull request syncs that are due.
func (c *Coordinator) ForgeSweep(ctx context.Context) (int, error) { return c.pulls.Sweep(ctx) }

// WaitForge waits for the pull request syncs kicked off by deliveries.
func (c *Coordinator) WaitForge() { c.pulls.Wait() }

// mergeForShip merges j's open pull request before an operator ships it;
// nil when it has none (or its product no forge).
func (c *Coordinator) mergeForShip(ctx context.Context, operatorID string, j *fleet.Job) (bool, error) {
	if j.PullRequest == nil || j.PullRequest.State != fleet.PROpen {
		return false, nil
	}
	p, err := c.catalog.CachedProduct(ctx, j.ProductID)
	if err != nil || !pulls.Wants(p, j) {
		return false, err
	}
	// Never merge what may not be shipped (a gated job short of quorum).
	if _, err := fleet.CheckJobTransition(j, fleet.StageShipped, fleet.ActorOperator); err != nil {
		return false, err
	}
	return true, c.pulls.Merge(ctx, p, j, operatorID)
}
