package coord

import "github.com/gigafactory/fleet/shared/api/view"

// StatsSnapshot is a point-in-time copy of the process's counters.
type StatsSnapshot = view.CoordinatorStats

// Stats returns a snapshot of the counters.
func (c *Coordinator) Stats() StatsSnapshot { return c.k.Counters.Snapshot() }
