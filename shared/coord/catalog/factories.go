package catalog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// FactoryTokenPrefix starts every factory token, so a leaked one is easy to
// recognise in logs and by secret scanners.
const FactoryTokenPrefix = "fft_"

// EnrollRequest describes a factory being enrolled.
type EnrollRequest struct {
	FactoryID      string
	Kind           fleet.FactoryKind
	Products       []string
	Capabilities   []string
	SeatLimit      int
	CostPerHourUSD float64
}

// Enroll registers a factory and issues its token. The token is returned
// once; only its hash is stored.
func (c *Service) Enroll(ctx context.Context, req EnrollRequest) (*fleet.Factory, string, error) {
	if err := fleet.ValidateName("factoryId", req.FactoryID); err != nil {
		return nil, "", err
	}
	switch req.Kind {
	case "":
		req.Kind = fleet.KindStatic
	case fleet.KindStatic, fleet.KindElastic:
	default:
		return nil, "", fleet.Invalid("kind", "unknown kind %q (want static or elastic)", req.Kind)
	}
	products, err := fleet.ValidateNames("products", req.Products, fleet.MaxProducts)
	if err != nil {
		return nil, "", err
	}
	caps, err := fleet.ValidateCapabilities("capabilities", req.Capabilities)
	if err != nil {
		return nil, "", err
	}
	if req.SeatLimit == 0 {
		req.SeatLimit = 1
	}
	if req.SeatLimit < 1 || req.SeatLimit > 1000 {
		return nil, "", fleet.Invalid("seatLimit", "must be between 1 and 1000")
	}
	if req.CostPerHourUSD < 0 {
		return nil, "", fleet.Invalid("costPerHourUsd", "must not be negative")
	}
	secret, hash, err := newFactoryToken()
	if err != nil {
		return nil, "", err
	}
	now := c.k.Now()
	f := &fleet.Factory{
		ID: req.FactoryID, Kind: req.Kind, Products: products, Capabilities: caps,
		Repos: []string{}, SeatLimit: req.SeatLimit, Health: fleet.HealthOK, CostPerHourUSD: req.CostPerHourUSD,
		TokenID: hash, Enrollment: c.k.NewID("e"), EnrolledAt: now, UpdatedAt: now,
	}
	f.ProductID = factoryProduct(f)
	body, err := json.Marshal(f)
	if err != nil {
		return nil, "", err
	}
	// The token first: alone it authenticates nothing (a token counts only
	// for the factory that names it), while a factory without its token
	// could never authenticate, and its id could not be enrolled again,
	// if the process died between the two writes.
	if err := c.putToken(ctx, f, hash, f.Products, f.Capabilities); err != nil {
		return nil, "", err
	}
	rev, err := c.k.Store.Create(ctx, store.Factories, f.ID, f.ID, body)
	if err != nil {
		_ = c.k.Store.Delete(context.WithoutCancel(ctx), store.Tokens, hash, hash, "")
	}
	if errors.Is(err, store.ErrExists) {
		return nil, "", fleet.Errorf(fleet.CodeConflict, "factory %s is already enrolled; rotate its token or deregister it first", f.ID)
	}
	if err != nil {
		return nil, "", fmt.Errorf("create factory %s: %w", f.ID, err)
	}
	f.Rev = rev
	c.factories.invalidate()
	c.fleetChanged(ctx)
	return f, secret, nil
}

// factoryProduct is the productId a factory document carries: the first
// product it serves, or "*" for a factory serving every product.
func factoryProduct(f *fleet.Factory) string {
	if len(f.Products) > 0 {
		return f.Products[0]
	}
	return "*"
}

func newFactoryToken() (secret, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("generate token: %w", err)
	}
	secret = FactoryTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, hashToken(secret), nil
}

