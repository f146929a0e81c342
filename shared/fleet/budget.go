package fleet

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// BudgetPeriod is what a product budget's ceiling applies to.
type BudgetPeriod string

// Budget periods.
const (
	// PeriodMonth: the ceiling is per calendar month (UTC); spend starts
	// again from zero on the first of each month.
	PeriodMonth BudgetPeriod = "month"
	// PeriodTotal: one ceiling for the product's whole life.
	PeriodTotal BudgetPeriod = "total"
)

// BudgetPeriods lists every budget period.
func BudgetPeriods() []BudgetPeriod { return []BudgetPeriod{PeriodMonth, PeriodTotal} }

// ParseBudgetPeriod validates a period; "" means month.
func ParseBudgetPeriod(field, s string) (BudgetPeriod, error) {
	switch p := BudgetPeriod(s); {
	case p == "":
		return PeriodMonth, nil
	case slices.Contains(BudgetPeriods(), p):
		return p, nil
	}
	return "", Invalid(field, "unknown period %q (want %s)", s, alternatives(BudgetPeriods()))
}

// PauseReason says who paused a product.
type PauseReason string

// Pause reasons.
const (
	PausedBudgetExhausted PauseReason = "budget_exhausted"
	PausedOperator        PauseReason = "operator"
)

// PauseReasons lists every pause reason.
func PauseReasons() []PauseReason { return []PauseReason{PausedBudgetExhausted, PausedOperator} }

// MaxBurnPoints bounds a budget's burndown series: the oldest points go
// first (the spend they reached is kept by the later, cumulative points).
const MaxBurnPoints = 1000

// BurnPoint is the spend of a period so far, at a moment a run settled.
type BurnPoint struct {
	At       time.Time `json:"at"`
	SpentUSD float64   `json:"spentUsd"`
}

// Reservation is the estimate held for one run from its assignment until
// it settles: keyed by job id on the budget, for the lease epoch the
// assignment takes. A job has at most one run, so at most one reservation.
type Reservation struct {
	LeaseEpoch int64     `json:"leaseEpoch"`
	USD        float64   `json:"usd"`
	At         time.Time `json:"at"`
}

// ProductBudget is a product's spending ceiling and where spend stands:
// one document per product, every change a compare-and-swap on it.
type ProductBudget struct {
	ID         string       `json:"id"`
	ProductID  string       `json:"productId"`
	CeilingUSD float64      `json:"ceilingUsd"`
	Period     BudgetPeriod `json:"period"`
	// PeriodStart is when the current period began: the first of the month
	// (UTC) for month, the budget's creation for total.
	PeriodStart time.Time `json:"periodStart"`
	SpentUSD    float64   `json:"spentUsd"`
	// Reservations are the runs admitted and not yet settled, by job id.
	Reservations map[string]Reservation `json:"reservations"`
	Paused       bool                   `json:"paused"`
	PausedReason *PauseReason           `json:"pausedReason"`
	// PauseMessage is the operator's reason text, or why spend paused it.
	PauseMessage string    `json:"pauseMessage,omitempty"`
	PausedAt     time.Time `json:"pausedAt,omitzero"`
	AlertAt      float64   `json:"alertAt"`
	AutoPause    bool      `json:"autoPause"`
	// DefaultJobUSD is the estimate of a job that names no budget.usd.
	DefaultJobUSD float64     `json:"defaultJobUsd"`
	Points        []BurnPoint `json:"points"`
	CreatedAt     time.Time   `json:"createdAt"`
	UpdatedAt     time.Time   `json:"updatedAt"`
	Rev           string      `json:"-"`
}

// BudgetID is the id of a product's budget document.
func BudgetID(productID string) string { return productID }

// micros is a dollar figure in millionths: sums and comparisons are made
// on integers, so 0.1+0.2 fits a ceiling of 0.3. It saturates at
// ±maxSumUSD: every figure taken in is at most MaxUSD, but a period's
// spend sums them, and past int64 it would wrap negative and admit every
// later job. Sums of a few saturated figures still fit in int64.
func micros(usd float64) int64 {
	return int64(math.Round(max(-maxSumUSD, min(usd, maxSumUSD)) * 1e6))
}

// maxSumUSD is where micros saturates: a thousand times MaxUSD, a
// millionth of int64's range in millionths.
const maxSumUSD = 1000 * MaxUSD

