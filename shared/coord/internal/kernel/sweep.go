package kernel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// SweepPage is how many jobs a timer sweep's query reads at most per tick
// (the redispatch sweep one page of the queue, the reaper one page each of
// expired leases and of overdue stop requests), so a tick costs the same
// whatever the backlog. Why 256: a tick then routes or reaps at most that
// many jobs, each a CAS (and a publish): a few hundred store operations,
// well under a second on SQLite and a few thousand RU on Cosmos, inside the
// shortest schedule (15 s); and the redispatch sweep still visits a
// 100,000-job queue whole within 391 ticks (about 3 h at its 30 s
// schedule). That sweep is the safety net behind the change feed, which
// routes every new job at once; the reaper's queries name only the jobs
// past a deadline, so a page is every job it has to end unless more than
// 256 expired at once (then the next tick takes the rest: ended jobs
// leave the set).
const SweepPage = 256

// SweepState is what the bounded sweeps keep between ticks.
type SweepState struct {
	// Page is how many jobs a sweep query reads at most; 0 means
	// SweepPage (tests shrink it).
	Page int
	// Redispatch is where the redispatch sweep's next page of the queue
	// starts.
	Redispatch Cursor
}

// PageSize is Page or its default.
func (s *SweepState) PageSize() int {
	if s.Page > 0 {
		return s.Page
	}
	return SweepPage
}

// Cursor is where a sweep that reads one page per tick resumes: the
// continuation of the page it read last, "" for the top. It lives in the
// process: a restarted process starts at the top again, which delays the
// jobs past the first pages by at most one more pass.
type Cursor struct {
	mu   sync.Mutex
	next string
}

// JobPage reads one page of q over the jobs container and decodes it. A
// document that does not decode (written by hand, or by a version whose
// fields this one cannot read) is left out of jobs, logged with its id and
// counted (Counters.UndecodableDocs): it must not stall every sweep at its
// page, leaving the jobs beside and after it unswept. skipped is how many
// were left out: a decision that no job matched must count them as jobs
// (present, of unknown content), never conclude from len(jobs) alone.
func (c *Kernel) JobPage(ctx context.Context, q store.Query) (jobs []*fleet.Job, next string, skipped int, err error) {
	res, err := c.Store.Query(ctx, store.Jobs, q)
	if err != nil {
		return nil, "", 0, fmt.Errorf("query %s: %w", store.Jobs, err)
	}
	jobs, skipped = c.decodeJobs(ctx, res.Items)
	return jobs, res.Continuation, skipped, nil
}

// decodeJobs decodes items, passing over (Undecodable) those that do not
// decode: the rule JobPage and ScanJobs share.
func (c *Kernel) decodeJobs(ctx context.Context, items []store.Item) (jobs []*fleet.Job, skipped int) {
	jobs = make([]*fleet.Job, 0, len(items))
	for _, it := range items {
		j, err := DecodeJob(it)
		if err != nil {
			c.Undecodable(ctx, store.Jobs, it, err)
			skipped++
			continue
		}
		jobs = append(jobs, j)
	}
	return jobs, skipped
}

// Undecodable logs and counts a document of container that a sweep, a
// claim or a listing passed over because it does not decode. A decision
// that must see every document (a sum, a lookup, a repo's owner) fails
// instead.
func (c *Kernel) Undecodable(ctx context.Context, container string, it store.Item, err error) {
	c.Counters.UndecodableDocs.Add(1)
	now := c.Now()
	c.Counters.FirstUndecodable.CompareAndSwap(0, now.UnixNano())
	c.Counters.LastUndecodable.Store(&UndecodableDoc{Container: container, ID: it.ID, Err: err.Error(), At: now})
	c.Log.ErrorContext(ctx, "document does not decode: skipped", "container", container, "id", it.ID, "partition", it.PartitionKey, "err", err)
}

