package admission

import (
	"context"
	"errors"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Seat caps (API.md: PUT /fleet/products/{id} {maxRunning}). A capped
// product's seats live on its product document (fleet/seats.go) and are
// taken the way a budget reservation is (budgets.go): a compare-and-swap
// on the product before the job's own CAS, keyed by job and the epoch the
// claim takes, given back if the job CAS loses, freed when the lease ends
// (transition -> endAdmission), and, when a crash left one behind,
// reclaimed by an assignment the cap refuses once it is older than the
// lease TTL. An uncapped product's claims write nothing here.

// seatClaim is a seat takeSeat took for one claim.
type seatClaim struct {
	productID, jobID string
	epoch            int64
}

// productOf reads a product for admission; nil when it does not exist.
func (c *Service) productOf(ctx context.Context, productID string) (*fleet.Product, error) {
	p, err := c.catalog.GetProduct(ctx, productID)
	if errors.Is(err, fleet.ErrNotFound) {
		return nil, nil
	}
	return p, err
}

// cappedProduct is the product for a decision that only a capped product
// needs read fresh: the cached copy when it is uncapped (or absent), else
// the stored one.
func (c *Service) cappedProduct(ctx context.Context, productID string) (*fleet.Product, error) {
	p, err := c.catalog.CachedProduct(ctx, productID)
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case !p.Capped():
		return p, nil
	}
	return c.productOf(ctx, productID)
}

// seatView is the product as a claim pre-filters its jobs by: when its
// seats are all taken, seats a crash left behind are reclaimed first.
func (c *Service) seatView(ctx context.Context, productID string) (*fleet.Product, error) {
	p, err := c.productOf(ctx, productID)
	if err != nil || p.SeatHold() == nil {
		return p, err
	}
	if c.reclaimSeats(ctx, productID, c.staleSeat) == 0 {
		return p, nil
	}
	return c.productOf(ctx, productID)
}

// productRead is how an assignment learns whether j's product is capped:
// through the cache (cappedProduct), or from the copy its claim just read
// fresh.
type productRead func(ctx context.Context, productID string) (*fleet.Product, error)

// takeSeat gives j's next run a seat on its capped product (as read says
// it is): nil and no error when the product is uncapped; a *heldError when
// its seats are taken; errReservedElsewhere when another claim of j holds
// the seat.
func (c *Service) takeSeat(ctx context.Context, j *fleet.Job, read productRead) (*seatClaim, error) {
	p, err := read(ctx, j.ProductID)
	if err != nil || !p.Capped() {
		return nil, err
	}
	epoch := j.LeaseEpoch + 1
	if s, ok := p.Seats[j.ID]; ok && s.LeaseEpoch != epoch {
		// The seat of an earlier run of this job: that run is over.
		c.reclaimSeats(ctx, j.ProductID, func(id string, _ fleet.Seat) bool { return id == j.ID })
	}
	for try := 0; ; try++ {
		_, _, err = kernel.CAS(ctx, c.k, kernel.ProductDocs, j.ProductID, j.ProductID, func(p *fleet.Product) error {
			if !p.Capped() {
				return kernel.ErrNoChange // uncapped meanwhile: nothing to hold
			}
			if s, ok := p.Seats[j.ID]; ok {
				if s.LeaseEpoch == epoch {
					return errReservedElsewhere
				}
				return fleet.Errorf(fleet.CodeConflict, "job %s holds the seat of run %d", j.ID, s.LeaseEpoch)
			}
			if h := p.TakeSeat(j.ID, epoch, c.k.Now()); h != nil {
				return &heldError{hold: *h}
			}
			return nil
		})
		var held *heldError
		if try == 0 && errors.As(err, &held) && c.reclaimSeats(ctx, j.ProductID, c.staleSeat) > 0 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &seatClaim{productID: j.ProductID, jobID: j.ID, epoch: epoch}, nil
	}
}

// giveBackSeat takes back a seat whose claim lost its job CAS.
func (c *Service) giveBackSeat(ctx context.Context, s *seatClaim) {
	if s == nil {
		return
	}
	if _, err := c.freeSeat(context.WithoutCancel(ctx), s.productID, s.jobID, s.epoch); err != nil {
		// Left behind, it is reclaimed once it is older than the lease TTL.
		c.k.Log.WarnContext(ctx, "give back a seat", "job", s.jobID, "err", err)
	}
}

// freeSeat frees the seat of job's run at epoch; it reports whether there
// was one.
func (c *Service) freeSeat(ctx context.Context, productID, jobID string, epoch int64) (bool, error) {
	_, written, err := kernel.CAS(ctx, c.k, kernel.ProductDocs, productID, productID, func(p *fleet.Product) error {
		if !p.FreeSeat(jobID, epoch) {
			return kernel.ErrNoChange
		}
		return nil
	})
	if errors.Is(err, fleet.ErrNotFound) {
		return false, nil
	}
	return written, err
}

// staleSeat selects seats old enough that their claim's job CAS is long
// over: only those may be reclaimed while their job is still queued.
func (c *Service) staleSeat(_ string, s fleet.Seat) bool {
	return c.k.Now().Sub(s.At) >= c.leaseTTL
}

