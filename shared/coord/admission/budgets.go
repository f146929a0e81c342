package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Budgets (API.md, "Budgets"). A product's budget is one document in
// container Budgets: its ceiling and settings, the period's spend and its
// burndown points, and the reservations of the runs admitted and not yet
// settled, keyed by job id.
//
// Admission and the claim are two compare-and-swaps on two documents (the
// store has single-document CAS only), made in this order:
//
//  1. reserve on the budget: spent + reserved + estimate <= ceiling and
//     not paused, and no live reservation for this job, or nothing is
//     written. Racing claimers serialise on the budget's revision, so the
//     last dollars go to one of them; the reservation names the job and
//     the lease epoch the claim is about to take, so two claimers of one
//     job cannot both hold one.
//  2. CAS the job to assigned, guarded on that epoch. If it loses, the
//     reservation is taken back (undo).
//
// A crash between 1 and 2, or between a run's end and its settling, leaves
// a reservation no run will settle. It is keyed by job and epoch, so it is
// reclaimed idempotently: an admission the budget refuses looks at the
// reservations older than the lease TTL (a claim's second CAS is long done
// by then), reads their jobs, and settles every one whose run is over (from
// the usage the run reported) or never started. Settling deletes the
// reservation in the same write that adds the spend, so a reclaim racing
// the run's own settle counts the run once.

// budgetDocs is the budget's document kind for cas.
var budgetDocs = kernel.DocKind[fleet.ProductBudget]{Name: "budget", Container: store.Budgets, SetRev: func(b *fleet.ProductBudget, r string) { b.Rev = r }}

// Budget defaults: the one place they are written.
const (
	DefaultBudgetAlertAt = 0.8
)

// BudgetRequest is an operator's PUT of a product's budget. Nil fields
// take their defaults (period month, alertAt 0.8, autoPause true,
// defaultJobUsd 0); ceilingUsd is required.
type BudgetRequest struct {
	CeilingUSD    *float64
	Period        string
	AlertAt       *float64
	AutoPause     *bool
	DefaultJobUSD *float64
}

// BudgetView is a budget as GET answers it.
type BudgetView = view.Budget

// Burndown is the period's spend over time and where it is heading.
type Burndown = view.Burndown

func viewOf(b *fleet.ProductBudget) *BudgetView {
	return &BudgetView{
		ProductID: b.ProductID, CeilingUSD: b.CeilingUSD, Period: b.Period, PeriodStart: b.PeriodStart,
		SpentUSD: b.SpentUSD, ReservedUSD: b.ReservedUSD(), RemainingUSD: b.RemainingUSD(),
		Paused: b.Paused, PausedReason: b.PausedReason, PauseMessage: b.PauseMessage,
		AlertAt: b.AlertAt, AutoPause: b.AutoPause, DefaultJobUSD: b.DefaultJobUSD, UpdatedAt: b.UpdatedAt,
	}
}

func positiveUSD(field string, v float64, allowZero bool) error {
	if v == 0 && !allowZero || v < 0 {
		return fleet.Invalid(field, "must be a positive number of USD, got %v", v)
	}
	return fleet.ValidateUSD(field, v)
}

