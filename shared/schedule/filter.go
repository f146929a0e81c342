package schedule

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/fleet"
)

const (
	repoPrefix    = "repo:"
	personaPrefix = "persona:"
)

// need is what a job asks of a factory, prepared once per job so that the
// per-factory checks are scans over a handful of strings with no allocation.
// Matching against the factory's Capabilities and Repos directly, rather than
// against f.EffectiveCapabilities(), saves a slice clone and one string
// concatenation per repo per factory, which would dominate a 10,000-factory
// scan. A sorted-set or map index would only pay off for far larger
// capability lists than factories advertise (a dozen or so).
type need struct {
	product string
	// caps are the job's explicit capabilities, distinct, without the
	// implicit repo token.
	caps []string
	// repo is the implicit repo:<repo> requirement; "" for none.
	repo    string
	persona string
	// sessionAt is the factory that holds the job's engine session (its
	// newest ended run that reported one), "" for none.
	sessionAt string
	budget    fleet.Budget
	// now judges cooldowns: one that has passed binds no longer, even
	// before the factory's next heartbeat drops it.
	now time.Time
	// size is |required|: len(caps) plus the repo token.
	size int

	// required and scopeReason are built on first use by the paths that word
	// reasons, so the hot paths never pay for them.
	required    []string
	scopeReason string
}

func newNeed(j *fleet.Job, now time.Time) need {
	n := need{product: j.ProductID, caps: j.Capabilities, repo: j.Repo, persona: j.Persona, budget: j.Budget, now: now,
		sessionAt: j.SessionFactory()}
	// Manifest validation already drops duplicates, so the copy below is
	// for jobs that bypassed it or name their repo twice; the common case
	// keeps the job's own slice and allocates nothing.
	if !distinctWithout(j.Capabilities, j.Repo) {
		n.caps = make([]string, 0, len(j.Capabilities))
		for _, c := range j.Capabilities {
			if !slices.Contains(n.caps, c) && !(j.Repo != "" && isToken(c, repoPrefix, j.Repo)) {
				n.caps = append(n.caps, c)
			}
		}
	}
	n.size = len(n.caps)
	if n.repo != "" {
		n.size++
	}
	return n
}

// distinctWithout reports whether caps holds no duplicate and no repo:<repo>.
// Quadratic, which for the few capabilities a job names is cheaper than a set.
func distinctWithout(caps []string, repo string) bool {
	for i, c := range caps {
		if repo != "" && isToken(c, repoPrefix, repo) || slices.Contains(caps[:i], c) {
			return false
		}
	}
	return true
}

// isToken reports whether c is prefix+value without building the string.
func isToken(c, prefix, value string) bool {
	return len(c) == len(prefix)+len(value) && strings.HasPrefix(c, prefix) && c[len(prefix):] == value
}

// tokens is the required set as the hard filter sees it, sorted. Callers
// must not modify it: it is built once per need and shared.
func (n *need) tokens() []string {
	if n.required == nil {
		n.required = make([]string, 0, n.size)
		n.required = append(n.required, n.caps...)
		if n.repo != "" {
			n.required = append(n.required, fleet.RepoCapability(n.repo))
		}
		slices.Sort(n.required)
	}
	return n.required
}

// satisfiedBy reports required ⊆ f.EffectiveCapabilities(). The repo goes
// first because it is the most selective requirement in a real fleet: every
// factory runs git and an engine, few have a given repo checked out.
func (n *need) satisfiedBy(f *fleet.Factory) bool {
	if n.repo != "" && !hasRepo(f, n.repo) {
		return false
	}
	for _, c := range n.caps {
		if !hasCapability(f, c) {
			return false
		}
	}
	return true
}

// hasCapability reports whether c is in f.EffectiveCapabilities(): declared,
// or repo:<name> for a repo the factory has.
func hasCapability(f *fleet.Factory, c string) bool {
	if slices.Contains(f.Capabilities, c) {
		return true
	}
	if r, ok := strings.CutPrefix(c, repoPrefix); ok {
		return slices.Contains(f.Repos, r)
	}
	return false
}

// hasRepo is hasCapability(f, "repo:"+repo) without the concatenation.
func hasRepo(f *fleet.Factory, repo string) bool {
	if slices.Contains(f.Repos, repo) {
		return true
	}
	for _, c := range f.Capabilities {
		if isToken(c, repoPrefix, repo) {
			return true
		}
	}
	return false
}

