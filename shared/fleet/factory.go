package fleet

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// FactoryKind says how a factory lives.
type FactoryKind string

// Factory kinds.
const (
	// KindStatic is a long-running host that heartbeats.
	KindStatic FactoryKind = "static"
	// KindElastic is a pool that scales to zero and sends no heartbeat while
	// idle, so silence never makes it unschedulable.
	KindElastic FactoryKind = "elastic"
)

// FactoryKinds lists every factory kind.
func FactoryKinds() []FactoryKind { return []FactoryKind{KindStatic, KindElastic} }

// Health is a factory's health as reported or as derived from silence.
type Health string

// Health values. Stale and down are derived from missed heartbeats when a
// factory is read (coord); a factory reports ok or its own health.
const (
	HealthOK       Health = "ok"
	HealthDegraded Health = "degraded"
	HealthStale    Health = "stale"
	HealthDown     Health = "down"
)

// Healths lists every health a factory may show.
func Healths() []Health { return []Health{HealthOK, HealthDegraded, HealthStale, HealthDown} }

// ReportedHealths lists the healths a factory may report: stale is only
// ever derived from its silence.
func ReportedHealths() []Health { return []Health{HealthOK, HealthDegraded, HealthDown} }

// ParseHealth validates a health a factory reports; it may not claim stale.
func ParseHealth(field, s string) (Health, error) {
	switch h := Health(s); {
	case h == "":
		return HealthOK, nil
	case slices.Contains(ReportedHealths(), h):
		return h, nil
	}
	return "", Invalid(field, "unknown health %q (want %s)", s, alternatives(ReportedHealths()))
}

// Factory is a worker host or an elastic pool of them.
type Factory struct {
	ID   string      `json:"id"`
	Kind FactoryKind `json:"kind"`
	// ProductID is the first product of Products: every document carries one.
	ProductID    string   `json:"productId"`
	Products     []string `json:"products"`
	Capabilities []string `json:"capabilities"`
	Repos        []string `json:"repos"`
	SeatLimit    int      `json:"seatLimit"`
	// Load is the load the factory last reported in a heartbeat, kept as
	// reported: it also counts work the factory does outside the fleet.
	Load int `json:"load"`
	// Leases and Offers are never stored: the coordinator counts them where
	// the scheduler reads factories (coord/cache.go), from what it granted
	// itself rather than from a report that may lag or never come (an
	// elastic pool sends none). Leases is the live leases it holds for the
	// factory; Offers the dispatches this process sent the factory that it
	// has not taken yet.
	Leases         int     `json:"-"`
	Offers         int     `json:"-"`
	Health         Health  `json:"health"`
	CostPerHourUSD float64 `json:"costPerHourUsd,omitempty"`
	// Draining is set by an operator (POST /fleet/factories/{id}/drain): the
	// factory gets no new assignments and keeps the jobs it runs.
	Draining bool `json:"draining,omitempty"`
	// Cooldowns are the engines the factory's accounts may not use until
	// the time given ("engine:claude" -> until), as its last heartbeat
	// reported them after a provider's rate limit.
	Cooldowns map[string]time.Time `json:"cooldowns,omitempty"`
	// TokenID is the hash of the factory's current token (not secret).
	TokenID string `json:"tokenId,omitempty"`
	// Enrollment names this enrollment of the id; its tokens carry it, so
	// deregistering revokes them and not those of a later enrollment.
	Enrollment      string    `json:"enrollment,omitempty"`
	LastHeartbeatAt time.Time `json:"lastHeartbeatAt,omitzero"`
	EnrolledAt      time.Time `json:"enrolledAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
	Rev             string    `json:"-"`
}

// Serves reports whether the factory may work for product. A factory with no
// products listed serves every product.
func (f *Factory) Serves(product string) bool {
	return len(f.Products) == 0 || slices.Contains(f.Products, product)
}

// EffectiveCapabilities is the declared capabilities plus repo:<name> for each
// repo the factory has locally.
func (f *Factory) EffectiveCapabilities() []string {
	caps := slices.Clone(f.Capabilities)
	for _, r := range f.Repos {
		caps = append(caps, RepoCapability(r))
	}
	return caps
}

// Occupied is how many seats the scheduler treats as taken: the seats the
// coordinator counted (leases and its pending dispatches) or the load the
// factory reported, whichever is larger.
func (f *Factory) Occupied() int { return max(f.Load, f.Leases+f.Offers) }

// FreeSeats is how many more jobs the factory can take.
func (f *Factory) FreeSeats() int { return max(f.SeatLimit-f.Occupied(), 0) }

// RepoCapability is the capability token for having repo checked out.
func RepoCapability(repo string) string { return "repo:" + repo }

// Product is a tenant: billing, budgets and token scope. It owns repos.
type Product struct {
	ID        string   `json:"id"`
	ProductID string   `json:"productId"`
	Name      string   `json:"name,omitempty"`
	Repos     []string `json:"repos"`
	// Tracker is where the events of the product's tracked jobs are
	// echoed; nil when nowhere. Its secret is stored, never shown: the
	// API answers with View.
	Tracker *TrackerConfig `json:"tracker,omitempty"`
	// Forge is where the product's delivered jobs become pull requests;
	// nil when they do not.
	Forge *ForgeConfig `json:"forge,omitempty"`
	// MaxRunning caps how many of the product's jobs hold a lease at once;
	// 0 is uncapped.
	MaxRunning int `json:"maxRunning"`
	// Seats are the leases counted against MaxRunning, by job id (see
	// seats.go): taken with the assignment, freed when its lease ends.
	Seats     map[string]Seat `json:"seats,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
	Rev       string          `json:"-"`
}