// ScanJobs drains q over the jobs container as JobPage reads a page: the
// documents that do not decode are skipped, logged and counted in skipped.
// It is for sweeps and for decisions taken job by job (a preemption's
// victim, the dependants to settle, the held jobs to release), which must
// reach every job they can read; a use case that must see every matching
// job (a sum, a lookup) uses QueryJobs.
func (c *Kernel) ScanJobs(ctx context.Context, q store.Query) (jobs []*fleet.Job, skipped int, err error) {
	items, err := c.QueryAll(ctx, store.Jobs, q)
	if err != nil {
		return nil, 0, err
	}
	jobs, skipped = c.decodeJobs(ctx, items)
	return jobs, skipped, nil
}

// NextPage reads the page of the jobs matching where that cur points at,
// across partitions, and moves cur past it: to the top again after the
// last page, so each job is read once per pass whatever the backlog.
// none is true when no document matches at all (the page was read from
// the top, nothing follows, and it held none, not even one JobPage
// skipped): only then may a sweep conclude there is nothing to do.
func (c *Kernel) NextPage(ctx context.Context, cur *Cursor, limit int, where []store.Cond) (jobs []*fleet.Job, none bool, err error) {
	cur.mu.Lock()
	defer cur.mu.Unlock()
	from := cur.next
	jobs, next, skipped, err := c.JobPage(ctx, store.Query{Where: where, Limit: limit, Continuation: from})
	if err != nil {
		// Whatever failed (the store may refuse an old continuation), the
		// next tick starts the pass again from the top.
		cur.next = ""
		return nil, false, err
	}
	cur.next = next
	return jobs, from == "" && next == "" && len(jobs) == 0 && skipped == 0, nil
}

// LeasedStage selects the jobs holding a lease.
var LeasedStage = store.In("stage", string(fleet.StageAssigned), string(fleet.StageBuilding))

// OverdueLeases is what a reaper tick may have to end: a page (limit) of
// leases past their expiry and one of stop requests past their grace,
// across partitions. The jobs the reaper ends leave both, so the next tick
// reads the ones this page did not reach. none is true when no job holds a
// lease at all: time alone expires a lease, so only then may the reaper
// mark itself quiet (ledger.go).
func (c *Kernel) OverdueLeases(ctx context.Context, limit int, grace time.Duration) (overdue []*fleet.Job, none bool, err error) {
	// One stage at a time: a store may have to sort every lease to find
	// the first of two stages (SQLite orders a page by rowid). Any
	// document counts, decoded or not: one the reaper cannot read may
	// stand first before leases that expire with time alone.
	leased := false
	for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageAssigned} {
		held, err := c.Store.Query(ctx, store.Jobs, store.Query{Limit: 1, Where: []store.Cond{store.Eq("stage", string(st))}})
		if err != nil {
			return nil, false, fmt.Errorf("query %s: %w", store.Jobs, err)
		}
		if leased = len(held.Items) > 0; leased {
			break
		}
	}
	if !leased {
		return nil, true, nil
	}
	now, seen := c.Now(), map[string]bool{}
	for _, past := range []store.Cond{store.Before("leaseExpiresAt", now), store.Before("stopRequestedAt", now.Add(-grace))} {
		q := store.Query{Limit: limit, Where: []store.Cond{LeasedStage, past}}
		for found := 0; ; {
			jobs, next, skipped, err := c.JobPage(ctx, q)
			if err != nil {
				return nil, false, err
			}
			for _, j := range jobs {
				if k := j.ProductID + "/" + j.ID; !seen[k] {
					seen[k] = true
					overdue = append(overdue, j)
				}
			}
			// A skipped document stays in the set (nothing can end it), so
			// it takes no place in the page: read on past it, or a page
			// of them would hide the overdue jobs after them for good.
			if found += len(jobs); skipped == 0 || next == "" || found >= limit {
				break
			}
			q.Continuation = next
		}
	}
	return overdue, false, nil
}