// PutBudget sets a product's budget. A new budget starts its period now
// (month: the current calendar month); changing an existing one keeps its
// spend, reservations and pause, and a change of period starts the new
// kind of period now. A change that may make room lets held jobs flow at once.
func (c *Service) PutBudget(ctx context.Context, productID string, req BudgetRequest) (*BudgetView, error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, err
	}
	if req.CeilingUSD == nil {
		return nil, fleet.Invalid("ceilingUsd", "is required: the most the product may spend per period, in USD")
	}
	if err := positiveUSD("ceilingUsd", *req.CeilingUSD, false); err != nil {
		return nil, err
	}
	period, err := fleet.ParseBudgetPeriod("period", req.Period)
	if err != nil {
		return nil, err
	}
	alertAt := DefaultBudgetAlertAt
	if req.AlertAt != nil {
		alertAt = *req.AlertAt
		if math.IsNaN(alertAt) || alertAt <= 0 || alertAt > 1 {
			return nil, fleet.Invalid("alertAt", "must be a fraction of the ceiling in (0, 1], got %v", alertAt)
		}
	}
	autoPause := true
	if req.AutoPause != nil {
		autoPause = *req.AutoPause
	}
	var defaultJob float64
	if req.DefaultJobUSD != nil {
		defaultJob = *req.DefaultJobUSD
		if err := positiveUSD("defaultJobUsd", defaultJob, true); err != nil {
			return nil, err
		}
	}
	if _, err := c.catalog.GetProduct(ctx, productID); err != nil {
		return nil, err
	}
	now := c.k.Now()
	apply := func(b *fleet.ProductBudget) {
		if b.Period != period {
			b.Period, b.PeriodStart = period, fleet.PeriodStartAt(period, now, now)
		}
		b.CeilingUSD, b.AlertAt, b.AutoPause, b.DefaultJobUSD, b.UpdatedAt = *req.CeilingUSD, alertAt, autoPause, defaultJob, now
	}
	id := fleet.BudgetID(productID)
	// From here on the product may have a budget: admission reads it.
	defer c.unbudgeted.drop(productID)
	b, _, err := kernel.CAS(ctx, c.k, budgetDocs, productID, id, func(b *fleet.ProductBudget) error {
		b.Roll(now)
		apply(b)
		return nil
	})
	if errors.Is(err, fleet.ErrNotFound) {
		b = &fleet.ProductBudget{ID: id, ProductID: productID, Reservations: map[string]fleet.Reservation{},
			Points: []fleet.BurnPoint{}, CreatedAt: now}
		apply(b)
		seeded, serr := c.seedSpend(ctx, b)
		if serr != nil {
			return nil, serr
		}
		body, merr := json.Marshal(b)
		if merr != nil {
			return nil, fmt.Errorf("encode budget: %w", merr)
		}
		rev, cerr := c.k.Store.Create(ctx, store.Budgets, productID, id, body)
		if errors.Is(cerr, store.ErrExists) {
			// A racing first PUT: apply this one over it.
			return c.PutBudget(ctx, productID, req)
		}
		if cerr != nil {
			return nil, fmt.Errorf("create budget %s: %w", productID, cerr)
		}
		b.Rev, err = rev, nil
		if late := c.endedSince(ctx, b, seeded); late > 0 {
			counted, _, lerr := c.mutateBudget(ctx, productID, func(b *fleet.ProductBudget) error {
				b.Spend(late, c.k.Now())
				return nil
			})
			if lerr != nil {
				c.k.Log.ErrorContext(ctx, "count runs ended while the budget was created", "product", productID, "usd", late, "err", lerr)
			} else {
				b = counted
			}
		}
	}
	if err != nil {
		return nil, err
	}
	c.ReleaseHeld(context.WithoutCancel(ctx), productID)
	return viewOf(b), nil
}

// seedSpend counts into a new budget what the product's runs spent in its
// period before the budget existed (a monthly budget set on the 20th
// starts from the month's spend, and its burndown shows it): they ended
// without a reservation, so no settle would count them. It returns the
// runs it read (endedSince skips them). Two queries bounded by the period,
// once per budget.
func (c *Service) seedSpend(ctx context.Context, b *fleet.ProductBudget) (map[string]fleet.Run, error) {
	runs, err := c.periodRuns(ctx, b)
	if err != nil {
		return nil, err
	}
	spent := slices.SortedFunc(maps.Values(runs), func(x, y fleet.Run) int { return x.EndedAt.Compare(y.EndedAt) })
	for _, r := range spent {
		if spentIn(r, b) {
			b.AddSpend(r.Usage.USD, r.EndedAt)
		}
	}
	b.PauseIfSpent(c.k.Now())
	return runs, nil
}

// endedSince is what the runs of b's product that ended in its period
// spent, past the runs seeded (what seedSpend read). Called once the new
// budget exists, it finds the runs that ended between the seed's read and
// the budget's creation: their ends found no budget (spendUnreserved),
// and the seed did not see them, so nothing else counts them. One whose
// end found the budget already is counted twice: over, never under. A
// failed read is logged (as is a failed write of what it found): the
// budget then stands as seeded.
func (c *Service) endedSince(ctx context.Context, b *fleet.ProductBudget, seeded map[string]fleet.Run) float64 {
	runs, err := c.periodRuns(ctx, b)
	if err != nil {
		c.k.Log.ErrorContext(ctx, "count runs ended while the budget was created", "product", b.ProductID, "err", err)
		return 0
	}
	var usd float64
	for id, r := range runs {
		if _, ok := seeded[id]; !ok && spentIn(r, b) {
			usd += r.Usage.USD
		}
	}
	return usd
}