// verdict is the outcome of the hard filter; the order of the constants is
// the order of the checks, and the order reasons are summarised in on ties.
type verdict uint8

const (
	admitted verdict = iota
	lacksCapability
	isDown
	isDraining
	isCooling
	outOfScope
	seatsFull
)

// verdict runs the hard filter in its documented order and reports the first
// failure. Capabilities come first because they say whether the factory could
// ever run this job: a factory that lacks the repo is not "busy" for it, even
// when it is also full or down.
func (n *need) verdict(f *fleet.Factory) verdict {
	switch {
	case !n.satisfiedBy(f):
		return lacksCapability
	case f.Health == fleet.HealthDown:
		return isDown
	case f.Draining:
		return isDraining
	case n.cooling(f) != "":
		return isCooling
	case !f.Serves(n.product):
		return outOfScope
	case f.FreeSeats() <= 0:
		return seatsFull
	}
	return admitted
}

// admits is n.verdict(f) == admitted with the cheap field comparisons first.
// The hot paths need only the yes/no, so they skip the capability scans for
// the many factories that are full, down or out of scope.
func (n *need) admits(f *fleet.Factory) bool {
	return f.FreeSeats() > 0 && f.Health != fleet.HealthDown && !f.Draining && f.Serves(n.product) && n.satisfiedBy(f) &&
		n.cooling(f) == ""
}

// cooling returns the first capability the job needs that f cools down
// for (an engine whose provider rate-limited f's account), or "".
func (n *need) cooling(f *fleet.Factory) string {
	if len(f.Cooldowns) == 0 {
		return ""
	}
	for _, c := range n.caps {
		if _, ok := f.CoolingFor(c, n.now); ok {
			return c
		}
	}
	return ""
}

// reason words a failed verdict for one factory. Explain calls it for every
// ineligible factory, so it builds each reason in one allocation (none for
// the constant ones) rather than through fmt and intermediate slices.
func (n *need) reason(f *fleet.Factory, v verdict) string {
	switch v {
	case lacksCapability:
		return n.missingReason(f)
	case isDown:
		return "factory is down"
	case isDraining:
		return "factory is draining"
	case isCooling:
		c := n.cooling(f)
		until, _ := f.CoolingFor(c, n.now)
		return "cooling down for " + c + " until " + until.UTC().Format(time.RFC3339) + " (rate limited)"
	case outOfScope:
		if n.scopeReason == "" {
			n.scopeReason = "not scoped to product " + n.product
		}
		return n.scopeReason
	case seatsFull:
		return seatsReason(f)
	}
	return ""
}

// seatsReason words a full factory's seats: both counts, so a gap between
// what the coordinator granted and what the factory reported shows
// ("no free seat (leases 1, reported 0 of 1)").
func seatsReason(f *fleet.Factory) string {
	var b strings.Builder
	b.Grow(64)
	b.WriteString("no free seat (leases ")
	b.WriteString(strconv.Itoa(f.Leases))
	if f.Offers > 0 {
		b.WriteString(", dispatched ")
		b.WriteString(strconv.Itoa(f.Offers))
	}
	b.WriteString(", reported ")
	b.WriteString(strconv.Itoa(f.Load))
	b.WriteString(" of ")
	b.WriteString(strconv.Itoa(f.SeatLimit))
	b.WriteString(")")
	return b.String()
}

// missingReason lists what f lacks, plain capabilities first and repos after
// ("missing capability engine:codex; missing repo:notes"), because a missing
// repo is fixed differently (check it out) from a missing capability.
func (n *need) missingReason(f *fleet.Factory) string {
	var caps, repos int
	for _, c := range n.tokens() {
		if !hasCapability(f, c) {
			if strings.HasPrefix(c, repoPrefix) {
				repos++
			} else {
				caps++
			}
		}
	}
	var b strings.Builder
	b.Grow(64)
	if caps > 0 {
		b.WriteString("missing ")
		b.WriteString(plural(caps, "capability ", "capabilities "))
		n.writeMissing(&b, f, false)
	}
	if repos > 0 {
		if caps > 0 {
			b.WriteString("; ")
		}
		b.WriteString("missing ")
		n.writeMissing(&b, f, true)
	}
	return b.String()
}

