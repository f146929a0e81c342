package coord

import (
	"sync/atomic"
	"time"
)

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
	s := c.k.Counters
	snap := StatsSnapshot{
		CASConflicts:    s.CASConflicts.Load(),
		Claims:          s.Claims.Load(),
		ClaimConflicts:  s.ClaimConflicts.Load(),
		Dispatched:      s.Dispatched.Load(),
		PublishFailed:   s.PublishFailed.Load(),
		DeadLettered:    s.DeadLettered.Load(),
		EventsDeferred:  s.EventsDeferred.Load(),
		EventsRepaired:  s.EventsRepaired.Load(),
		QuietSkips:      s.QuietSkips.Load(),
		DispatchLagMs:   mean(&s.DispatchLagSum, &s.DispatchLagN),
		AcceptLagMs:     mean(&s.AcceptLagSum, &s.AcceptLagN),
		ChangeFeedLagMs: mean(&s.FeedLagSum, &s.FeedLagN),
	}
	if attempts := snap.Claims + snap.ClaimConflicts; attempts > 0 {
		snap.ClaimConflictPct = float64(snap.ClaimConflicts) / float64(attempts)
	}
	return snap
}