// spentIn says whether run r spent something in b's current period.
func spentIn(r fleet.Run, b *fleet.ProductBudget) bool {
	return r.Usage.USD > 0 && !r.EndedAt.IsZero() && !r.EndedAt.Before(b.PeriodStart)
}

// periodRuns reads the runs of b's product that may have ended in its
// period: a run's end updates its job, so the jobs updated in the period
// hold those runs (the latest fleet.RunsKept of each; older ones are
// archived in the runs container, read too).
func (c *Service) periodRuns(ctx context.Context, b *fleet.ProductBudget) (map[string]fleet.Run, error) {
	since := store.Since("updatedAt", b.PeriodStart)
	jobs, err := c.k.QueryJobs(ctx, store.Query{PartitionKey: b.ProductID, Where: []store.Cond{since}})
	if err != nil {
		return nil, fmt.Errorf("jobs of %s before its budget: %w", b.ProductID, err)
	}
	runs := map[string]fleet.Run{}
	for _, j := range jobs {
		for _, r := range j.Runs {
			runs[r.ID] = r
		}
	}
	archived, err := c.k.QueryAll(ctx, store.Runs, store.Query{Where: []store.Cond{
		store.Eq("productId", b.ProductID), store.Since("endedAt", b.PeriodStart)}})
	if err != nil {
		return nil, fmt.Errorf("runs of %s before its budget: %w", b.ProductID, err)
	}
	for _, it := range archived {
		var r fleet.Run
		if err := json.Unmarshal(it.Body, &r); err != nil {
			return nil, fmt.Errorf("stored run %s: %w", it.ID, err)
		}
		runs[r.ID] = r
	}
	return runs, nil
}

// budgetOf reads a product's budget as of now (rolled into the current
// period, not written); nil when the product has none.
func (c *Service) budgetOf(ctx context.Context, productID string) (*fleet.ProductBudget, error) {
	if c.unbudgeted.known(productID, c.k.Now()) {
		return nil, nil
	}
	return c.storedBudget(ctx, productID)
}

// storedBudget is budgetOf read from the store whatever the cache says.
func (c *Service) storedBudget(ctx context.Context, productID string) (*fleet.ProductBudget, error) {
	gen := c.unbudgeted.generation()
	b, _, err := kernel.ReadDoc[fleet.ProductBudget](ctx, c.k.Store, store.Budgets, productID, fleet.BudgetID(productID), "budget")
	if errors.Is(err, fleet.ErrNotFound) {
		c.unbudgeted.note(productID, c.k.Now(), gen)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b.Roll(c.k.Now())
	return b, nil
}

// readBudget is budgetOf where a missing budget is not_found.
func (c *Service) readBudget(ctx context.Context, productID string) (*fleet.ProductBudget, error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, err
	}
	// What an operator reads is the stored budget, never the cache's.
	b, err := c.storedBudget(ctx, productID)
	if err == nil && b == nil {
		err = kernel.NotFound("budget of product", productID)
	}
	return b, err
}

// GetBudget returns a product's budget.
func (c *Service) GetBudget(ctx context.Context, productID string) (*BudgetView, error) {
	b, err := c.readBudget(ctx, productID)
	if err != nil {
		return nil, err
	}
	return viewOf(b), nil
}

// GetBurndown returns the period's burndown and its forecast.
func (c *Service) GetBurndown(ctx context.Context, productID string) (*Burndown, error) {
	b, err := c.readBudget(ctx, productID)
	if err != nil {
		return nil, err
	}
	points := b.Points
	if points == nil {
		points = []fleet.BurnPoint{}
	}
	return &Burndown{ProductID: productID, CeilingUSD: b.CeilingUSD, PeriodStart: b.PeriodStart,
		Points: points, ForecastExhaustedAt: b.ForecastExhaustedAt()}, nil
}