// writeMissing writes the required tokens f lacks, of the repo kind or not,
// comma-separated in sorted order.
func (n *need) writeMissing(b *strings.Builder, f *fleet.Factory, repoKind bool) {
	first := true
	for _, c := range n.tokens() {
		if strings.HasPrefix(c, repoPrefix) != repoKind || hasCapability(f, c) {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		b.WriteString(c)
		first = false
	}
}

// Reasons a job has no eligible factory start with one of these prefixes.
const (
	// UnroutablePrefix: nothing could run the job as the fleet stands (no
	// factory enrolled, or a capability nobody has); it needs a change.
	UnroutablePrefix = view.UnroutablePrefix
	// NoEligiblePrefix: factories could run the job, but none can now
	// (seats full, down, draining, cooling); the counts after it move with
	// every heartbeat.
	NoEligiblePrefix = view.NoEligiblePrefix
)

// Reason is why a job has no eligible factory: its kind, decided where the
// reason is made, and its text for people (starting with UnroutablePrefix
// or NoEligiblePrefix as the kind says).
type Reason struct {
	Kind fleet.UnroutableKind
	Text string
}

// Transient reports whether r describes a passing state of the fleet rather
// than a job nothing can run.
func (r Reason) Transient() bool { return r.Kind == fleet.UnroutableBusy }

func noFactory(text string) Reason {
	return Reason{Kind: fleet.UnroutableNoFactory, Text: UnroutablePrefix + text}
}

// unroutable explains why no factory in fs is eligible. It distinguishes
// three situations because they call for different fixes: none serving the
// product (start or enrol one for it), a capability nobody has (fix the
// job, or enrol a factory that has it: the seed's capabilities=[build] form
// default), and factories that could run the job but not now (wait, or add
// capacity).
//
// It judges only the factories serving the job's product (f.Serves, the
// rule catalog.Scope sees by): the reason is shown to that product's
// operators (the job's dispatch, /explain, the submit warning), and a
// product-scoped operator learns nothing of other products' factories,
// neither what they hold nor how many there are.
func (n *need) unroutable(fs []*fleet.Factory) Reason {
	serves := func(f *fleet.Factory) bool { return f != nil && f.Serves(n.product) }
	if !slices.ContainsFunc(fs, serves) {
		return noFactory("no factory serves product " + n.product)
	}

	var unheld []string
	for _, c := range n.tokens() {
		held := slices.ContainsFunc(fs, func(f *fleet.Factory) bool { return serves(f) && hasCapability(f, c) })
		if !held {
			unheld = append(unheld, c)
		}
	}
	if len(unheld) > 0 {
		return noFactory("no factory has " + plural(len(unheld), "capability", "capabilities") + " " + strings.Join(unheld, ", "))
	}

	// Count factories per reason. A factory missing several capabilities
	// counts once under each, so the operator sees which capability is
	// short, not an opaque "lack a required capability".
	type key struct {
		v     verdict
		token string
	}
	counts := map[key]int{}
	for _, f := range fs {
		if !serves(f) {
			continue
		}
		switch v := n.verdict(f); v {
		case admitted:
		case lacksCapability:
			for _, c := range n.tokens() {
				if !hasCapability(f, c) {
					counts[key{v, c}]++
				}
			}
		case isCooling:
			counts[key{v, n.cooling(f)}]++
		default:
			counts[key{v, ""}]++
		}
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	// Most common reason first, as it is the one worth acting on; then the
	// filter order and the token, so the text is stable.
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.v, b.v); c != 0 {
			return c
		}
		return cmp.Compare(a.token, b.token)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		c := counts[k]
		s := strconv.Itoa(c) + " "
		switch k.v {
		case lacksCapability:
			s += plural(c, "lacks ", "lack ") + k.token
		case isDown:
			s += plural(c, "is", "are") + " down"
		case isDraining:
			s += plural(c, "is", "are") + " draining"
		case isCooling:
			s += plural(c, "is", "are") + " cooling down for " + k.token
		case seatsFull:
			s += plural(c, "has", "have") + " no free seat"
		}
		parts = append(parts, s)
	}
	return Reason{Kind: fleet.UnroutableBusy, Text: NoEligiblePrefix + strings.Join(parts, ", ")}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
