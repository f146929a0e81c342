package fleet

import (
	"fmt"
	"time"
)

// A product's seat cap (API.md: PUT /fleet/products/{id} {maxRunning}):
// at most MaxRunning of its jobs hold a lease at once. Each assignment
// takes a seat on the product document by compare-and-swap before the
// job's own CAS, the way a budget reservation is taken (coord/seats.go),
// so racing claims serialise on the product's revision and never take
// more seats than there are. A seat is keyed by job and the lease epoch
// the assignment takes, so freeing it is idempotent and a seat left by a
// crash can be told from a live one.

// MaxMaxRunning bounds a product's seat cap.
const MaxMaxRunning = 100000

// Seat is one lease counted against the product's cap.
type Seat struct {
	LeaseEpoch int64     `json:"leaseEpoch"`
	At         time.Time `json:"at"`
}

// ValidateMaxRunning checks a seat cap: a whole number from 0 (uncapped)
// to MaxMaxRunning.
func ValidateMaxRunning(field string, n int) error {
	if n < 0 || n > MaxMaxRunning {
		return Invalid(field, "must be between 0 (uncapped) and %d, got %d", MaxMaxRunning, n)
	}
	return nil
}

// Running is how many seats are taken.
func (p *Product) Running() int { return len(p.Seats) }

// SeatHold is the seat-cap rule: nil while the product is uncapped or has
// a free seat, else why a job of it must wait.
func (p *Product) SeatHold() *Hold {
	if !p.Capped() || p.Running() < p.MaxRunning {
		return nil
	}
	return &Hold{Kind: HoldSeatCap, Running: p.Running(), MaxRunning: p.MaxRunning, Message: fmt.Sprintf(
		"product %s runs %d of its maxRunning %d jobs; this one waits for a seat", p.ID, p.Running(), p.MaxRunning)}
}

// Capped reports whether the product has a seat cap: only then are seats
// taken (an uncapped product's claims write nothing here, so they do not
// serialise on its document).
func (p *Product) Capped() bool { return p != nil && p.MaxRunning > 0 }

// TakeSeat gives job's run at leaseEpoch a seat, or says why not.
func (p *Product) TakeSeat(jobID string, leaseEpoch int64, now time.Time) *Hold {
	if h := p.SeatHold(); h != nil {
		return h
	}
	if p.Seats == nil {
		p.Seats = map[string]Seat{}
	}
	p.Seats[jobID] = Seat{LeaseEpoch: leaseEpoch, At: now}
	return nil
}

// FreeSeat ends the seat of job's run at leaseEpoch; without that seat it
// does nothing and returns false, so freeing twice frees once.
func (p *Product) FreeSeat(jobID string, leaseEpoch int64) bool {
	s, ok := p.Seats[jobID]
	if !ok || s.LeaseEpoch != leaseEpoch {
		return false
	}
	delete(p.Seats, jobID)
	return true
}