// mutateBudget applies fn to the product's budget, rolled into the
// current period first.
func (c *Service) mutateBudget(ctx context.Context, productID string, fn func(b *fleet.ProductBudget) error) (*fleet.ProductBudget, bool, error) {
	// Whatever it finds, the product is not known to lack a budget any
	// more (PutBudget creates one through here).
	c.unbudgeted.drop(productID)
	return kernel.CAS(ctx, c.k, budgetDocs, productID, fleet.BudgetID(productID), func(b *fleet.ProductBudget) error {
		rolled := b.Roll(c.k.Now())
		err := fn(b)
		if errors.Is(err, kernel.ErrNoChange) && rolled {
			return nil
		}
		return err
	})
}

// PauseBudget stops assignments for the product until it is resumed.
// Running jobs finish.
func (c *Service) PauseBudget(ctx context.Context, productID, reason string) (*BudgetView, error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, err
	}
	if err := fleet.ValidateText("reason", reason, 2000); err != nil {
		return nil, err
	}
	b, _, err := c.mutateBudget(ctx, productID, func(b *fleet.ProductBudget) error {
		if b.Paused && b.PausedReason != nil && *b.PausedReason == fleet.PausedOperator && b.PauseMessage == reason {
			return kernel.ErrNoChange
		}
		b.Pause(fleet.PausedOperator, reason, c.k.Now())
		return nil
	})
	if err != nil {
		return nil, budgetError(productID, err)
	}
	return viewOf(b), nil
}

// ResumeBudget lifts a pause (the operator's, or spend's) and lets the jobs
// it held flow at once: poll factories see the queue state move, and push
// factories get the jobs dispatched now, not at the next sweep. Admission
// still applies: with spend at the ceiling, jobs stay held (raise the
// ceiling first).
func (c *Service) ResumeBudget(ctx context.Context, productID string) (*BudgetView, error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, err
	}
	b, _, err := c.mutateBudget(ctx, productID, func(b *fleet.ProductBudget) error {
		if !b.Paused {
			return kernel.ErrNoChange
		}
		b.Unpause()
		b.UpdatedAt = c.k.Now()
		return nil
	})
	if err != nil {
		return nil, budgetError(productID, err)
	}
	c.ReleaseHeld(context.WithoutCancel(ctx), productID)
	return viewOf(b), nil
}

// budgetError names a missing budget as such.
func budgetError(productID string, err error) error {
	if errors.Is(err, fleet.ErrNotFound) {
		return kernel.NotFound("budget of product", productID)
	}
	return err
}

// ReleaseHeld lets jobs a budget or seat cap held flow now: poll factories
// are told the queue changed, and every queued job of the product without a
// dispatch is routed again (dispatch applies admission, so the ones still
// held stay).
func (c *Service) ReleaseHeld(ctx context.Context, productID string) {
	c.catalog.BumpQueueState(ctx, productID)
	if !c.push {
		return
	}
	waiting, _, err := c.k.ScanJobs(ctx, store.Query{PartitionKey: productID,
		Where: []store.Cond{store.Eq("stage", string(fleet.StageQueued)), store.Eq("targetFactoryId", "")}})
	if err != nil {
		c.k.Log.ErrorContext(ctx, "release budget-held jobs", "product", productID, "err", err)
		return
	}
	for _, j := range waiting {
		if err := c.life.DispatchQueued(ctx, j.ProductID, j.ID); err != nil {
			c.k.Log.ErrorContext(ctx, "dispatch budget-held job", "job", j.ID, "err", err)
		}
	}
}

// heldError is an admission the budget refused.
type heldError struct{ hold fleet.Hold }

func (e *heldError) Error() string { return e.hold.Message }

// reservation is an estimate reserve took for one claim.
type reservation struct {
	productID, jobID string
	epoch            int64
}

// errReservedElsewhere: another claimer holds the job's reservation for
// the same epoch (it is claiming the job right now).
var errReservedElsewhere = errors.New("job reserved by another claim")