// reclaimSeats frees the seats pick selects whose run is over or never
// started; it returns how many it freed.
func (c *Service) reclaimSeats(ctx context.Context, productID string, pick func(jobID string, s fleet.Seat) bool) int {
	p, err := c.productOf(ctx, productID)
	if err != nil || p == nil {
		return 0
	}
	over := map[string]int64{}
	for id, s := range p.Seats {
		if !pick(id, s) {
			continue
		}
		if _, done := c.runOver(ctx, productID, id, s.LeaseEpoch, s.At); done {
			over[id] = s.LeaseEpoch
		}
	}
	if len(over) == 0 {
		return 0
	}
	n := 0
	_, _, err = kernel.CAS(ctx, c.k, kernel.ProductDocs, productID, productID, func(p *fleet.Product) error {
		n = 0
		for id, epoch := range over {
			if p.FreeSeat(id, epoch) {
				n++
			}
		}
		if n == 0 {
			return kernel.ErrNoChange
		}
		return nil
	})
	if err != nil {
		c.k.Log.WarnContext(ctx, "reclaim seats", "product", productID, "err", err)
		return 0
	}
	c.k.Log.InfoContext(ctx, "reclaimed seats left by a crash", "product", productID, "count", n)
	return n
}

// runOver is the one rule for whether what an assignment of job at epoch
// took (a budget reservation, a seat) may be given back: its run is over
// or never started. A run that is going keeps it; so does a claim at that
// epoch that may still be landing (taken less than the lease TTL ago). It
// returns the job when it still exists.
func (c *Service) runOver(ctx context.Context, productID, jobID string, epoch int64, at time.Time) (*fleet.Job, bool) {
	j, err := c.k.GetJob(ctx, productID, jobID)
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return nil, true
	case err != nil:
		return nil, false
	}
	_, live := j.Lease()
	switch {
	case j.LeaseEpoch == epoch && live:
		return j, false // the run is going: it gives back when it ends
	case j.LeaseEpoch < epoch && c.k.Now().Sub(at) < c.leaseTTL:
		return j, false // its claim may still be landing
	}
	return j, true
}

// LeasedSeats are the seats of the product's jobs holding a lease now: a
// cap set on a product with runs going counts them.
func (c *Service) LeasedSeats(ctx context.Context, productID string) (map[string]fleet.Seat, error) {
	leased, err := c.life.LeasedJobs(ctx, productID)
	if err != nil {
		return nil, err
	}
	seats := map[string]fleet.Seat{}
	now := c.k.Now()
	for _, j := range leased {
		if _, ok := j.Lease(); ok {
			seats[j.ID] = fleet.Seat{LeaseEpoch: j.LeaseEpoch, At: now}
		}
	}
	return seats, nil
}

// Grant is what one assignment took before its job CAS: the budget
// reservation and the seat, either nil when the product has no budget or
// no cap. A nil *Grant took nothing.
type Grant struct {
	res  *reservation
	seat *seatClaim
}

// admit is step 1 of every assignment (claim, accept): the budget
// reservation, then the seat (on the product as read says it is); a
// *heldError when either refuses (nothing stays taken),
// errReservedElsewhere when another claim of j is landing.
func (c *Service) admit(ctx context.Context, j *fleet.Job, read productRead) (*Grant, error) {
	res, err := c.reserve(ctx, j)
	if err != nil {
		return nil, err
	}
	seat, err := c.takeSeat(ctx, j, read)
	if err != nil {
		c.undo(ctx, res)
		return nil, err
	}
	return &Grant{res: res, seat: seat}, nil
}

// GiveBack takes back what an assignment whose job CAS lost took.
func (c *Service) GiveBack(ctx context.Context, a *Grant) {
	if a == nil {
		return
	}
	c.undo(ctx, a.res)
	c.giveBackSeat(ctx, a.seat)
}

// Fence is the job CAS's guard: the job must still be at the epoch its
// reservation and seat were taken for.
func (a *Grant) Fence(j *fleet.Job) error {
	if a == nil {
		return nil
	}
	if a.res != nil {
		return fenceReservation(a.res, j)
	}
	if a.seat != nil && j.LeaseEpoch+1 != a.seat.epoch {
		return fleet.Errorf(fleet.CodeConflict, "job %s moved to lease epoch %d since its seat was taken", j.ID, j.LeaseEpoch)
	}
	return nil
}

// Record notes on j, inside the job CAS that grants the lease, what the
// assignment took, so the lease's end gives back only that.
func (a *Grant) Record(j *fleet.Job) {
	rec := fleet.Admitted{LeaseEpoch: j.LeaseEpoch}
	if a != nil {
		rec.Reservation, rec.Seat = a.res != nil, a.seat != nil
	}
	j.Admitted = &rec
}

// admissionHold is the one pre-check of whether j may be assigned now,
// without taking anything: its budget's hold, else its product's seat
// cap's; nil when it may.
func admissionHold(b *fleet.ProductBudget, p *fleet.Product, j *fleet.Job) *fleet.Hold {
	if h := budgetHold(b, j); h != nil {
		return h
	}
	return p.SeatHold()
}

