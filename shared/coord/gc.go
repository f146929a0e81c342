package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/protocol"
)

// GCPublisher delivers GC requests to factories (catalog.GCPublisher).
type GCPublisher = catalog.GCPublisher

// GCPlan is each factory's terminal jobs to clean up (catalog.Service.GCPlan).
func (c *Coordinator) GCPlan(ctx context.Context) ([]protocol.GCRequest, error) {
	return c.catalog.GCPlan(ctx)
}

// GCSweep sends each factory its GC request when the transport can carry
// one (catalog.Service.GCSweep); it returns how many it sent.
func (c *Coordinator) GCSweep(ctx context.Context) (int, error) {
	gp, _ := c.publisher.(GCPublisher)
	return c.catalog.GCSweep(ctx, gp)
}