// reserve is step 1 of an assignment of j (see the top of this file): nil
// and no error when the product has no budget; a *heldError when admission
// refuses; errReservedElsewhere when another claim of j holds it.
func (c *Service) reserve(ctx context.Context, j *fleet.Job) (*reservation, error) {
	b, err := c.budgetOf(ctx, j.ProductID)
	if err != nil || b == nil {
		return nil, err
	}
	epoch := j.LeaseEpoch + 1
	if r, ok := b.Reservations[j.ID]; ok && r.LeaseEpoch != epoch {
		// A reservation of an earlier run of this job: that run is over
		// (the job is queued again), so it is settled first.
		c.reclaim(ctx, j.ProductID, func(id string, _ fleet.Reservation) bool { return id == j.ID })
	}
	res := &reservation{productID: j.ProductID, jobID: j.ID, epoch: epoch}
	for try := 0; ; try++ {
		_, _, err = c.mutateBudget(ctx, j.ProductID, func(b *fleet.ProductBudget) error {
			if r, ok := b.Reservations[j.ID]; ok {
				if r.LeaseEpoch == epoch {
					return errReservedElsewhere
				}
				return fleet.Errorf(fleet.CodeConflict, "job %s has an unsettled reservation of run %d", j.ID, r.LeaseEpoch)
			}
			if h := b.Reserve(j.ID, epoch, b.Estimate(j.Budget), c.k.Now()); h != nil {
				return &heldError{hold: *h}
			}
			return nil
		})
		var held *heldError
		if try == 0 && errors.As(err, &held) && held.hold.Kind == fleet.HoldCeiling {
			// Full: a reservation a crash left behind may be what fills it.
			if c.reclaim(ctx, j.ProductID, c.suspect) > 0 {
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		return res, nil
	}
}

// claimBudget is one product's budget as a claim pre-filters its jobs by:
// read once per claim, and reclaimed at most once.
type claimBudget struct {
	b         *fleet.ProductBudget
	reclaimed bool
}

// budgetFor is j's product budget as a claim pre-filters its jobs by
// (views caches each product's for the claim). When j does not fit under
// the ceiling, reservations a crash left behind are reclaimed first (once
// per claim), so they cannot keep it held: not only when the budget is
// full, since a leaked reservation that leaves less room than any queued
// job's estimate holds them all back just the same.
func (c *Service) budgetFor(ctx context.Context, views map[string]*claimBudget, j *fleet.Job) (*fleet.ProductBudget, error) {
	v, ok := views[j.ProductID]
	if !ok {
		b, err := c.budgetOf(ctx, j.ProductID)
		if err != nil {
			return nil, err
		}
		v = &claimBudget{b: b}
		views[j.ProductID] = v
	}
	h := budgetHold(v.b, j)
	if h == nil || h.Kind != fleet.HoldCeiling || v.reclaimed {
		return v.b, nil
	}
	v.reclaimed = true
	if c.reclaim(ctx, j.ProductID, c.suspect) == 0 {
		return v.b, nil
	}
	b, err := c.budgetOf(ctx, j.ProductID)
	if err != nil {
		return nil, err
	}
	v.b = b
	return b, nil
}

// ReclaimHeld is admission's reclaim for the push transport: dispatch
// sends no held job, so no accept would ever meet the leaked reservation
// or seat that holds it; the redispatch sweep reclaims, once per product
// and kind of hold, for the queued jobs their budget or seat cap holds
// back, before routing them again. A seat no run frees is not only a
// crash's: a cap set while runs went counts them (catalog's seatsFor), and
// those runs, admitted uncapped, free nothing when they end.
func (c *Service) ReclaimHeld(ctx context.Context, queued []*fleet.Job) {
	type hold struct {
		productID string
		kind      fleet.UnroutableKind
	}
	done := map[hold]bool{}
	for _, j := range queued {
		h := hold{j.ProductID, j.Dispatch.UnroutableKind}
		if done[h] {
			continue
		}
		switch h.kind {
		case fleet.UnroutableBudget:
			c.reclaim(ctx, j.ProductID, c.suspect)
		case fleet.UnroutableSeatCap:
			c.reclaimSeats(ctx, j.ProductID, c.staleSeat)
		default:
			continue
		}
		done[h] = true
	}
}

// suspect selects reservations old enough that their claim's job CAS is
// long over: only those may be reclaimed while their job is still queued.
func (c *Service) suspect(_ string, r fleet.Reservation) bool {
	return c.k.Now().Sub(r.At) >= c.leaseTTL
}

// undo takes back a reservation whose claim lost its job CAS.
func (c *Service) undo(ctx context.Context, res *reservation) {
	if res == nil {
		return
	}
	_, _, err := c.mutateBudget(context.WithoutCancel(ctx), res.productID, func(b *fleet.ProductBudget) error {
		if r, ok := b.Reservations[res.jobID]; !ok || r.LeaseEpoch != res.epoch {
			return kernel.ErrNoChange
		}
		delete(b.Reservations, res.jobID)
		b.UpdatedAt = c.k.Now()
		return nil
	})
	if err != nil {
		// Left behind, it is reclaimed once it is older than the lease TTL.
		c.k.Log.WarnContext(ctx, "take back a budget reservation", "job", res.jobID, "err", err)
	}
}

// fenceReservation is the claim's guard for step 2: the job must still be
// at the epoch the reservation was made for.
func fenceReservation(res *reservation, j *fleet.Job) error {
	if res != nil && j.LeaseEpoch+1 != res.epoch {
		return fleet.Errorf(fleet.CodeConflict, "job %s moved to lease epoch %d since its budget was reserved", j.ID, j.LeaseEpoch)
	}
	return nil
}

// reclaim settles the reservations pick selects whose run is over or never
// started, each from the usage its run reported. It returns how many it
// settled.
func (c *Service) reclaim(ctx context.Context, productID string, pick func(jobID string, r fleet.Reservation) bool) int {
	b, err := c.budgetOf(ctx, productID)
	if err != nil || b == nil {
		return 0
	}
	type settle struct {
		epoch int64
		usd   float64
	}
	done := map[string]settle{}
	for id, r := range b.Reservations {
		if !pick(id, r) {
			continue
		}
		j, over := c.runOver(ctx, productID, id, r.LeaseEpoch, r.At)
		if !over {
			continue
		}
		s := settle{epoch: r.LeaseEpoch}
		if j != nil {
			s.usd = c.runUSD(ctx, j, r.LeaseEpoch)
		}
		done[id] = s
	}
	if len(done) == 0 {
		return 0
	}
	n := 0
	_, _, err = c.mutateBudget(ctx, productID, func(b *fleet.ProductBudget) error {
		n = 0
		for id, s := range done {
			if b.Settle(id, s.epoch, s.usd, c.k.Now()) {
				n++
			}
		}
		if n == 0 {
			return kernel.ErrNoChange
		}
		return nil
	})
	if err != nil {
		c.k.Log.WarnContext(ctx, "reclaim budget reservations", "product", productID, "err", err)
		return 0
	}
	c.k.Log.InfoContext(ctx, "reclaimed budget reservations left by a crash", "product", productID, "count", n)
	return n
}

// runUSD is what the run of j at epoch reported: from the job's ended
// runs, its runs document, or the job's report.
func (c *Service) runUSD(ctx context.Context, j *fleet.Job, epoch int64) float64 {
	if run, ok := j.RunAt(epoch); ok {
		return run.Usage.USD
	}
	run, _, err := kernel.ReadDoc[fleet.Run](ctx, c.k.Store, store.Runs, j.ID, fleet.RunID(j.ID, epoch), "run")
	if err == nil {
		return run.Usage.USD
	}
	if r := j.ReportFor(epoch); r != nil {
		return r.Usage.USD
	}
	return 0
}

// settleRun settles the budget reservation of the run before's lease held,
// from the usage it reported; it reports whether it did (then jobs the
// reservation held back may flow: see endAdmission).
func (c *Service) settleRun(ctx context.Context, before *fleet.Job) bool {
	var usd float64
	if r := before.ReportFor(before.LeaseEpoch); r != nil {
		usd = r.Usage.USD
	}
	_, written, err := c.mutateBudget(ctx, before.ProductID, func(b *fleet.ProductBudget) error {
		if !b.Settle(before.ID, before.LeaseEpoch, usd, c.k.Now()) {
			return kernel.ErrNoChange
		}
		return nil
	})
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return false
	case err != nil:
		// Left behind, it is reclaimed once it is older than the lease TTL.
		c.k.Log.ErrorContext(ctx, "settle budget reservation", "job", before.ID, "epoch", before.LeaseEpoch, "err", err)
		return false
	}
	return written
}

// spendUnreserved counts into its product's budget the spend of a run
// that reserved nothing: one admitted before the budget existed, or by an
// instance that still took the product to have none (Config.CacheTTL).
// seedSpend counts only the runs ended before a budget is created, so
// without this such a run's spend would never count. It makes no room, so
// no held job flows. A run ending while its budget is being created may
// be counted by both (the seed read it ended): over, never under.
//
// It reads the stored budget, never the note that the product has none:
// a budget created through another instance within CacheTTL of that note
// was seeded before this run ended, so a run that trusted the note would
// never count. That costs a budgetless run's end one point read, only
// when it spent something.
func (c *Service) spendUnreserved(ctx context.Context, before *fleet.Job) {
	r := before.ReportFor(before.LeaseEpoch)
	if r == nil || r.Usage.USD <= 0 {
		return
	}
	b, err := c.storedBudget(ctx, before.ProductID)
	if err != nil || b == nil {
		if err != nil {
			c.k.Log.ErrorContext(ctx, "count unreserved spend", "job", before.ID, "err", err)
		}
		return
	}
	_, _, err = c.mutateBudget(ctx, before.ProductID, func(b *fleet.ProductBudget) error {
		b.Spend(r.Usage.USD, c.k.Now())
		return nil
	})
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		c.k.Log.ErrorContext(ctx, "count unreserved spend", "job", before.ID, "epoch", before.LeaseEpoch, "err", err)
	}
}

