// Package schedule is the fleet's scoring router. Given a job and the enrolled
// factories it filters out every factory that cannot run the job, scores the
// rest on a few weighted terms and ranks them deterministically; given a
// polling factory and the queue it picks the job that factory should claim.
//
// The package is pure: no I/O and no clock (now is an argument). The
// dispatcher, the poll fallback and GET /explain therefore give the same
// answer for the same inputs, a replayed decision can be audited, and tests
// need no fakes.
//
// Routing is filter → score → rank:
//
//   - The hard filter, in this order: every required capability is held
//     (required = the job's capabilities plus the implicit repo:<job.Repo>,
//     since a factory without the repo cannot build it); the factory is not
//     down; it serves the job's product; it has a free seat. The first failing
//     check is the factory's reason. Seats taken are fleet.Factory.Occupied:
//     the leases the coordinator counted (plus its dispatches not yet taken)
//     or the load the factory reported, whichever is larger, so a factory
//     that has not heartbeated since a claim is not taken for idle.
//   - Each eligible factory gets Terms, raw values in documented ranges, and a
//     total Σ weight × term.
//   - Ranking is by total, then lower load, then factory ID, so equal inputs
//     always route to the same factory whatever the order of the input slice.
//
// Totals are compared exactly, with no epsilon: an epsilon makes "equal" not
// transitive, and a sort over a non-transitive order is not deterministic.
// Two factories with the same inputs produce bit-identical totals, so exact
// comparison already treats them as tied.
package schedule

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Weights scale each term in a total. The zero value ignores every term, so
// ranking falls through to the tie-breaks alone.
type Weights struct {
	CapabilityFit float64 `json:"capabilityFit"`
	Affinity      float64 `json:"affinity"`
	Load          float64 `json:"load"`
	CostFit       float64 `json:"costFit"`
	Health        float64 `json:"health"`
	Starvation    float64 `json:"starvation"`
}

// DefaultWeights are the seed router's DEFAULT_WEIGHTS. Starvation weighs the
// most so that aging, not luck, decides between equal-priority jobs.
var DefaultWeights = Weights{
	CapabilityFit: 1.0,
	Affinity:      0.5,
	Load:          1.0,
	CostFit:       0.75,
	Health:        1.0,
	Starvation:    1.5,
}

// Validate rejects weights that would make ranking meaningless: NaN compares
// false with everything, so one NaN weight makes every order arbitrary, and a
// negative weight turns a preference into its opposite (a negative starvation
// weight would favour the freshest jobs and starve the oldest). Weights that
// arrive from configuration should pass Validate before use.
func (w Weights) Validate() error {
	for _, f := range [...]struct {
		name string
		v    float64
	}{
		{"capabilityFit", w.CapabilityFit},
		{"affinity", w.Affinity},
		{"load", w.Load},
		{"costFit", w.CostFit},
		{"health", w.Health},
		{"starvation", w.Starvation},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fleet.Invalid("weights."+f.name, "must be a finite number ≥ 0, got %v", f.v)
		}
	}
	return nil
}

// Total is Σ weight × term.
func (w Weights) Total(t Terms) float64 {
	return w.CapabilityFit*t.CapabilityFit +
		w.Affinity*t.Affinity +
		w.Load*t.Load +
		w.CostFit*t.CostFit +
		w.Health*t.Health +
		w.Starvation*t.Starvation
}

// The routing decision's shapes are part of the /explain answer, written
// once in shared/api/view (types only) so clients read them without
// linking the scheduler.
type (
	Terms       = view.Terms
	Candidate   = view.Candidate
	Explanation = view.Schedule
)

// StarvationWindow is how long a job waits before its starvation penalty has
// fully aged away.
const StarvationWindow = 30 * time.Minute

// Explain scores every factory for j and says why each ineligible one was
// filtered out. It ranks exactly as BestFactory does, so Best is always the
// factory BestFactory returns and Reason the reason it gives. Nil entries in
// fs are skipped. Explain does not look at j's stage or NotBefore: it answers
// where the job would go, not whether it is due.
func Explain(j *fleet.Job, fs []*fleet.Factory, now time.Time, w Weights) Explanation {
	n := newNeed(j, now)
	starvation := starvationTerm(now.Sub(queuedSince(j)))
	// Rank pointer-free records by index and build the candidates in their
	// final order afterwards: sorting the Candidates themselves would move
	// string-laden structs, with write barriers, O(n log n) times.
	type scored struct {
		i     int
		v     verdict
		terms Terms
		total float64
	}
	ranked := make([]scored, 0, len(fs))
	for i, f := range fs {
		if f == nil {
			continue
		}
		s := scored{i: i, v: n.verdict(f)}
		if s.v == admitted {
			s.terms = n.terms(f, starvation)
			s.total = w.Total(s.terms)
		}
		ranked = append(ranked, s)
	}
	slices.SortFunc(ranked, func(a, b scored) int {
		fa, fb := fs[a.i], fs[b.i]
		switch {
		case (a.v == admitted) != (b.v == admitted):
			if a.v == admitted {
				return -1
			}
			return 1
		case a.v == admitted:
			return compareFactories(a.total, fa.Occupied(), fa.ID, b.total, fb.Occupied(), fb.ID)
		default:
			return cmp.Compare(fa.ID, fb.ID)
		}
	})

	e := Explanation{
		JobID:      j.ID,
		Required:   n.tokens(),
		Candidates: make([]Candidate, len(ranked)),
	}
	for k, s := range ranked {
		f := fs[s.i]
		c := &e.Candidates[k]
		c.FactoryID, c.Load, c.Leases, c.Reported, c.Dispatched = f.ID, f.Occupied(), f.Leases, f.Load, f.Offers
		if s.v == admitted {
			c.Eligible, c.Terms, c.Total = true, s.terms, s.total
		} else {
			c.Reason = n.reason(f, s.v)
		}
	}
	if len(e.Candidates) > 0 && e.Candidates[0].Eligible {
		e.Routable, e.Best = true, e.Candidates[0].FactoryID
	} else {
		e.Reason = n.unroutable(fs).Text
	}
	return e
}

