package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/explain"
)

// Explain says why a job is where it is, scoring every factory scope sees.
func (c *Coordinator) Explain(ctx context.Context, scope catalog.Scope, productID, jobID string) (*explain.Explanation, error) {
	return c.explain.Explain(ctx, scope, productID, jobID)
}