// Snapshot is a product's budget and seats as read once, to judge many
// jobs by (a dispatch, an explanation) without taking anything.
type Snapshot struct {
	Budget  *fleet.ProductBudget // nil: the product has no budget
	Product *fleet.Product       // nil: no such product
}

// Snapshot reads the product's budget (rolled into the current period)
// and the product.
func (c *Service) Snapshot(ctx context.Context, productID string) (Snapshot, error) {
	b, err := c.budgetOf(ctx, productID)
	if err != nil {
		return Snapshot{}, err
	}
	p, err := c.cappedProduct(ctx, productID)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Budget: b, Product: p}, nil
}

// Hold says whether j may be assigned now: nil when it may, else what
// holds it back (its budget first, then its product's seat cap).
func (s Snapshot) Hold(j *fleet.Job) *fleet.Hold { return admissionHold(s.Budget, s.Product, j) }

// BudgetHold is j's budget's hold alone: nil when it may be assigned or
// the product has no budget.
func (s Snapshot) BudgetHold(j *fleet.Job) *fleet.Hold { return budgetHold(s.Budget, j) }

// Pass is admission for one claim over many queued jobs: each product's
// budget and seats are read once per claim to pass over the jobs they hold
// back; Admit re-checks on the fresh documents.
type Pass struct {
	c        *Service
	budgets  map[string]*claimBudget
	products map[string]*fleet.Product
	// capped are the products whose every seat was found taken: no other
	// job of theirs gets one in this claim.
	capped map[string]bool
}

// Pass starts one claim's admission.
func (c *Service) Pass() *Pass {
	return &Pass{c: c, budgets: map[string]*claimBudget{}, products: map[string]*fleet.Product{}, capped: map[string]bool{}}
}

// Held reports whether j is held back, judged on the documents as this
// claim read them (taking nothing).
func (p *Pass) Held(ctx context.Context, j *fleet.Job) (bool, error) {
	b, err := p.c.budgetFor(ctx, p.budgets, j)
	if err != nil {
		return false, err
	}
	prod, ok := p.products[j.ProductID]
	if !ok {
		if prod, err = p.c.seatView(ctx, j.ProductID); err != nil {
			return false, err
		}
		p.products[j.ProductID] = prod
	}
	return p.capped[j.ProductID] || admissionHold(b, prod, j) != nil, nil
}

// Admit takes j's reservation and seat for the claim's job CAS. It returns
// nil and no error when j is held back after all or another claim of it is
// landing: the claim moves on to its next job. Whether the product is
// capped is decided on the copy Held read fresh, never on the cache: a cap
// set through another instance must count this claim's run, or the product
// stays over its cap for as long as that run goes.
func (p *Pass) Admit(ctx context.Context, j *fleet.Job) (*Grant, error) {
	a, err := p.c.admit(ctx, j, p.product)
	var held *heldError
	switch {
	case errors.As(err, &held):
		if held.hold.Kind == fleet.HoldSeatCap {
			// Every seat is taken: no other job of the product gets one.
			p.capped[j.ProductID] = true
		}
		return nil, nil
	case errors.Is(err, errReservedElsewhere):
		return nil, nil
	}
	return a, err
}

// product is the product as this claim read it fresh (Held), else as the
// cache has it.
func (p *Pass) product(ctx context.Context, productID string) (*fleet.Product, error) {
	if prod, ok := p.products[productID]; ok {
		return prod, nil
	}
	return p.c.cappedProduct(ctx, productID)
}

// endAdmission gives back what before's run took when its lease ends
// (release, fail, ship, reap, revoke, preempt, cancel): the budget settles
// from the run's usage and the seat frees; then the jobs either held back
// flow at once.
func (c *Service) endAdmission(ctx context.Context, before *fleet.Job) {
	// A lease that says it took nothing gives nothing back, and reads
	// nothing to find that out. One granted before jobs said (no record)
	// is settled as before.
	took, known := before.AdmittedFor(before.LeaseEpoch)
	settled, freed := false, false
	switch {
	case !known || took.Reservation:
		settled = c.settleRun(ctx, before)
	default:
		c.spendUnreserved(ctx, before)
	}
	if !known || took.Seat {
		var err error
		if freed, err = c.freeSeat(ctx, before.ProductID, before.ID, before.LeaseEpoch); err != nil {
			// Left behind, it is reclaimed once it is older than the lease TTL.
			c.k.Log.ErrorContext(ctx, "free seat", "job", before.ID, "epoch", before.LeaseEpoch, "err", err)
		}
	}
	if settled || freed {
		c.ReleaseHeld(ctx, before.ProductID)
	}
}

// endAdmissionOnRunEnd observes transitions: a run's end gives back its
// seat and settles its budget reservation.
func (c *Service) endAdmissionOnRunEnd(ctx context.Context, t kernel.Transition) {
	if t.EndsRun() {
		c.endAdmission(ctx, t.Before)
	}
}
