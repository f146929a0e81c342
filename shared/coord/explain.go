package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/explain"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/schedule"
)

// Explain says why a job is where it is, scoring every factory scope sees.
func (c *Coordinator) Explain(ctx context.Context, scope catalog.Scope, productID, jobID string) (*explain.Explanation, error) {
	return c.explain.Explain(ctx, scope, productID, jobID)
}

// SubmitWarnings says what keeps a job just submitted from ever running as
// the fleet stands: the scheduler's unroutable reason (no enrolled factory
// has a capability or repo it needs), without its prefix. Busy factories
// are no warning: they free up. A fleet that cannot be read gives none: a
// warning is advice, and the job is stored either way.
func (c *Coordinator) SubmitWarnings(ctx context.Context, j *fleet.Job) []string {
	if j.Stage != fleet.StageQueued && j.Stage != fleet.StageBlocked {
		return nil
	}
	factories, err := c.catalog.Factories(ctx) // the cached fleet, as dispatch reads it
	if err != nil {
		return nil
	}
	if why, ok := schedule.NoFactory(j, factories, c.k.Now(), c.cfg.Weights); ok {
		return []string{why}
	}
	return nil
}
