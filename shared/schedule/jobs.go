package schedule

import (
	"cmp"
	"slices"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// PreemptionVictim picks the running job that critical may evict, if any
// (API.md, "Cancel and preemption"). Only a critical job preempts, and only
// a job that holds a lease (assigned or building), is not already asked to
// stop (a cancel or another preemption is freeing that seat already) and
// is at least one priority level lower can be evicted, so a critical job
// never evicts another critical one. Among those it picks the one whose
// eviction costs least:
//
//  1. lowest priority first;
//  2. most recently started run first (LeaseAcquiredAt, else the queue
//     time for a job stored before runs were stamped): it has done the
//     least work, and it resumes from its checkpoint anyway;
//  3. ID asc, so the choice never depends on the order of running.
//
// The caller passes the jobs running on factories that could run critical
// (those that failed the hard filter only for want of a seat, SeatBlocked):
// evicting a job from any other factory frees a seat critical cannot use.
func PreemptionVictim(critical *fleet.Job, running []*fleet.Job) (*fleet.Job, bool) {
	if critical == nil || critical.Priority.Rank() != fleet.PriorityCritical.Rank() {
		return nil, false
	}
	ceiling := critical.Priority.Rank()
	var victim *fleet.Job
	for _, j := range running {
		if j == nil || j == critical || j.ID == critical.ID || !j.Stage.Leased() || j.StopRequested() || j.Priority.Rank() >= ceiling {
			continue
		}
		if victim == nil || compareVictims(j, victim) < 0 {
			victim = j
		}
	}
	return victim, victim != nil
}

func compareVictims(a, b *fleet.Job) int {
	if c := cmp.Compare(a.Priority.Rank(), b.Priority.Rank()); c != 0 {
		return c
	}
	if c := startedAt(b).Compare(startedAt(a)); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// startedAt is when the job's current run began.
func startedAt(j *fleet.Job) time.Time {
	if !j.LeaseAcquiredAt.IsZero() {
		return j.LeaseAcquiredAt
	}
	return queuedSince(j)
}

// SeatBlocked returns the factories that fail j's hard filter only for want
// of a free seat: the ones a preemption could make room on.
func SeatBlocked(j *fleet.Job, fs []*fleet.Factory, now time.Time) []*fleet.Factory {
	n := newNeed(j, now)
	var out []*fleet.Factory
	for _, f := range fs {
		if f != nil && n.verdict(f) == seatsFull {
			out = append(out, f)
		}
	}
	return out
}

// RankJobs returns the jobs a polling factory f is eligible for, best first:
// the order in which it should try to claim them. A job is eligible when it
// is queued, due (NotBefore is zero or not after now) and f passes the hard
// filter for it. Eligible jobs rank by:
//
//  1. priority, critical first: priority is a promise to the submitter that
//     no score may overrule;
//  2. total score desc: among equal priorities the starvation term dominates
//     as jobs age, so a job that has waited out StarvationWindow beats a
//     fresh one and nothing starves behind a steady stream of new work;
//  3. queue time asc (QueuedAt, else CreatedAt): first come, first served;
//  4. ID asc, so the answer never depends on the order of jobs.
func RankJobs(f *fleet.Factory, jobs []*fleet.Job, now time.Time, w Weights) []*fleet.Job {
	if f == nil || f.Health == fleet.HealthDown || f.Draining || f.FreeSeats() <= 0 {
		return nil
	}
	out := make([]rankedJob, 0, len(jobs))
	for _, j := range jobs {
		if j == nil || j.Stage != fleet.StageQueued || j.NotBefore.After(now) || !f.Serves(j.ProductID) {
			continue
		}
		n := newNeed(j, now)
		if !n.satisfiedBy(f) || n.cooling(f) != "" {
			continue
		}
		since := queuedSince(j)
		out = append(out, rankedJob{j, j.Priority.Rank(), w.Total(n.terms(f, starvationTerm(now.Sub(since)))), since})
	}
	slices.SortFunc(out, rankedJob.compare)
	js := make([]*fleet.Job, len(out))
	for i, r := range out {
		js[i] = r.j
	}
	return js
}

// rankedJob is a queued job with what RankJobs orders it by.
type rankedJob struct {
	j     *fleet.Job
	rank  int // priority
	total float64
	since time.Time // queue time
}

// compare orders by RankJobs's rules: priority desc, total desc, queue
// time asc, ID asc.
func (a rankedJob) compare(b rankedJob) int {
	if c := cmp.Compare(b.rank, a.rank); c != 0 {
		return c
	}
	if c := cmp.Compare(b.total, a.total); c != 0 {
		return c
	}
	if c := a.since.Compare(b.since); c != 0 {
		return c
	}
	return cmp.Compare(a.j.ID, b.j.ID)
}
