package kernel

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/hist"
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
	// Stages times each stage of the dispatch path (issue 25), so a slow
	// dispatch names its stage.
	Stages DispatchStages
}

// DispatchStages are the dispatch path's stages as this process sees them,
// from a submit's write to the publish of its dispatch message. The
// factory's side (broker to receiver) is measured where it receives.
type DispatchStages struct {
	// Submit is the store write that creates a queued job.
	Submit hist.Hist
	// Wake is from that write's commit to dispatch starting on the job:
	// the change feed noticing the write, the host reading it and
	// invoking the dispatch function, and earlier jobs of the same batch.
	// Only jobs this process created are timed (commits).
	Wake hist.Hist
	// Schedule is choosing the target: the factory list and its seat
	// counts, the admission snapshot and the scorer.
	Schedule hist.Hist
	// Stamp is the job's CAS that records the target (its read included).
	Stamp hist.Hist
	// Publish is handing the dispatch message to the broker.
	Publish hist.Hist

	commits commitTimes
}

// Committed notes that job id was written queued at at, for its Wake.
func (s *DispatchStages) Committed(id string, at time.Time) { s.commits.put(id, at) }

// Woken times job id's Wake when this process committed it, and forgets it.
func (s *DispatchStages) Woken(id string, now time.Time) {
	if at, ok := s.commits.take(id); ok {
		s.Wake.Observe(now.Sub(at))
	}
}

// commitTimes holds the commit times of jobs waiting for the change feed.
// Where the feed runs elsewhere nothing takes them, so it is bounded: when
// full it starts over, losing a few samples rather than growing.
type commitTimes struct {
	mu sync.Mutex
	m  map[string]time.Time
}

const maxCommitTimes = 4096

func (c *commitTimes) put(id string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCommitTimes {
		c.m = make(map[string]time.Time, 64)
	}
	c.m[id] = at
}

func (c *commitTimes) take(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.m[id]
	delete(c.m, id)
	return at, ok
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
	s.Stages.snapshot(&snap)
	if attempts := snap.Claims + snap.ClaimConflicts; attempts > 0 {
		snap.ClaimConflictPct = float64(snap.ClaimConflicts) / float64(attempts)
	}
	return snap
}

// snapshot copies the stages' percentiles into snap, in milliseconds.
func (s *DispatchStages) snapshot(snap *view.CoordinatorStats) {
	for _, st := range []struct {
		h        *hist.Hist
		n        *int64
		p50, p99 *float64
	}{
		{&s.Submit, &snap.StageSubmitN, &snap.StageSubmitP50Ms, &snap.StageSubmitP99Ms},
		{&s.Wake, &snap.StageWakeN, &snap.StageWakeP50Ms, &snap.StageWakeP99Ms},
		{&s.Schedule, &snap.StageScheduleN, &snap.StageScheduleP50Ms, &snap.StageScheduleP99Ms},
		{&s.Stamp, &snap.StageStampN, &snap.StageStampP50Ms, &snap.StageStampP99Ms},
		{&s.Publish, &snap.StagePublishN, &snap.StagePublishP50Ms, &snap.StagePublishP99Ms},
	} {
		sum := st.h.Summary()
		*st.n, *st.p50, *st.p99 = sum.N, sum.P50Ms(), sum.P99Ms()
	}
}
