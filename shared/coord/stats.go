package coord

import (
	"sync/atomic"
	"time"
)

// Stats are the coordinator's own counters, for /fleet/metrics. They count
// what this process saw since it started.
type Stats struct {
	casConflicts   atomic.Int64
	claimConflicts atomic.Int64
	claims         atomic.Int64
	dispatched     atomic.Int64
	publishFailed  atomic.Int64
	deadLettered   atomic.Int64
	eventsDeferred atomic.Int64
	eventsRepaired atomic.Int64
	quietSkips     atomic.Int64
	// Lag sums in microseconds and counts: submit -> publish, publish -> accept.
	dispatchLagSum, dispatchLagN atomic.Int64
	acceptLagSum, acceptLagN     atomic.Int64
	feedLagSum, feedLagN         atomic.Int64
}

func newStats() *Stats { return &Stats{} }

// StatsSnapshot is a point-in-time copy of Stats.
type StatsSnapshot struct {
	CASConflicts     int64   `json:"casConflicts"`
	Claims           int64   `json:"claims"`
	ClaimConflicts   int64   `json:"claimConflicts"`
	ClaimConflictPct float64 `json:"claimConflictRate"`
	Dispatched       int64   `json:"dispatched"`
	PublishFailed    int64   `json:"publishFailed"`
	DeadLettered     int64   `json:"deadLettered"`
	// EventsDeferred counts events whose write right after their job's
	// change failed: the job holds them until a repair writes them
	// (EventsRepaired counts those writes, by any repair of this process).
	EventsDeferred int64 `json:"eventsDeferred"`
	EventsRepaired int64 `json:"eventsRepaired"`
	// QuietSkips counts sweep ticks skipped on the ledger's word (one point
	// read each, no query).
	QuietSkips int64 `json:"quietSkips"`
	// Mean lags in milliseconds.
	DispatchLagMs float64 `json:"dispatchLagMs"`
	AcceptLagMs   float64 `json:"acceptLagMs"`
	// ChangeFeedLagMs is the mean time from a job's write to the dispatch
	// function seeing it in the change feed.
	ChangeFeedLagMs float64 `json:"changeFeedLagMs"`
}

func observe(sum, n *atomic.Int64, d time.Duration) {
	if d < 0 {
		d = 0
	}
	sum.Add(d.Microseconds())
	n.Add(1)
}

func mean(sum, n *atomic.Int64) float64 {
	c := n.Load()
	if c == 0 {
		return 0
	}
	return float64(sum.Load()) / float64(c) / 1000
}

// Stats returns a snapshot of the counters.
func (c *Coordinator) Stats() StatsSnapshot {
	s := c.stats
	snap := StatsSnapshot{
		CASConflicts:    s.casConflicts.Load(),
		Claims:          s.claims.Load(),
		ClaimConflicts:  s.claimConflicts.Load(),
		Dispatched:      s.dispatched.Load(),
		PublishFailed:   s.publishFailed.Load(),
		DeadLettered:    s.deadLettered.Load(),
		EventsDeferred:  s.eventsDeferred.Load(),
		EventsRepaired:  s.eventsRepaired.Load(),
		QuietSkips:      s.quietSkips.Load(),
		DispatchLagMs:   mean(&s.dispatchLagSum, &s.dispatchLagN),
		AcceptLagMs:     mean(&s.acceptLagSum, &s.acceptLagN),
		ChangeFeedLagMs: mean(&s.feedLagSum, &s.feedLagN),
	}
	if attempts := snap.Claims + snap.ClaimConflicts; attempts > 0 {
		snap.ClaimConflictPct = float64(snap.ClaimConflicts) / float64(attempts)
	}
	return snap
}