// BestFactory returns the factory j should be dispatched to, or nil and the
// reason Explain would give when none is eligible. It is the dispatcher's hot
// path: one pass over fs with no allocation per factory and no Explanation
// built; only the unroutable case, which is rare and then logged, allocates to
// word its reason. Nil entries in fs are skipped; like Explain it ignores j's
// stage and NotBefore.
func BestFactory(j *fleet.Job, fs []*fleet.Factory, now time.Time, w Weights) (best *fleet.Factory, reason Reason) {
	n := newNeed(j, now)
	starvation := starvationTerm(now.Sub(queuedSince(j)))
	var bestTotal float64
	for _, f := range fs {
		if f == nil || !n.admits(f) {
			continue
		}
		total := w.Total(n.terms(f, starvation))
		if best == nil || compareFactories(total, f.Occupied(), f.ID, bestTotal, best.Occupied(), best.ID) < 0 {
			best, bestTotal = f, total
		}
	}
	if best == nil {
		return nil, n.unroutable(fs)
	}
	return best, Reason{}
}

// NoFactory says why no factory of fs could ever run j (a capability or
// repo none offers), without the reason's prefix; ok is false when one
// could, even if none can now. The submit warning and the no_factory alert
// say this, each on the fleet it reads.
func NoFactory(j *fleet.Job, fs []*fleet.Factory, now time.Time, w Weights) (why string, ok bool) {
	best, reason := BestFactory(j, fs, now, w)
	if best != nil || reason.Kind != fleet.UnroutableNoFactory {
		return "", false
	}
	return strings.TrimPrefix(reason.Text, UnroutablePrefix), true
}

// compareFactories orders eligible factories best first: higher total, then
// lower load (of two equally good factories, the idler one finishes sooner),
// then ID so the order never depends on input order.
func compareFactories(aTotal float64, aLoad int, aID string, bTotal float64, bLoad int, bID string) int {
	if c := cmp.Compare(bTotal, aTotal); c != 0 {
		return c
	}
	if c := cmp.Compare(aLoad, bLoad); c != 0 {
		return c
	}
	return cmp.Compare(aID, bID)
}

// terms scores an eligible factory. starvation is computed once per job by
// the caller because it does not depend on the factory.
func (n *need) terms(f *fleet.Factory, starvation float64) Terms {
	return Terms{
		// len(EffectiveCapabilities()) without building the slice.
		CapabilityFit: capabilityFitTerm(n.size, len(f.Capabilities)+len(f.Repos)),
		Affinity:      affinityTerm(f, n.persona, n.sessionAt),
		Load:          loadTerm(f.Occupied()),
		CostFit:       costFitTerm(f.CostPerHourUSD, n.budget),
		Health:        healthTerm(f.Health),
		Starvation:    starvation,
	}
}

func capabilityFitTerm(required, offered int) float64 {
	return min(float64(required+1)/float64(offered+1), 1)
}

// affinityTerm is 1 on the factory that holds the job's engine session (a
// retry there resumes the conversation instead of starting over) or on one
// that advertises the job's persona, else 0.
func affinityTerm(f *fleet.Factory, persona, sessionAt string) float64 {
	if sessionAt != "" && f.ID == sessionAt {
		return 1
	}
	if persona == "" {
		return 0
	}
	for _, c := range f.Capabilities {
		if isToken(c, personaPrefix, persona) {
			return 1
		}
	}
	return 0
}

// loadTerm treats a negative load, which only a bad report can produce, as
// idle so the term stays in (0, 1].
func loadTerm(load int) float64 {
	return 1 / float64(1+max(load, 0))
}

// costFitTerm scores how well the factory's price fits the job's budget.
// Non-positive values are treated as unknown, like zero: a job without a
// budget, or a factory that does not report a price, should not be pushed
// away from otherwise good matches.
func costFitTerm(costPerHourUSD float64, b fleet.Budget) float64 {
	if costPerHourUSD <= 0 || b.USD <= 0 || b.Wall <= 0 {
		return 1
	}
	expected := costPerHourUSD * time.Duration(b.Wall).Hours()
	if expected <= b.USD {
		return 1
	}
	return b.USD / expected
}

// healthTerm scores health. An empty health is what an enrolment without a
// report stores and fleet.ParseHealth reads "" as ok, so it scores as ok.
func healthTerm(h fleet.Health) float64 {
	switch h {
	case fleet.HealthOK, "":
		return 1
	case fleet.HealthDegraded:
		return 0.5
	case fleet.HealthStale:
		return 0.25
	default:
		return 0
	}
}

// starvationTerm is -(1 - min(age/StarvationWindow, 1)). A negative age (the
// job's queue time is ahead of now through clock skew) counts as just queued.
// A fully aged job returns +0, not -0, so JSON shows 0.
func starvationTerm(age time.Duration) float64 {
	if age >= StarvationWindow {
		return 0
	}
	age = max(age, 0)
	return -(1 - float64(age)/float64(StarvationWindow))
}

// queuedSince is when the job started waiting: QueuedAt, or CreatedAt for a
// job written before QueuedAt was stamped.
func queuedSince(j *fleet.Job) time.Time {
	if j.QueuedAt.IsZero() {
		return j.CreatedAt
	}
	return j.QueuedAt
}