// RepoOwner records which product owns a repo: one document per repo, so
// that claiming a repo is one compare-and-swap on it whatever the backend.
type RepoOwner struct {
	ID        string    `json:"id"`        // the repo
	ProductID string    `json:"productId"` // its owner
	UpdatedAt time.Time `json:"updatedAt"`
	Rev       string    `json:"-"`
}

// Owns reports whether the product owns repo.
func (p *Product) Owns(repo string) bool { return slices.Contains(p.Repos, repo) }

// QueueState is a product's monotonic change counter: bumped on every job
// creation and stage change, so a polling factory can skip the expensive
// claim while nothing changed.
type QueueState struct {
	ID        string `json:"id"`
	ProductID string `json:"productId"`
	Version   int64  `json:"version"`
}

// PrincipalKind is who a token belongs to.
type PrincipalKind string

// Principal kinds.
const (
	PrincipalOperator PrincipalKind = "operator"
	PrincipalFactory  PrincipalKind = "factory"
)

// Token is an issued factory token, stored under the hash of its secret.
type Token struct {
	ID           string    `json:"id"` // hex SHA-256 of the secret
	ProductID    string    `json:"productId"`
	FactoryID    string    `json:"factoryId"`
	Enrollment   string    `json:"enrollment,omitempty"`
	Products     []string  `json:"products"`
	Capabilities []string  `json:"capabilities"`
	Revoked      bool      `json:"revoked"`
	IssuedAt     time.Time `json:"issuedAt"`
	Rev          string    `json:"-"`
}

// MaxCooldowns bounds the cooldowns one heartbeat may report.
const MaxCooldowns = 32

// MaxCooldown is the furthest ahead a cooldown may reach: provider limits
// reset within a day, and a longer one is a factory's clock or a bug.
const MaxCooldown = 24 * time.Hour

// CoolingFor returns until when the factory cools down for capability c
// ("engine:<name>"), or false when it does not at now.
func (f *Factory) CoolingFor(c string, now time.Time) (time.Time, bool) {
	until, ok := f.Cooldowns[c]
	if !ok || !until.After(now) {
		return time.Time{}, false
	}
	return until, true
}

// MergeCooldowns adds cooldowns to a stored set, as a failure that reports
// one does (a heartbeat replaces the set instead): per engine the later
// until wins, entries over at now are dropped, and past MaxCooldowns the
// ones ending soonest go. It returns nil for an empty set; neither input
// is changed.
func MergeCooldowns(stored, add map[string]time.Time, now time.Time) map[string]time.Time {
	var out map[string]time.Time
	for _, set := range []map[string]time.Time{stored, add} {
		for k, until := range set {
			if !until.After(now) || (out != nil && !until.After(out[k])) {
				continue
			}
			if out == nil {
				out = map[string]time.Time{}
			}
			out[k] = until.UTC()
		}
	}
	for len(out) > MaxCooldowns {
		soonest := ""
		for k, until := range out {
			if soonest == "" || until.Before(out[soonest]) || (until.Equal(out[soonest]) && k < soonest) {
				soonest = k
			}
		}
		delete(out, soonest)
	}
	return out
}

// ValidateCooldowns checks a heartbeat's cooldowns: engine capabilities,
// at most MaxCooldowns, each until no further than MaxCooldown after now.
// Entries already over are dropped, so what is stored is only what binds.
func ValidateCooldowns(field string, cs map[string]time.Time, now time.Time) (map[string]time.Time, error) {
	if len(cs) > MaxCooldowns {
		return nil, Invalid(field, "at most %d cooldowns, got %d", MaxCooldowns, len(cs))
	}
	var out map[string]time.Time
	for _, k := range slices.Sorted(maps.Keys(cs)) {
		f := field + "." + k
		name, ok := strings.CutPrefix(k, "engine:")
		if !ok {
			return nil, Invalid(f, "a cooldown names an engine capability, engine:<name>")
		}
		if err := ValidateName(f, name); err != nil {
			return nil, err
		}
		until := cs[k]
		if until.After(now.Add(MaxCooldown)) {
			return nil, Invalid(f, "until %s is more than %s ahead", until.UTC().Format(time.RFC3339), MaxCooldown)
		}
		if !until.After(now) {
			continue
		}
		if out == nil {
			out = map[string]time.Time{}
		}
		out[k] = until.UTC()
	}
	return out, nil
}