// PeriodStartAt is when the period containing now began for period; a
// total budget's period began at created.
func PeriodStartAt(period BudgetPeriod, created, now time.Time) time.Time {
	if period == PeriodTotal {
		return created
	}
	now = now.UTC()
	return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// PeriodEnd is when the current period ends; zero for a total budget.
func (b *ProductBudget) PeriodEnd() time.Time {
	if b.Period == PeriodTotal {
		return time.Time{}
	}
	return b.PeriodStart.AddDate(0, 1, 0)
}

// Roll starts a new period when now is past the current one: spend and
// its points start from zero, and a pause that spend caused is lifted (an
// operator's pause stays). Reservations stay: those runs are still going
// and settle into the period they end in. It reports whether it rolled.
func (b *ProductBudget) Roll(now time.Time) bool {
	start := PeriodStartAt(b.Period, b.CreatedAt, now)
	if !start.After(b.PeriodStart) {
		return false
	}
	b.PeriodStart, b.SpentUSD, b.Points = start, 0, nil
	if b.Paused && b.PausedReason != nil && *b.PausedReason == PausedBudgetExhausted {
		b.Unpause()
	}
	return true
}

// ReservedUSD is the sum of the reservations.
func (b *ProductBudget) ReservedUSD() float64 {
	var m int64
	for _, r := range b.Reservations {
		m += micros(r.USD)
	}
	return float64(m) / 1e6
}

// RemainingUSD is what is left for new runs: the ceiling less spend and
// reservations, never below zero.
func (b *ProductBudget) RemainingUSD() float64 {
	return float64(max(0, micros(b.CeilingUSD)-micros(b.SpentUSD)-micros(b.ReservedUSD()))) / 1e6
}

// Estimate is what a job is expected to cost: its own budget.usd, else the
// product's default.
func (b *ProductBudget) Estimate(job Budget) float64 {
	if job.USD > 0 {
		return job.USD
	}
	return b.DefaultJobUSD
}

// HoldKind says why a budget holds a job back.
type HoldKind string

// Hold kinds.
const (
	HoldPaused  HoldKind = "paused"
	HoldCeiling HoldKind = "ceiling"
	// HoldSeatCap: the product's maxRunning seats are all taken.
	HoldSeatCap HoldKind = "seat_cap"
)

// HoldKinds lists every hold kind.
func HoldKinds() []HoldKind { return []HoldKind{HoldPaused, HoldCeiling, HoldSeatCap} }

// Hold is why a queued job may not be assigned now.
type Hold struct {
	Kind    HoldKind `json:"kind"`
	Message string   `json:"message"`
	// Running and MaxRunning are the seat count of a seat_cap hold.
	Running    int `json:"running,omitempty"`
	MaxRunning int `json:"maxRunning,omitempty"`
}

// Admit is the admission rule: a job estimated at estimate may be
// assigned only while the product is not paused and spent + reserved +
// estimate <= ceiling. It returns nil when it may, else why not.
func (b *ProductBudget) Admit(estimate float64) *Hold {
	if b.Paused {
		why := "operator"
		if b.PausedReason != nil {
			why = string(*b.PausedReason)
		}
		msg := fmt.Sprintf("product %s is paused (%s)", b.ProductID, why)
		if b.PauseMessage != "" {
			msg += ": " + b.PauseMessage
		}
		return &Hold{Kind: HoldPaused, Message: msg}
	}
	spent, reserved := micros(b.SpentUSD), micros(b.ReservedUSD())
	if spent+reserved+micros(estimate) > micros(b.CeilingUSD) {
		return &Hold{Kind: HoldCeiling, Message: fmt.Sprintf(
			"product %s budget: spent %.2f + reserved %.2f + this job's estimate %.2f would exceed the ceiling %.2f USD",
			b.ProductID, b.SpentUSD, b.ReservedUSD(), estimate, b.CeilingUSD)}
	}
	return nil
}

// Reserve holds estimate for job's run at leaseEpoch. It refuses (with
// the hold) what Admit refuses; a reservation the job already has for an
// older epoch must have been settled first (see ProductBudget.Settle).
func (b *ProductBudget) Reserve(jobID string, leaseEpoch int64, estimate float64, now time.Time) *Hold {
	if h := b.Admit(estimate); h != nil {
		return h
	}
	if b.Reservations == nil {
		b.Reservations = map[string]Reservation{}
	}
	b.Reservations[jobID] = Reservation{LeaseEpoch: leaseEpoch, USD: estimate, At: now}
	b.UpdatedAt = now
	return nil
}

// AddSpend adds usd spent at to the period's spend and its burndown.
func (b *ProductBudget) AddSpend(usd float64, at time.Time) {
	b.SpentUSD = min(float64(micros(b.SpentUSD)+micros(usd))/1e6, maxSumUSD)
	b.Points = append(b.Points, BurnPoint{At: at, SpentUSD: b.SpentUSD})
	if len(b.Points) > MaxBurnPoints {
		b.Points = b.Points[len(b.Points)-MaxBurnPoints:]
	}
}

// Settle ends the reservation of job's run at leaseEpoch, adding usd (what
// the run reported) to spend. Without that reservation it does nothing
// and returns false: settling is keyed by the reservation, so settling
// twice (a retry, a reclaim racing the run's own end) counts once. When
// spend reaches the ceiling and autoPause is on, the product pauses.
func (b *ProductBudget) Settle(jobID string, leaseEpoch int64, usd float64, now time.Time) bool {
	r, ok := b.Reservations[jobID]
	if !ok || r.LeaseEpoch != leaseEpoch {
		return false
	}
	delete(b.Reservations, jobID)
	b.Spend(usd, now)
	return true
}

// Spend counts what a run spent (nothing when usd is not positive) and
// pauses the product when that reaches the ceiling.
func (b *ProductBudget) Spend(usd float64, now time.Time) {
	if usd > 0 {
		b.AddSpend(usd, now)
	}
	b.PauseIfSpent(now)
	b.UpdatedAt = now
}

// PauseIfSpent pauses the product when spend has reached the ceiling and
// autoPause is on.
func (b *ProductBudget) PauseIfSpent(now time.Time) {
	if b.AutoPause && !b.Paused && micros(b.SpentUSD) >= micros(b.CeilingUSD) {
		b.Pause(PausedBudgetExhausted, fmt.Sprintf("spent %.2f of %.2f USD", b.SpentUSD, b.CeilingUSD), now)
	}
}

// Pause stops new assignments for the product.
func (b *ProductBudget) Pause(reason PauseReason, message string, now time.Time) {
	b.Paused, b.PausedReason, b.PauseMessage, b.PausedAt = true, &reason, message, now
	b.UpdatedAt = now
}

// Unpause lets assignments flow again (admission still applies).
func (b *ProductBudget) Unpause() {
	b.Paused, b.PausedReason, b.PauseMessage, b.PausedAt = false, nil, "", time.Time{}
}

// Alerting reports whether spend reached alertAt of the ceiling, and
// since when (the first point at or past it).
func (b *ProductBudget) Alerting() (bool, time.Time) {
	if b.AlertAt <= 0 {
		return false, time.Time{}
	}
	threshold := int64(math.Ceil(float64(micros(b.CeilingUSD)) * b.AlertAt))
	if micros(b.SpentUSD) < threshold {
		return false, time.Time{}
	}
	for _, p := range b.Points {
		if micros(p.SpentUSD) >= threshold {
			return true, p.At
		}
	}
	return true, b.PeriodStart
}

// ForecastExhaustedAt extrapolates the period's spend linearly, from zero
// at the period's start through the latest point, to the moment it
// reaches the ceiling: the time of the point that reached it when spend
// is there already; nil when nothing was spent, or (month) when the rate
// will not reach it before the period ends.
func (b *ProductBudget) ForecastExhaustedAt() *time.Time {
	ceiling := micros(b.CeilingUSD)
	for _, p := range b.Points {
		if micros(p.SpentUSD) >= ceiling {
			at := p.At
			return &at
		}
	}
	if len(b.Points) == 0 {
		return nil
	}
	last := b.Points[len(b.Points)-1]
	elapsed := last.At.Sub(b.PeriodStart)
	spent := micros(last.SpentUSD)
	if elapsed <= 0 || spent <= 0 {
		return nil
	}
	at := b.PeriodStart.Add(time.Duration(float64(elapsed) * float64(ceiling) / float64(spent)))
	if end := b.PeriodEnd(); !end.IsZero() && at.After(end) {
		return nil
	}
	return &at
}