// growReservation raises the reservation of a run whose reported usage
// passed it, so admission counts what the run has spent so far.
func (c *Service) growReservation(ctx context.Context, productID, jobID string, epoch int64, usd float64) {
	_, _, err := c.mutateBudget(ctx, productID, func(b *fleet.ProductBudget) error {
		r, ok := b.Reservations[jobID]
		if !ok || r.LeaseEpoch != epoch || r.USD >= usd {
			return kernel.ErrNoChange
		}
		r.USD = usd
		b.Reservations[jobID] = r
		b.UpdatedAt = c.k.Now()
		return nil
	})
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		c.k.Log.WarnContext(ctx, "grow budget reservation", "job", jobID, "err", err)
	}
}

// budgetHold says whether j's product budget holds it back now (without
// reserving): nil when it may be assigned or the product has no budget.
func budgetHold(b *fleet.ProductBudget, j *fleet.Job) *fleet.Hold {
	if b == nil {
		return nil
	}
	return b.Admit(b.Estimate(j.Budget))
}

// CheckJobBudget is submit's rule: a job whose own budget.usd exceeds its
// product's ceiling can never be admitted, so it is refused (422).
func (c *Service) CheckJobBudget(ctx context.Context, productID string, job fleet.Budget) error {
	if job.USD <= 0 {
		return nil
	}
	b, err := c.budgetOf(ctx, productID)
	if err != nil || b == nil {
		return err
	}
	if job.USD > b.CeilingUSD {
		return &fleet.Error{Code: fleet.CodeBudgetExceeded, Field: "budget.usd", Message: fmt.Sprintf(
			"the job's budget of %.2f USD exceeds product %s's ceiling of %.2f USD per %s; it could never run", job.USD, productID, b.CeilingUSD, b.Period)}
	}
	return nil
}