func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func (c *Service) putToken(ctx context.Context, f *fleet.Factory, hash string, products, capabilities []string) error {
	t := fleet.Token{ID: hash, ProductID: f.ProductID, FactoryID: f.ID, Enrollment: f.Enrollment,
		Products: products, Capabilities: capabilities, IssuedAt: c.k.Now()}
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if _, err := c.k.Store.Create(ctx, store.Tokens, hash, hash, body); err != nil {
		return fmt.Errorf("store token of %s: %w", f.ID, err)
	}
	return nil
}

// AuthenticateFactory resolves a factory token. Unknown and revoked tokens
// are both ErrUnauthenticated: a caller learns nothing about which.
func (c *Service) AuthenticateFactory(ctx context.Context, secret string) (*fleet.Token, error) {
	hash := hashToken(secret)
	if c.tokens.due(c.k.Now(), c.cfg.TokenCacheTTL) {
		// One point read per TokenCacheTTL per process: did any token of
		// the fleet stop being valid? If it cannot be read, trust no entry.
		l, _, err := c.k.ReadLedger(ctx)
		c.tokens.checked(kernel.LedgerTokensOf(l), err == nil)
	}
	if t, ok := c.tokens.get(hash, c.k.Now()); ok {
		return t, nil
	}
	gen := c.tokens.generation()
	it, err := c.k.Store.Read(ctx, store.Tokens, hash, hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, fmt.Errorf("read token: %w", err)
	}
	t, err := kernel.Decode[fleet.Token](it)
	if err != nil {
		return nil, err
	}
	// The lookup already matched on the hash; compare again in constant time
	// so no code path compares secret material with an early exit.
	if subtle.ConstantTimeCompare([]byte(t.ID), []byte(hash)) != 1 || t.Revoked {
		return nil, ErrUnauthenticated
	}
	// Only a live factory's current token authenticates: not one whose
	// factory was deregistered (whatever became of its revocation), nor one
	// of an earlier enrollment or a rotation that lost a race.
	f, err := c.GetFactory(ctx, t.FactoryID)
	if errors.Is(err, fleet.ErrNotFound) {
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(f.TokenID), []byte(hash)) != 1 {
		return nil, ErrUnauthenticated
	}
	c.tokens.put(hash, t, c.k.Now().Add(tokenMaxAge), gen)
	return t, nil
}

// ErrUnauthenticated: the token is unknown or revoked.
var ErrUnauthenticated = &fleet.Error{Code: fleet.CodeUnauthenticated, Message: "unknown or revoked token"}

// GetFactory reads one factory.
func (c *Service) GetFactory(ctx context.Context, id string) (*fleet.Factory, error) {
	f, it, err := kernel.ReadDoc[fleet.Factory](ctx, c.k.Store, store.Factories, id, id, "factory")
	if err != nil {
		return nil, err
	}
	f.Rev = it.Rev
	return c.EffectiveHealth(f), nil
}

