package coord

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/retry"
	"github.com/gigafactory/fleet/shared/schedule"
)

func claimed(j *fleet.Job) *protocol.Claimed {
	return &protocol.Claimed{Job: j, LeaseEpoch: j.LeaseEpoch, LeaseExpiresAt: j.LeaseExpiresAt}
}

// ClaimRequest is a poll claim.
type ClaimRequest struct {
	// Token is the claiming factory's verified token: it names the factory
	// and scopes the products the claim may draw from.
	Token *fleet.Token
	// RequestID, when set, makes the claim safe to retry: a claim with the
	// id of one that already took a lease this factory still holds answers
	// that lease again instead of taking another job. It is the client's
	// (requestId in the body or an Idempotency-Key header).
	RequestID string
}

// Claim is the poll transport: it gives the factory the best queued job it
// is eligible for, or nil when there is none. Racing claimers never both win
// a job: the claim is a CAS, and a loser moves on to its next best job.
func (c *Coordinator) Claim(ctx context.Context, req ClaimRequest) (*protocol.Claimed, error) {
	if req.Token == nil {
		return nil, catalog.ErrUnauthenticated
	}
	if req.RequestID != "" {
		if err := fleet.ValidateName("requestId", req.RequestID); err != nil {
			return nil, err
		}
	}
	factoryID := req.Token.FactoryID
	f, err := c.GetFactory(ctx, factoryID)
	if err != nil {
		return nil, err
	}
	if req.RequestID != "" {
		// A retry whose first try took a lease (and whose answer was lost):
		// the same lease again, so it is not left to expire unused and
		// spend an attempt.
		if cl, err := c.claimedBy(ctx, factoryID, req.Token.Products, req.RequestID); cl != nil || err != nil {
			return cl, err
		}
	}
	// The token is the authority on scope: the factory document says what
	// the factory can do (capabilities, repos, seats), not what it may see.
	f.Products = slices.Clone(req.Token.Products)
	try := func(queued []*fleet.Job) (*protocol.Claimed, error) {
		return c.claimBest(ctx, f, queued, req.RequestID)
	}
	if len(f.Products) == 0 {
		// An unscoped token draws from every product: a cross-partition
		// filter, which has no order to page by, so it reads the queue
		// (past any document that does not decode, as claimPaged does).
		queued, _, err := c.k.ScanJobs(ctx, store.Query{Where: []store.Cond{store.Eq("stage", string(fleet.StageQueued))}})
		if err != nil {
			return nil, err
		}
		return try(queued)
	}
	return c.claimPaged(ctx, f.Products, try)
}

// claimPage is how many queued jobs of one priority of one product a poll
// claim reads at a time.
const claimPage = 32

// claimPaged offers try the queue a bounded page at a time, so a claim's
// cost does not grow with the queue: priorities from the highest down (the
// ranking puts every job of a higher priority first anyway), and within
// one, each product's oldest jobs first (a partition lists in id order, and
// ids are time-ordered). The next page of a priority is read only when
// nothing on the pages before could be claimed (none eligible for this
// factory, backing off, or lost to racing claimers), so no claimable job is
// ever passed over; the ranking (fit, load, starvation) orders each page.
//
// No job starves behind the page: within a priority, the jobs past it are
// younger than every job on it, so each job reaches the first page once
// the older ones ahead of it are taken, as the starvation term would have
// it anyway; across priorities the order is the ranking's, as before.
func (c *Coordinator) claimPaged(ctx context.Context, products []string, try func([]*fleet.Job) (*protocol.Claimed, error)) (*protocol.Claimed, error) {
	for _, prio := range fleet.PrioritiesHighestFirst() {
		conts := make(map[string]string, len(products))
		open := slices.Clone(products)
		for len(open) > 0 {
			var page []*fleet.Job
			var next []string
			for _, p := range open {
				jobs, cont, _, err := c.k.JobPage(ctx, store.Query{PartitionKey: p, Limit: claimPage, Continuation: conts[p],
					Where: []store.Cond{store.Eq("stage", string(fleet.StageQueued)), store.Eq("priority", string(prio))}})
				if err != nil {
					return nil, err
				}
				page = append(page, jobs...)
				if cont != "" {
					conts[p] = cont
					next = append(next, p)
				}
			}
			if cl, err := try(page); cl != nil || err != nil {
				return cl, err
			}
			open = next
		}
	}
	return nil, nil
}

