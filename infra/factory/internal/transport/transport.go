// Package transport is how work reaches the factory: the Receiver interface
// the agent consumes, the poll transport over POST /fleet/claim, and an
// adapter for the shared/bus backends (NATS JetStream, Service Bus).
//
// The broker is never the correctness boundary: a dispatch delivery only
// says a job may be waiting; the factory's fenced accept decides. Deliveries
// are completed right after the accept (complete-on-claim), so no broker
// lock has to outlive the job.
package transport

import (
	"context"
	"time"

	"github.com/gigafactory/fleet/shared/protocol"
)

// Delivery is one unit of work received. Exactly one of Dispatch, GC and
// Claimed is set.
type Delivery struct {
	// ID identifies the delivery in logs (the broker's message id, or
	// claim:<job>:<epoch> for the poll transport).
	ID string
	// Dispatch offers a job; the agent accepts it by dispatch epoch.
	Dispatch *protocol.DispatchMessage
	// GC asks for a cleanup of finished jobs' branches.
	GC *protocol.GCRequest
	// Claimed is a job this transport already claimed (the poll
	// transport's receive is the claim).
	Claimed *protocol.Claimed

	handle any
}

// Receiver delivers work. Implementations are safe for concurrent use.
type Receiver interface {
	// Receive returns up to max deliveries, waiting up to wait for the
	// first. No deliveries and a nil error mean the wait ended.
	Receive(ctx context.Context, max int, wait time.Duration) ([]Delivery, error)
	// Complete settles a delivery for good.
	Complete(ctx context.Context, d Delivery) error
	// Abandon gives a delivery back for another attempt (a job claimed by
	// the poll transport goes back to the queue).
	Abandon(ctx context.Context, d Delivery) error
	// Close releases the transport's connections.
	Close(ctx context.Context) error
}