// ListFactories returns every factory, fresh from the store, sorted by id.
// With productID set, only factories serving that product. It counts no
// seats (Leases, Offers): that query is paid only where the scheduler reads
// factories (listFactories), not by the GC plan and metrics timers.
func (c *Service) ListFactories(ctx context.Context, productID string) ([]*fleet.Factory, error) {
	all, err := c.readFactories(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*fleet.Factory, 0, len(all))
	for _, f := range all {
		if productID == "" || f.Serves(productID) {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b *fleet.Factory) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// mutateFactory is the factory counterpart of mutateJob: a CAS loop that
// starts from this process's last copy of the document when it has one, so
// a steady heartbeat costs one write and no read.
func (c *Service) mutateFactory(ctx context.Context, id string, fn func(f *fleet.Factory) error) (*fleet.Factory, error) {
	f, written, err := kernel.CAS(ctx, c.k, kernel.FactoryDocs.WithCache(c.factoryDocs), id, id, func(f *fleet.Factory) error {
		if err := fn(f); err != nil {
			return err
		}
		f.UpdatedAt = c.k.Now()
		return nil
	})
	if written {
		cached := *f
		c.factories.update(c.EffectiveHealth(&cached))
	}
	return f, err
}

// Heartbeat is what a factory reports about itself.
type Heartbeat struct {
	Capabilities []string
	Repos        []string
	Load         int
	Health       fleet.Health
	SeatLimit    int
	// Cooldowns replace the stored set (nil: none).
	Cooldowns map[string]time.Time
}

// Heartbeat records a factory's report. Capabilities must stay inside the
// token's capability scope, when it has one. New capabilities or repos make
// waiting jobs routable again, so they trigger a dispatch pass.
func (c *Service) Heartbeat(ctx context.Context, tok *fleet.Token, hb Heartbeat) (*fleet.Factory, error) {
	caps, err := fleet.ValidateCapabilities("capabilities", hb.Capabilities)
	if err != nil {
		return nil, err
	}
	if len(tok.Capabilities) > 0 {
		for i, cp := range caps {
			if !slices.Contains(tok.Capabilities, cp) {
				return nil, &fleet.Error{Code: fleet.CodeForbidden, Field: fmt.Sprintf("capabilities[%d]", i),
					Message: fmt.Sprintf("capability %s is outside this factory token's scope", cp)}
			}
		}
	}
	repos, err := fleet.ValidateNames("repos", hb.Repos, fleet.MaxRepos)
	if err != nil {
		return nil, err
	}
	health, err := fleet.ParseHealth("health", string(hb.Health))
	if err != nil {
		return nil, err
	}
	if hb.Load < 0 {
		return nil, fleet.Invalid("load", "must not be negative")
	}
	if hb.SeatLimit < 0 || hb.SeatLimit > 1000 {
		return nil, fleet.Invalid("seatLimit", "must be between 0 (unchanged) and 1000")
	}
	cooldowns, err := fleet.ValidateCooldowns("cooldowns", hb.Cooldowns, c.k.Now())
	if err != nil {
		return nil, err
	}
	routingChanged := false
	f, err := c.mutateFactory(ctx, tok.FactoryID, func(f *fleet.Factory) error {
		// A cooldown that starts or ends changes where jobs may go: one
		// that ended lets waiting jobs flow to this factory again.
		routingChanged = !slices.Equal(f.Capabilities, caps) || !slices.Equal(f.Repos, repos) ||
			f.Health != health || (hb.SeatLimit > 0 && hb.SeatLimit != f.SeatLimit) ||
			!maps.EqualFunc(f.Cooldowns, cooldowns, time.Time.Equal)
		f.Capabilities, f.Repos, f.Load, f.Health, f.Cooldowns = caps, repos, hb.Load, health, cooldowns
		if hb.SeatLimit > 0 {
			f.SeatLimit = hb.SeatLimit
		}
		f.LastHeartbeatAt = c.k.Now()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if routingChanged {
		c.fleetChanged(ctx)
	}
	return f, nil
}

// CoolDown adds cooldowns to a factory's stored set (fleet.MergeCooldowns):
// what a failed run reports, so that a factory that never heartbeats, an
// elastic pool's execution, still keeps the job it gives back from being
// sent straight back to the same account. Nothing new writes nothing.
func (c *Service) CoolDown(ctx context.Context, factoryID string, add map[string]time.Time) error {
	add, err := fleet.ValidateCooldowns("cooldowns", add, c.k.Now())
	if err != nil || len(add) == 0 {
		return err
	}
	_, err = c.mutateFactory(ctx, factoryID, func(f *fleet.Factory) error {
		merged := fleet.MergeCooldowns(f.Cooldowns, add, c.k.Now())
		if maps.EqualFunc(f.Cooldowns, merged, time.Time.Equal) {
			return kernel.ErrNoChange
		}
		f.Cooldowns = merged
		return nil
	})
	return err
}

// SetDraining drains a factory (draining true) or puts it back into service.
// A draining factory passes no hard filter, so it gets no new assignments
// (dispatch, claim, accept, preemption room) while it keeps, renews and
// finishes the jobs it holds; jobs already dispatched to it are dispatched
// again by the sweep. Undraining retries waiting jobs at once.
func (c *Service) SetDraining(ctx context.Context, id string, draining bool) (*fleet.Factory, error) {
	f, err := c.mutateFactory(ctx, id, func(f *fleet.Factory) error {
		if f.Draining == draining {
			return kernel.ErrNoChange
		}
		f.Draining = draining
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.fleetChanged(ctx)
	return f, nil
}

// Deregister removes a factory and revokes every token of its enrollment.
// Jobs it held are reaped when their leases expire; jobs dispatched to it
// are re-dispatched by the sweep.
//
// The document goes first, at the revision read: from then on no token of
// the factory authenticates, and a racing rotation either installed its
// token before (and the sweep of the factory's tokens below revokes it) or
// fails to install it and revokes it itself.
func (c *Service) Deregister(ctx context.Context, id string) error {
	_, err := c.deregister(ctx, id, nil)
	return err
}

// errKept is deregister's answer when keep spared the factory.
var errKept = errors.New("factory kept")

// deregister is Deregister. keep, when set, judges the factory as read for
// the delete (the delete is conditional on that revision): true spares it
// with errKept. It returns the deleted factory, nil when none was deleted.
func (c *Service) deregister(ctx context.Context, id string, keep func(*fleet.Factory) bool) (*fleet.Factory, error) {
	c.factoryDocs.Drop(id, id)
	var f *fleet.Factory
	for attempt := 0; ; attempt++ {
		if attempt == kernel.MaxCASAttempts {
			return nil, &kernel.ConflictError{Kind: "factory", ID: id, Attempts: kernel.MaxCASAttempts}
		}
		var err error
		if f, err = c.GetFactory(ctx, id); err != nil {
			return nil, err
		}
		if keep != nil && keep(f) {
			return nil, errKept
		}
		err = c.k.Store.Delete(ctx, store.Factories, id, id, f.Rev)
		if errors.Is(err, store.ErrPrecondition) {
			continue
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, kernel.NotFound("factory", id)
		}
		if err != nil {
			return nil, fmt.Errorf("delete factory %s: %w", id, err)
		}
		break
	}
	c.factoryDocs.Drop(id, id)
	c.factories.invalidate()
	// Its tokens no longer authenticate anywhere once other processes see
	// this bump, whatever becomes of the revocations below.
	c.tokens.dropAll()
	if err := c.k.Bump(ctx, kernel.LedgerTokens); err != nil {
		return f, err
	}
	return f, c.revokeFactoryTokens(ctx, f)
}

// revokeFactoryTokens revokes every live token issued to f's enrollment
// (a later enrollment of the same id keeps its own).
func (c *Service) revokeFactoryTokens(ctx context.Context, f *fleet.Factory) error {
	items, err := c.k.QueryAll(ctx, store.Tokens, store.Query{Where: []store.Cond{store.Eq("factoryId", f.ID), store.Eq("revoked", false)}})
	if err != nil {
		return err
	}
	hashes := []string{f.TokenID}
	for _, it := range items {
		t, err := kernel.Decode[fleet.Token](it)
		if err != nil {
			return err
		}
		if t.Enrollment == f.Enrollment && t.ID != f.TokenID {
			hashes = append(hashes, t.ID)
		}
	}
	var errs []error
	for _, h := range hashes {
		errs = append(errs, c.revokeTokenID(ctx, h))
	}
	return errors.Join(errs...)
}

// RotateToken issues a new token for the factory and revokes the old one.
func (c *Service) RotateToken(ctx context.Context, id string) (string, error) {
	f, err := c.GetFactory(ctx, id)
	if err != nil {
		return "", err
	}
	// The new token keeps the scope the factory was enrolled with. The
	// factory document's capabilities are what it last reported, which may
	// be less: scoping the new token to them would forbid the rest for good.
	products, capabilities := f.Products, f.Capabilities
	if f.TokenID != "" {
		it, err := c.k.Store.Read(ctx, store.Tokens, f.TokenID, f.TokenID)
		switch {
		case err == nil:
			old, err := kernel.Decode[fleet.Token](it)
			if err != nil {
				return "", err
			}
			products, capabilities = old.Products, old.Capabilities
		case !errors.Is(err, store.ErrNotFound):
			return "", fmt.Errorf("read token of %s: %w", id, err)
		}
	}
	secret, hash, err := newFactoryToken()
	if err != nil {
		return "", err
	}
	if err := c.putToken(ctx, f, hash, products, capabilities); err != nil {
		return "", err
	}
	old := ""
	if _, err := c.mutateFactory(ctx, id, func(f *fleet.Factory) error {
		old, f.TokenID = f.TokenID, hash
		return nil
	}); err != nil {
		_ = c.revokeTokenID(ctx, hash)
		return "", err
	}
	if err := c.revokeTokenID(ctx, old); err != nil {
		return "", err
	}
	return secret, nil
}

// RevokeToken revokes the factory's token; the factory stays enrolled and
// can be given a new one with RotateToken.
func (c *Service) RevokeToken(ctx context.Context, id string) error {
	f, err := c.GetFactory(ctx, id)
	if err != nil {
		return err
	}
	return c.revokeTokenID(ctx, f.TokenID)
}

func (c *Service) revokeTokenID(ctx context.Context, hash string) error {
	if hash == "" {
		return nil
	}
	// Forget it here first: this process refuses it from now on, whatever
	// the outcome of the write below. Forget it again once the write is
	// done: a lookup that read the unrevoked token meanwhile started after
	// the first drop, and the second one voids its cache entry.
	c.tokens.drop(hash)
	defer c.tokens.drop(hash)
	_, _, err := kernel.CAS(ctx, c.k, kernel.TokenDocs, hash, hash, func(t *fleet.Token) error {
		if t.Revoked {
			return kernel.ErrNoChange
		}
		t.Revoked = true
		return nil
	})
	if errors.Is(err, fleet.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// Other processes forget their cached tokens when they next read the
	// ledger (within TokenCacheTTL). Bumped after the write, also when it
	// was revoked already: a retry after a failed bump bumps then.
	return c.k.Bump(ctx, kernel.LedgerTokens)
}

// EffectiveHealth sets f.Health to what its silence implies. Health is
// derived wherever a factory is read (listFactories, GetFactory), so a
// factory that stops heartbeating is stale StaleAfter and down DownAfter
// after its last heartbeat to the second, with no timer writing it (an
// earlier version's prune timer queried every factory each tick to store
// what readers now derive). Elastic pools
// are never judged by silence: a pool scaled to zero sends nothing and must
// stay schedulable, or no job would ever scale it up. f must be the
// caller's own copy.
func (c *Service) EffectiveHealth(f *fleet.Factory) *fleet.Factory {
	if f.Kind != fleet.KindElastic {
		f.Health = c.silentHealth(f)
	}
	return f
}

// silentHealth is the health a static factory's silence implies; a factory
// that heartbeats on time keeps what it reported (a stored "stale" is a
// mark an earlier version's prune timer wrote: ok again).
func (c *Service) silentHealth(f *fleet.Factory) fleet.Health {
	since := c.k.Now().Sub(lastSeen(f))
	switch {
	case since >= c.cfg.DownAfter:
		return fleet.HealthDown
	case since >= c.cfg.StaleAfter:
		return fleet.HealthStale
	case f.Health == fleet.HealthStale:
		return fleet.HealthOK
	}
	return f.Health
}

// lastSeen is a factory's last sign of life: its last heartbeat, or its
// enrolment when it never sent one.
func lastSeen(f *fleet.Factory) time.Time {
	if f.LastHeartbeatAt.IsZero() {
		return f.EnrolledAt
	}
	return f.LastHeartbeatAt
}

// fleetChanged runs the hook that retries waiting jobs after the fleet
// changed (set by the dispatcher).
func (c *Service) fleetChanged(ctx context.Context) {
	if c.onFleetChange != nil {
		c.onFleetChange(ctx)
	}
}
