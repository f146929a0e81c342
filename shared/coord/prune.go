package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// Prune is the stale-factory timer's entry point: every static factory
// silent for longer than Config.PruneAfter and holding no lease is
// deregistered as Deregister does. It returns how many were pruned. Idle,
// a tick costs one point read (coord/catalog/prune.go).
func (c *Coordinator) Prune(ctx context.Context) (int, error) {
	return c.catalog.Prune(ctx)
}

// holdsLease reports whether any job is leased to the factory. Only asked
// of a factory already due for pruning, so its query is not an idle cost.
func (c *Coordinator) holdsLease(ctx context.Context, factoryID string) (bool, error) {
	held, unknown, err := c.k.ScanJobs(ctx, store.Query{Where: []store.Cond{
		store.Eq("holderFactoryId", factoryID),
		store.In("stage", string(fleet.StageAssigned), string(fleet.StageBuilding)),
	}})
	return len(held) > 0 || unknown > 0, err // one that does not decode may be a lease
}
