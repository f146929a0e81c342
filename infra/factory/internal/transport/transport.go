// Package transport is how work reaches the factory: the Receiver interface
// the agent consumes, the poll transport over POST /fleet/claim, and an
// adapter for the shared/bus backends (NATS JetStream, Service Bus).
//
// The broker is never the correctness boundary: a dispatch delivery only
// says a job may be waiting; the factory's fenced accept decides. A
// long-running factory completes a delivery right after the accept
// (complete-on-claim). An elastic execution (--once) instead keeps the
// delivery locked for its whole run (KeepLock) and completes it when the
// run ends: a locked message still counts in the subscription's active
// count, which is what the pool's scaler reads as running work.
package transport

import (
	"context"
	"time"

	"github.com/gigafactory/fleet/shared/protocol"
)

// Delivery is one unit of work received. Exactly one of Dispatch, GC,
// Control and Claimed is set.
type Delivery struct {
	// ID identifies the delivery in logs (the broker's message id, or
	// claim:<job>:<epoch> for the poll transport).
	ID string
	// Dispatch offers a job; the agent accepts it by dispatch epoch.
	Dispatch *protocol.DispatchMessage
	// GC asks for a cleanup of finished jobs' branches.
	GC *protocol.GCRequest
	// Control asks the holder of a lease to stop (cancel, preemption).
	Control *protocol.ControlMessage
	// Claimed is a job this transport already claimed (the poll
	// transport's receive is the claim).
	Claimed *protocol.Claimed
	// LockedUntil is when a bus delivery's lock lapses unless renewed;
	// zero for the poll transport.
	LockedUntil time.Time
	// Redelivered: the broker delivered this message before (its lock
	// lapsed or it was abandoned).
	Redelivered bool

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

// LockRenewer is a Receiver whose deliveries hold a broker lock that can be
// extended (the bus transport).
type LockRenewer interface {
	// RenewLock extends d's lock and returns when it now lapses; it fails
	// with bus.ErrLockLost once the lock is gone.
	RenewLock(ctx context.Context, d Delivery) (time.Time, error)
}