// Alerts are the budget_alert and budget_paused alerts of the
// products' budgets (every product's when productID is empty).
func (c *Service) Alerts(ctx context.Context, productID string) ([]fleet.Alert, error) {
	items, err := c.k.QueryAll(ctx, store.Budgets, store.Query{PartitionKey: productID})
	if err != nil {
		return nil, err
	}
	var out []fleet.Alert
	for _, it := range items {
		b, err := kernel.Decode[fleet.ProductBudget](it)
		if err != nil {
			c.k.Undecodable(ctx, store.Budgets, it, err)
			continue
		}
		b.Roll(c.k.Now())
		if b.Paused {
			why := fleet.PausedOperator
			if b.PausedReason != nil {
				why = *b.PausedReason
			}
			msg := fmt.Sprintf("product %s is paused (%s); queued jobs wait for resume", b.ProductID, why)
			if b.PauseMessage != "" {
				msg += ": " + b.PauseMessage
			}
			out = append(out, fleet.Alert{Kind: fleet.AlertBudgetPaused, Severity: fleet.SeverityCritical,
				Subject: b.ProductID, Since: b.PausedAt, Message: msg})
		}
		if on, since := b.Alerting(); on {
			out = append(out, fleet.Alert{Kind: fleet.AlertBudgetAlert, Severity: fleet.SeverityWarning, Subject: b.ProductID, Since: since,
				Message: fmt.Sprintf("product %s spent %.2f of its %.2f USD ceiling this period (alert at %.0f%%)",
					b.ProductID, b.SpentUSD, b.CeilingUSD, b.AlertAt*100)})
		}
	}
	return out, nil
}