// claimBest takes the best of queued that factory f may claim, or nil
// when every one is ineligible, backing off or lost to a racing claimer.
func (c *Coordinator) claimBest(ctx context.Context, f *fleet.Factory, queued []*fleet.Job, requestID string) (*protocol.Claimed, error) {
	factoryID := f.ID
	// Admission reads each product's budget and seats once per claim to
	// pass over the jobs they hold back, and re-checks when it admits.
	pass := c.admission.Pass()
	for _, j := range claimOrder(schedule.RankJobs(f, queued, c.k.Now(), c.cfg.Weights)) {
		held, err := pass.Held(ctx, j)
		if err != nil {
			return nil, err
		}
		if held {
			continue
		}
		a, err := pass.Admit(ctx, j)
		if err != nil {
			return nil, err
		}
		if a == nil {
			continue // held after all, or another claim of j is landing
		}
		after, err := c.transition(ctx, move{pk: j.ProductID, id: j.ID, to: fleet.StageAssigned, actor: fleet.ActorFactory, actorID: factoryID,
			event: fleet.EventClaimed, message: "claimed (poll)",
			guard: func(j *fleet.Job) error {
				if j.Stage != fleet.StageQueued {
					return fleet.Errorf(fleet.CodeConflict, "job %s was taken", j.ID)
				}
				if j.NotBefore.After(c.k.Now()) {
					return fleet.Errorf(fleet.CodeConflict, "job %s is backing off", j.ID)
				}
				return a.Fence(j)
			},
			effect: func(_, j *fleet.Job) {
				j.ClaimRequestID = requestID
				a.Record(j)
			}})
		if err == nil {
			c.k.Counters.Claims.Add(1)
			return claimed(after), nil
		}
		c.admission.GiveBack(ctx, a)
		if !errors.Is(err, fleet.ErrConflict) {
			return nil, err
		}
		c.k.Counters.ClaimConflicts.Add(1)
	}
	return nil, nil
}

// claimedBy finds the lease factoryID took with the claim requestID and
// still holds, or nil. It looks only where the claim could have drawn
// from: the products' partitions, or every one for an unscoped token.
func (c *Coordinator) claimedBy(ctx context.Context, factoryID string, products []string, requestID string) (*protocol.Claimed, error) {
	where := []store.Cond{store.Eq("holderFactoryId", factoryID), store.Eq("claimRequestId", requestID)}
	partitions := products
	if len(partitions) == 0 {
		partitions = []string{""} // one cross-partition query
	}
	var held []*fleet.Job
	for _, p := range partitions {
		js, _, err := c.k.ScanJobs(ctx, store.Query{PartitionKey: p, Where: where})
		if err != nil {
			return nil, err
		}
		held = append(held, js...)
	}
	for _, j := range held {
		if j.Stage.Leased() && j.HolderFactoryID == factoryID && j.ClaimRequestID == requestID {
			return claimed(j), nil
		}
	}
	return nil, nil
}

// claimSpread is how many of the best jobs of the top priority a poller may
// start from. Pollers see the same queue and rank it the same way; all
// starting at the best job would make every claim but one a lost CAS, and
// the losers would march down the ranking in lockstep.
const claimSpread = 8

// claimOrder is the ranking, rotated to start at a random one of the first
// claimSpread jobs of the top priority: each poller still takes one of the
// few best jobs, and concurrent pollers mostly take different ones.
func claimOrder(ranked []*fleet.Job) []*fleet.Job {
	band := 0
	for band < len(ranked) && band < claimSpread && ranked[band].Priority.Rank() == ranked[0].Priority.Rank() {
		band++
	}
	if band <= 1 {
		return ranked
	}
	start := rand.IntN(band)
	return append(ranked[start:band:band], append(ranked[:start:start], ranked[band:]...)...)
}

