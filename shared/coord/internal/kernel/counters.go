package kernel

import (
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
)

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
	// FactoriesPruned counts static factories the prune timer deregistered.
	FactoriesPruned atomic.Int64
	// Lag sums in microseconds and counts: submit -> publish, publish -> accept.
	DispatchLagSum, DispatchLagN atomic.Int64
	AcceptLagSum, AcceptLagN     atomic.Int64
	FeedLagSum, FeedLagN         atomic.Int64
}

// Observe adds one duration to a lag's sum (microseconds) and count.
func Observe(sum, n *atomic.Int64, d time.Duration) {
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

// Snapshot is a point-in-time copy of the counters, mean lags in ms.
func (s *Counters) Snapshot() view.CoordinatorStats {
	snap := view.CoordinatorStats{
		CASConflicts:    s.CASConflicts.Load(),
		Claims:          s.Claims.Load(),
		ClaimConflicts:  s.ClaimConflicts.Load(),
		Dispatched:      s.Dispatched.Load(),
		PublishFailed:   s.PublishFailed.Load(),
		DeadLettered:    s.DeadLettered.Load(),
		EventsDeferred:  s.EventsDeferred.Load(),
		EventsRepaired:  s.EventsRepaired.Load(),
		QuietSkips:      s.QuietSkips.Load(),
		FactoriesPruned: s.FactoriesPruned.Load(),
		DispatchLagMs:   mean(&s.DispatchLagSum, &s.DispatchLagN),
		AcceptLagMs:     mean(&s.AcceptLagSum, &s.AcceptLagN),
		ChangeFeedLagMs: mean(&s.FeedLagSum, &s.FeedLagN),
	}
	if attempts := snap.Claims + snap.ClaimConflicts; attempts > 0 {
		snap.ClaimConflictPct = float64(snap.ClaimConflicts) / float64(attempts)
	}
	return snap
}