// AdmitAccept is admission for the push transport: the reservation and
// seat an accept takes before its CAS. A job its budget or seat cap holds
// back loses its dispatch (the message is void: 409) and waits, its reason
// recorded, until room is made and ReleaseHeld routes it again.
func (c *Service) AdmitAccept(ctx context.Context, factoryID, productID, jobID string, dispatchEpoch int64) (*Grant, error) {
	current := func(j *fleet.Job) bool {
		return j.Stage == fleet.StageQueued && j.DispatchEpoch == dispatchEpoch && j.TargetFactoryID == factoryID
	}
	// The copy this process dispatched from, usually: a stale one that
	// still looks current only costs a reservation given back when the
	// job's CAS refuses; one that looks stale is checked on the stored job.
	j, cached, err := c.k.PeekJob(ctx, productID, jobID)
	if err == nil && cached && !current(j) {
		j, err = c.k.GetJob(ctx, productID, jobID)
	}
	if err != nil {
		return nil, err
	}
	if !current(j) {
		// A stale accept: the job's CAS refuses it, and nothing is reserved
		// (and taken back) for it, so the refusal writes nothing.
		return nil, nil
	}
	a, err := c.admit(ctx, j, c.cappedProduct)
	var held *heldError
	switch {
	case errors.As(err, &held):
		c.holdDispatched(ctx, productID, jobID, dispatchEpoch, held.hold)
		return nil, fleet.Errorf(fleet.CodeConflict, "job %s is held back: %s", jobID, held.hold.Message)
	case errors.Is(err, errReservedElsewhere):
		return nil, fleet.Errorf(fleet.CodeConflict, "job %s is being claimed by someone else", jobID)
	}
	return a, err
}

// holdDispatched voids the dispatch of a job its budget or seat cap holds
// back, so it waits untargeted (and says why) instead of for the
// redispatch sweep.
func (c *Service) holdDispatched(ctx context.Context, productID, jobID string, dispatchEpoch int64, h fleet.Hold) {
	_, err := c.k.MutateJob(context.WithoutCancel(ctx), productID, jobID, func(j *fleet.Job) error {
		if j.Stage != fleet.StageQueued || j.DispatchEpoch != dispatchEpoch {
			return kernel.ErrNoChange
		}
		holdDispatch(j, h, c.k.Now())
		return nil
	})
	if err != nil {
		c.k.Log.WarnContext(ctx, "record budget hold", "job", jobID, "err", err)
	}
}

// RecordHold records on j, for a dispatch, that h holds it back; false
// when j says so already (writing it again would only wake the change feed).
func RecordHold(j *fleet.Job, h fleet.Hold, now time.Time) bool {
	if j.Dispatch.UnroutableKind == holdKind(h) && j.Dispatch.Unroutable == h.Message && j.TargetFactoryID == "" {
		return false
	}
	holdDispatch(j, h, now)
	return true
}

// holdDispatch records on j that its budget or seat cap holds it back.
func holdDispatch(j *fleet.Job, h fleet.Hold, now time.Time) {
	j.TargetFactoryID = ""
	j.Dispatch.Unroutable, j.Dispatch.UnroutableKind, j.Dispatch.At = h.Message, holdKind(h), now
}

// holdKind is how a dispatch records a hold.
func holdKind(h fleet.Hold) fleet.UnroutableKind {
	if h.Kind == fleet.HoldSeatCap {
		return fleet.UnroutableSeatCap
	}
	return fleet.UnroutableBudget
}