// Accept is the push transport's claim: the factory a dispatch message
// targeted takes the job, if the message is still current.
func (c *Coordinator) Accept(ctx context.Context, factoryID, productID, jobID string, dispatchEpoch int64) (*protocol.Claimed, error) {
	draining, err := c.catalog.Draining(ctx, factoryID)
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		// Deregistered (through another instance, whose revocation this
		// one's token cache learns within TokenCacheTTL): it gets no new
		// work; the sweep sends the job elsewhere.
		return nil, fleet.Errorf(fleet.CodeConflict, "factory %s is not enrolled: it takes no new jobs", factoryID)
	case err == nil && draining:
		// Dispatched before the drain: refused before anything is
		// reserved, and the sweep sends the job elsewhere.
		return nil, fleet.Errorf(fleet.CodeConflict, "factory %s is draining: it takes no new jobs", factoryID)
	}
	a, err := c.admission.AdmitAccept(ctx, factoryID, productID, jobID, dispatchEpoch)
	if err != nil {
		return nil, err
	}
	after, err := c.transition(ctx, move{pk: productID, id: jobID, to: fleet.StageAssigned, actor: fleet.ActorFactory, actorID: factoryID,
		event: fleet.EventClaimed, message: "accepted dispatch",
		guard: func(j *fleet.Job) error {
			switch {
			case j.Stage != fleet.StageQueued:
				return fleet.Errorf(fleet.CodeConflict, "job %s is %s: someone else has it", j.ID, j.Stage)
			case j.DispatchEpoch != dispatchEpoch:
				return fleet.Errorf(fleet.CodeConflict, "dispatchEpoch %d is stale: job %s is at dispatch %d", dispatchEpoch, j.ID, j.DispatchEpoch)
			case j.TargetFactoryID != factoryID:
				return fleet.Errorf(fleet.CodeConflict, "job %s was dispatched to another factory", j.ID)
			}
			return a.Fence(j)
		},
		effect: func(_, j *fleet.Job) { a.Record(j) }})
	if err != nil {
		c.admission.GiveBack(ctx, a)
		if errors.Is(err, fleet.ErrConflict) {
			c.k.Counters.ClaimConflicts.Add(1)
		}
		return nil, err
	}
	c.k.Counters.Claims.Add(1)
	if !after.Dispatch.At.IsZero() {
		kernel.Observe(&c.k.Counters.AcceptLagSum, &c.k.Counters.AcceptLagN, c.k.Now().Sub(after.Dispatch.At))
	}
	return claimed(after), nil
}

// Renew extends the holder's lease. The answer says whether the holder has
// been asked to stop (cancel or preemption): a factory that missed the
// control message learns of it here.
func (c *Coordinator) Renew(ctx context.Context, factoryID, productID, jobID string, leaseEpoch int64) (protocol.Renewal, error) {
	j, err := c.k.MutateJob(ctx, productID, jobID, func(j *fleet.Job) error {
		if err := j.CheckFence(factoryID, leaseEpoch); err != nil {
			return err
		}
		j.LeaseExpiresAt = c.k.Now().Add(c.cfg.LeaseTTL)
		j.UpdatedAt = c.k.Now()
		return nil
	})
	if err != nil {
		return protocol.Renewal{}, err
	}
	return protocol.Renewal{LeaseExpiresAt: j.LeaseExpiresAt, CancelRequested: j.CancelRequested, PreemptRequested: j.PreemptRequested}, nil
}

// FailRequest is a holder's failure report.
type FailRequest struct {
	LeaseEpoch int64
	Reason     string
	Retryable  bool
	// Kind classifies the failure, when the holder names one.
	Kind fleet.FailureKind
	// Usage is the run's final usage, when the holder knows it.
	Usage *fleet.Usage
	// Engine is what a structured engine said of the run.
	Engine fleet.EngineFacts
	// Cooldowns are added to the holder's (catalog.CoolDown) before the
	// job is given back, so its dispatch already sees them.
	Cooldowns map[string]time.Time
}

// Fail records a failure and frees the lease at once. A terminal failure
// ends in `failed`; a retryable one goes back to `queued` after an
// exponential backoff, or to `dead_letter` when attempts run out. A rate
// limit (kind rate_limited) is the account's, not the job's: it spends no
// attempt and waits no backoff, since the holder reported its cooldown (in
// this failure, or in a heartbeat before it) and the scheduler sends the
// job elsewhere.
func (c *Coordinator) Fail(ctx context.Context, factoryID, productID, jobID string, req FailRequest) (*fleet.Job, error) {
	// The reason is whatever the engine printed. Refusing a report for its
	// text would leave the job leased until expiry and then retry it, so the
	// text is made safe to store instead.
	req.Reason = fleet.SanitizeText(req.Reason, fleet.MaxReasonLen)
	if strings.TrimSpace(req.Reason) == "" {
		req.Reason = "no reason given"
	}
	if err := admission.ValidateReport(req.Usage, "", nil, req.Engine); err != nil {
		return nil, err
	}
	fence := func(j *fleet.Job) error { return j.CheckFence(factoryID, req.LeaseEpoch) }
	if len(req.Cooldowns) > 0 {
		// A refused failure (an unknown job, a stale holder) writes no
		// cooldowns either: the fence is checked before they go in.
		if err := c.k.CheckJob(ctx, productID, jobID, fence); err != nil {
			return nil, err
		}
	}
	if err := c.catalog.CoolDown(ctx, factoryID, req.Cooldowns); err != nil {
		return nil, err
	}
	var report *fleet.RunReport
	if req.Usage != nil || !req.Engine.Equal(fleet.EngineFacts{}) {
		report = &fleet.RunReport{LeaseEpoch: req.LeaseEpoch, EngineFacts: req.Engine}
		if req.Usage != nil {
			report.Usage = *req.Usage
		}
	}
	spends := !req.Retryable || req.Kind.SpendsAttempt()
	// The target stage depends on the attempts stored on the job, so it is
	// decided on the job each CAS attempt reads.
	return c.transition(ctx, move{pk: productID, id: jobID, actor: fleet.ActorFactory, actorID: factoryID,
		event: fleet.EventFailed, message: req.Reason,
		decide: func(j *fleet.Job) fleet.Stage {
			switch {
			case !req.Retryable:
				return fleet.StageFailed
			case !spends:
				return fleet.StageQueued
			}
			return j.RetryStage()
		},
		guard:  fence,
		report: report,
		effect: func(_, j *fleet.Job) {
			now := c.k.Now()
			j.LastFailure = &fleet.Failure{Reason: req.Reason, Kind: req.Kind, Retryable: req.Retryable, FactoryID: factoryID, At: now}
			if spends {
				// A terminal failure spent its attempt too: the job says
				// "1 of 3", not "0 of 3", after its one failed run.
				j.Attempts++
			}
			if req.Retryable && spends {
				j.NotBefore = now.Add(c.backoff(j.Attempts))
			}
		}})
}

