package kernel

import "sync/atomic"

// Counters are the coordinator's own counters, for /fleet/metrics. They count
// what this process saw since it started.
type Counters struct {
	CASConflicts   atomic.Int64
	ClaimConflicts atomic.Int64
	Claims         atomic.Int64
	Dispatched     atomic.Int64
	PublishFailed  atomic.Int64
	DeadLettered   atomic.Int64
	EventsDeferred atomic.Int64
	EventsRepaired atomic.Int64
	QuietSkips     atomic.Int64
	// Lag sums in microseconds and counts: submit -> publish, publish -> accept.
	DispatchLagSum, DispatchLagN atomic.Int64
	AcceptLagSum, AcceptLagN     atomic.Int64
	FeedLagSum, FeedLagN         atomic.Int64
}
