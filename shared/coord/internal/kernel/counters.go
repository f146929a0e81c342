package kernel

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/fleet"
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
	// BumpsSkipped counts ledger bumps the change feed did not write: no
	// sweep had armed the counter at its value (Bump).
	BumpsSkipped atomic.Int64
	// FactoriesPruned counts static factories the prune timer deregistered.
	FactoriesPruned atomic.Int64
	// SeatFeedDecoded and SeatFeedNoted count the job versions the
	// factory list's refreshes read in the jobs change feed: decoded, or
	// taken from the note this process made as it wrote that version.
	SeatFeedDecoded, SeatFeedNoted atomic.Int64
	// UndecodableDocs counts documents a sweep, a claim or a listing
	// skipped because they do not decode (each logged with its container
	// and id); FirstUndecodable and LastUndecodable say when it first
	// happened and which document it was last, for the alert.
	UndecodableDocs  atomic.Int64
	FirstUndecodable atomic.Int64 // unix ns, 0 before any
	LastUndecodable  atomic.Pointer[UndecodableDoc]
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
	// Wake is from the job's creation (the CreatedAt its document
	// carries, stamped just before the submit's write) to dispatch
	// starting on it: the write, the change feed noticing it, the host
	// reading it and invoking the dispatch function, and earlier jobs of
	// the same batch. Taken from the job, it holds whichever instance
	// submitted the job; only a job's first dispatch counts.
	Wake hist.Hist
	// Schedule is choosing the target: the factory list and its seat
	// counts, the admission snapshot and the scorer.
	Schedule hist.Hist
	// Stamp is the job's CAS that records the target (its read included).
	Stamp hist.Hist
	// Publish is handing the dispatch message to the broker.
	Publish hist.Hist
}

// Woken times j's Wake when dispatch starts on it for the first time. j may
// be a head (DecodeJobHead): any field it reads must be among the head's.
func (s *DispatchStages) Woken(j *fleet.Job, now time.Time) {
	if j.DispatchEpoch == 0 && j.Dispatch.At.IsZero() {
		s.Wake.Observe(now.Sub(j.CreatedAt))
	}
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

// UndecodableDoc is a stored document passed over because it does not
// decode.
type UndecodableDoc struct {
	Container, ID string
	Err           string
	At            time.Time
}

// UndecodableAlert is the alert for the stored documents this process
// passed over because they do not decode, while the last was passed over
// within window of now (one repaired or deleted is not met again, and the
// alert clears).
func (s *Counters) UndecodableAlert(now time.Time, window time.Duration) (fleet.Alert, bool) {
	n, last := s.UndecodableDocs.Load(), s.LastUndecodable.Load()
	if n == 0 || last == nil || now.Sub(last.At) >= window {
		return fleet.Alert{}, false
	}
	return fleet.Alert{Kind: fleet.AlertUndecodable, Severity: fleet.SeverityWarning, Subject: last.Container + "/" + last.ID,
		Since: time.Unix(0, s.FirstUndecodable.Load()).UTC(),
		Message: fmt.Sprintf("listings and sweeps passed over a stored document that does not decode %d times since this instance started, "+
			"the last %s/%s at %s (%s): repair or delete it; the log names each", n, last.Container, last.ID, last.At.Format(time.RFC3339), last.Err)}, true
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
		BumpsSkipped:    s.BumpsSkipped.Load(),
		FactoriesPruned: s.FactoriesPruned.Load(),
		SeatFeedDecoded: s.SeatFeedDecoded.Load(),
		SeatFeedNoted:   s.SeatFeedNoted.Load(),
		UndecodableDocs: s.UndecodableDocs.Load(),
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