// leasedJobs are the jobs holding a lease (assigned or building), of one
// product or, with productID empty, of all (bounded by the seats), less
// those that do not decode, as the seat counts read them (kernel.ScanJobs).
func (c *Coordinator) leasedJobs(ctx context.Context, productID string) ([]*fleet.Job, error) {
	jobs, _, err := c.k.ScanJobs(ctx, store.Query{PartitionKey: productID, Where: []store.Cond{kernel.LeasedStage}})
	return jobs, err
}

// backoff is RetryBackoff × 2^(attempt-1), capped at MaxRetryBackoff.
func (c *Coordinator) backoff(attempt int) time.Duration {
	return retry.Policy{Initial: c.cfg.RetryBackoff, Max: c.cfg.MaxRetryBackoff}.Delay(attempt)
}

// Reap returns every job whose lease expired to the queue with leaseEpoch+1
// (fencing the old holder) and its checkpoint kept. A lost run counts as an
// attempt: a job whose holder dies every time goes to dead_letter once its
// attempts run out instead of taking down factories forever. It returns how
// many jobs it reaped. Jobs asked to stop (cancel, preemption) are ended
// instead once their grace is over or their lease expired (forceStops).
// A tick reads only overdue leases, a page at a time (kernel.OverdueLeases).
//
// Idle, a tick costs one point read: see ledger.go.
func (c *Coordinator) Reap(ctx context.Context) (int, error) {
	skip, view := c.k.Quiet(ctx, kernel.SweepReap)
	if skip {
		return 0, nil
	}
	leased, none, err := c.k.OverdueLeases(ctx, c.sweeps.PageSize(), c.cfg.CancelGrace)
	if err != nil {
		return 0, err
	}
	if none {
		c.k.MarkQuiet(ctx, view)
	}
	// Stop requests past their grace first: a cancelled job whose holder
	// died ends cancelled, not queued again.
	n, err := c.forceStops(ctx, leased)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, j := range leased {
		if !j.LeaseExpired(c.k.Now()) || j.StopRequested() {
			continue
		}
		holder, attempts := j.HolderFactoryID, j.Attempts
		_, err := c.transition(ctx, move{pk: j.ProductID, id: j.ID, actor: fleet.ActorSystem, actorID: "reaper",
			event: fleet.EventLeaseExpired, message: fmt.Sprintf("lease of %s expired", holder),
			decide: (*fleet.Job).RetryStage,
			guard: func(cur *fleet.Job) error {
				if !cur.LeaseExpired(c.k.Now()) {
					return fleet.Errorf(fleet.CodeConflict, "lease of job %s was renewed", cur.ID)
				}
				if cur.StopRequested() {
					// Cancelled or preempted since the read: ending it is
					// forceStops' (a cancel must not be lost to a requeue).
					return fleet.Errorf(fleet.CodeConflict, "job %s was asked to stop", cur.ID)
				}
				if cur.Attempts != attempts {
					// Another reap or failure counted meanwhile: the holder
					// this pass names may be gone; the next pass decides anew.
					return fleet.Errorf(fleet.CodeConflict, "job %s changed", cur.ID)
				}
				return nil
			},
			effect: func(_, j *fleet.Job) {
				j.Attempts++
				j.LastFailure = &fleet.Failure{Reason: "lease expired", Retryable: true, FactoryID: holder, At: c.k.Now()}
			}})
		switch {
		case err == nil:
			n++
		case errors.Is(err, fleet.ErrConflict), errors.Is(err, fleet.ErrNotFound):
		default:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
