package coord

import (
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
)

// StatsSnapshot is a point-in-time copy of Stats.
type StatsSnapshot = view.CoordinatorStats

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
