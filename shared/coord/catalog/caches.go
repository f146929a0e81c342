package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// factoryCache holds the factory list the scheduler ranks, refreshed at most
// every ttl: dispatching a burst of jobs should not read every factory
// document once per job.
//
// It also counts each factory's occupied seats from what the coordinator
// granted, not from the load the factory last reported (issue 29: a
// one-seat factory that claimed a job and has not heartbeated since looked
// idle, so a critical job was sent to it and preempted nothing). The count
// is derived, not kept: the first refresh runs one query for the leased
// jobs (assigned or building) beside the factory query; later refreshes
// read only the jobs changed since, from the jobs change feed (any
// process's writes; issue 25: with 2,000 jobs leased, querying them all
// every second put 20 query pages into one dispatch in a hundred), and
// every job this process writes (mutateJob) corrects it between refreshes.
// A counter on the
// factory document, taken by CAS like a product's seats (admission/seats.go), would
// cost two factory writes per lease (grant and end), contend with the
// heartbeat's CAS on the same document, and need leaks reclaimed after a
// crash; the query costs nothing per lease, nothing while nothing is
// scheduled (idle sweeps never list factories), and cannot leak: a seat is
// free once its lease has expired. Its price is staleness: a lease another
// process granted is seen within ttl.
//
// Dispatches count too, until taken: a dispatch is a promise of the seat,
// so two dispatches in one change-feed batch must not both go to a
// one-seat factory. Only this process's dispatches are known here (another
// process's are seen when the factory takes them); one counts until its job
// is leased, leaves the queue or loses its target, or RedispatchAfter has
// passed, when the sweep treats the dispatch as lost anyway.
type factoryCache struct {
	mu        sync.Mutex
	ttl       time.Duration
	offerTTL  time.Duration
	loadedAt  time.Time
	factories []*fleet.Factory
	// held is job id -> the factory holding its lease, until its expiry;
	// offers is job id -> the factory it was dispatched to, until the
	// dispatch counts as lost.
	held, offers map[string]seatUse
	// counted says factories carry the counts of held and offers; next is
	// the earliest time one of those counts runs out.
	counted bool
	next    time.Time
	// feed is the jobs change feed's continuation held is current to, as
	// of feedAt; "" until the first refresh queried every leased job.
	feed   string
	feedAt time.Time
	// refreshing is the refresh under way, nil when none is. One at a
	// time: callers that need one wait for it and take its result.
	refreshing *refresh
	// gen moves whenever the list is dropped: a refresh that read the
	// store before the drop does not put its list back.
	gen uint64
	// aheadFailed stops refreshing ahead after a background refresh
	// failed, until a refresh succeeds: a failing store is then read only
	// by a caller whose list is past its ttl, which gets the error.
	aheadFailed bool
	// written holds, by id, the factories this process wrote while the
	// refresh under way read: it may have read them before the write, and
	// its list takes these copies unless it read a later one (a drain set
	// here must hold at once, not after the list's ttl).
	written map[string]*fleet.Factory
	// noted is job id -> the version of it this process last wrote
	// through MutateJob, with the fields a refresh reads of it (noteJob).
	// A refresh that reads that version in the change feed takes them
	// from here rather than decoding the document. notes numbers the
	// notes: a refresh that succeeds drops those made before it began, as
	// their versions were in what it or an earlier refresh read (or it
	// queried every lease), so no later read meets them; one that did
	// would decode it.
	noted map[string]note
	notes uint64
}

// note is a job version this process wrote: its revision, its number
// among the notes, and what a refresh would decode of it.
type note struct {
	rev  string
	seq  uint64
	view leaseView
}

// maxNoted bounds noted (a refresh at 100 jobs/s meets about 80 jobs):
// past it the notes are dropped, and the next refresh decodes those
// versions, as it decodes another process's.
const maxNoted = 1 << 14

// refresh is one read of the factories and the changed leases; done is
// closed when it ended, with fs (the counted list, when it was kept) or
// err set.
type refresh struct {
	done chan struct{}
	fs   []*fleet.Factory
	err  error
}

// seatUse is one seat a job takes on a factory until a time.
type seatUse struct {
	factoryID string
	until     time.Time
}

func newFactoryCache(ttl, offerTTL time.Duration) *factoryCache {
	return &factoryCache{ttl: ttl, offerTTL: offerTTL, held: map[string]seatUse{}, offers: map[string]seatUse{}, noted: map[string]note{}}
}

// update puts a factory this process just wrote into the cached list, so
// a heartbeat does not force the next dispatch to re-read every factory.
func (fc *factoryCache) update(f *fleet.Factory) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.written != nil {
		cp := *f
		fc.written[f.ID] = &cp
	}
	for i, cur := range fc.factories {
		if cur.ID == f.ID {
			cp := *f
			cp.Leases, cp.Offers = cur.Leases, cur.Offers
			fc.factories = append(fc.factories[:i:i], append([]*fleet.Factory{&cp}, fc.factories[i+1:]...)...)
			return
		}
	}
	if fc.factories != nil {
		// A factory the list lacks: the next read must see it. (With no
		// list there is nothing to forget, and a refresh under way must
		// not be thrown away for every heartbeat.)
		fc.drop()
	}
}

// noteJob records the seat a job this process just wrote (or read
// unchanged: written false) takes now: its live lease, its dispatch not yet
// taken, or none. A version written is noted for the next refresh while
// that will read the change feed on from the last: not before the first
// refresh, nor when the last is older than leaseFeedMaxGap (both query
// every lease instead).
func (fc *factoryCache) noteJob(j *fleet.Job, written bool, now time.Time) {
	var held, offer seatUse
	switch {
	case j.Stage.Leased() && j.HolderFactoryID != "":
		held = seatUse{factoryID: j.HolderFactoryID, until: j.LeaseExpiresAt}
	case j.Stage == fleet.StageQueued && j.TargetFactoryID != "":
		offer = seatUse{factoryID: j.TargetFactoryID, until: j.Dispatch.At.Add(fc.offerTTL)}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if written && fc.feed != "" && now.Sub(fc.feedAt) <= leaseFeedMaxGap && j.Rev != "" {
		if len(fc.noted) >= maxNoted {
			fc.noted = map[string]note{} // clear would keep the table's size
		}
		fc.notes++
		// As decoding the stored version gives it: a time in UTC, without
		// a monotonic reading.
		fc.noted[j.ID] = note{rev: j.Rev, seq: fc.notes, view: leaseView{Stage: j.Stage, HolderFactoryID: j.HolderFactoryID,
			LeaseExpiresAt: j.LeaseExpiresAt.UTC(), TargetFactoryID: j.TargetFactoryID}}
	}
	heldSame := setUse(fc.held, j.ID, held)
	offerSame := setUse(fc.offers, j.ID, offer)
	fc.counted = fc.counted && heldSame && offerSame
	for _, u := range []seatUse{held, offer} {
		if u.factoryID != "" {
			fc.soonest(u.until)
		}
	}
}

// setUse sets or (u zero) deletes id's entry in m, and reports whether the
// factory it counts for is unchanged (so the counts are too).
func setUse(m map[string]seatUse, id string, u seatUse) bool {
	old := m[id]
	if u.factoryID == "" {
		delete(m, id)
	} else {
		m[id] = u
	}
	return old.factoryID == u.factoryID
}

// fresh reports whether the cached list may be served at now; the caller
// holds fc.mu.
func (fc *factoryCache) fresh(now time.Time) bool {
	return fc.factories != nil && now.Sub(fc.loadedAt) < fc.ttl
}

func (fc *factoryCache) invalidate() {
	fc.mu.Lock()
	fc.drop()
	fc.mu.Unlock()
}

// drop forgets the list; the caller holds fc.mu.
func (fc *factoryCache) drop() {
	fc.factories, fc.loadedAt = nil, time.Time{}
	fc.gen++
}

// Factories returns every factory, from the cache when it is fresh. A list
// past three quarters of its ttl is refreshed in the background while
// callers are still served the fresh one, so a steady stream of dispatches
// never waits for a refresh (issue 25: one dispatch in a hundred read the
// factories and the changed leases, 2 to 5 ms, and made the dispatch
// latency's p99). Only a list past its ttl, after a pause or a drop, is
// refreshed while callers wait; the staleness bound stays ttl. The store is
// read outside the lock, so one slow read never blocks callers that could
// be served from the cache or that give up on their context.
func (c *Service) Factories(ctx context.Context) ([]*fleet.Factory, error) {
	fc := c.factories
	for attempt := 1; ; attempt++ {
		now := c.k.Now()
		fc.mu.Lock()
		if fc.fresh(now) {
			if fc.refreshing == nil && !fc.aheadFailed && now.Sub(fc.loadedAt) >= fc.ttl*3/4 {
				r := fc.beginRefresh()
				go c.refreshAhead(r)
			}
			fc.count(now)
			fs := fc.factories
			fc.mu.Unlock()
			return fs, nil
		}
		r := fc.refreshing
		if r == nil {
			r = fc.beginRefresh()
			fc.mu.Unlock()
			// After two reads thrown away by drops meanwhile, the third
			// is kept whatever happens (as every read was before).
			c.refreshFactories(ctx, r, attempt >= maxDroppedRefreshes)
		} else {
			fc.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if r.err != nil || r.fs != nil {
			return r.fs, r.err
		}
		// Dropped while it read: read again.
	}
}

// maxDroppedRefreshes is how many reads in a row a caller lets drops
// throw away before it keeps one.
const maxDroppedRefreshes = 3

// backgroundRefreshTimeout bounds a refresh no caller started.
const backgroundRefreshTimeout = 10 * time.Second

// refreshAhead runs r with no caller waiting. Its error is logged and
// stops refreshing ahead; a caller whose list is past its ttl reads again.
func (c *Service) refreshAhead(r *refresh) {
	ctx, cancel := context.WithTimeout(context.Background(), backgroundRefreshTimeout)
	defer cancel()
	c.refreshFactories(ctx, r, false)
	if r.err != nil {
		c.k.Log.WarnContext(ctx, "factory list: the refresh ahead failed; the next dispatch past the cache TTL reads again", "err", r.err)
	}
}

// beginRefresh marks a refresh under way and returns it; the caller holds
// fc.mu.
func (fc *factoryCache) beginRefresh() *refresh {
	r := &refresh{done: make(chan struct{})}
	fc.refreshing = r
	fc.written = map[string]*fleet.Factory{}
	return r
}

// withWritten is fs, read by the refresh ending now, with the factories
// written here meanwhile in place of the copies it read, unless it read a
// later write (another process's); the caller holds fc.mu.
func (fc *factoryCache) withWritten(fs []*fleet.Factory) []*fleet.Factory {
	for i, f := range fs {
		if w := fc.written[f.ID]; w != nil && !w.UpdatedAt.Before(f.UpdatedAt) {
			fs[i] = w
		}
	}
	return fs
}

// refreshFactories reads the factories and the leases changed since the
// last refresh and caches them, unless the list was dropped while it read
// (the drop's write may be missing from what was read) and keep is false.
// It sets r.fs to the counted list when it was kept, or r.err, and ends r.
func (c *Service) refreshFactories(ctx context.Context, r *refresh, keep bool) {
	fc := c.factories
	defer func() {
		// A panic (a bug) is this read's error: in the background it would
		// end the process, where a request's panic ends only the request.
		if p := recover(); p != nil {
			r.err = fmt.Errorf("refresh the factory list: panic: %v", p)
			c.k.Log.Error("factory list: the refresh panicked", "panic", p, "stack", string(debug.Stack()))
		}
		fc.mu.Lock()
		fc.refreshing, fc.written = nil, nil
		fc.aheadFailed = r.err != nil
		fc.mu.Unlock()
		close(r.done)
	}()
	now := c.k.Now()
	fc.mu.Lock()
	cont, gen, notes := fc.feed, fc.gen, fc.notes
	if now.Sub(fc.feedAt) > leaseFeedMaxGap {
		// After a long pause the feed may hold more changed jobs than
		// there are leases: query those instead.
		cont = ""
	}
	fc.mu.Unlock()
	fs, err := c.readFactories(ctx)
	if err != nil {
		r.err = err
		return
	}
	leases, err := c.leaseChanges(ctx, cont)
	if err != nil {
		r.err = err
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if keep || fc.gen == gen {
		fc.factories, fc.loadedAt = fc.withWritten(fs), now
	}
	if leases.full {
		clear(fc.held)
	}
	for _, j := range leases.jobs {
		if j.Stage.Leased() && j.HolderFactoryID != "" && !j.LeaseExpired(now) {
			fc.held[j.ID] = seatUse{factoryID: j.HolderFactoryID, until: j.LeaseExpiresAt}
		} else {
			delete(fc.held, j.ID)
		}
		if u, ok := fc.offers[j.ID]; ok && (j.Stage != fleet.StageQueued || j.TargetFactoryID != u.factoryID) {
			// Another process took, routed again or ended the job.
			delete(fc.offers, j.ID)
		}
	}
	kept := map[string]note{}
	for id, n := range fc.noted {
		if n.seq > notes {
			kept[id] = n
		}
	}
	fc.noted = kept
	fc.feed, fc.feedAt = leases.cont, now
	fc.counted = false
	fc.count(now)
	r.fs = fc.factories
}

// Draining reports whether factory id is draining, from the scheduler's
// list while it is fresh (a drain set here clears it at once; one set
// through another instance is seen within its TTL, as the scheduler sees
// it), else from the factory's document.
func (c *Service) Draining(ctx context.Context, id string) (bool, error) {
	fc := c.factories
	fc.mu.Lock()
	if fc.fresh(c.k.Now()) {
		for _, f := range fc.factories {
			if f.ID == id {
				fc.mu.Unlock()
				return f.Draining, nil
			}
		}
	}
	fc.mu.Unlock()
	f, err := c.GetFactory(ctx, id)
	if err != nil {
		return false, err
	}
	return f.Draining, nil
}

// leaseView is what the seat count reads of a job: decoding these fields
// alone keeps a refresh cheap however large the jobs are.
type leaseView struct {
	Stage           fleet.Stage `json:"stage"`
	HolderFactoryID string      `json:"holderFactoryId"`
	LeaseExpiresAt  time.Time   `json:"leaseExpiresAt"`
	TargetFactoryID string      `json:"targetFactoryId"`
}

// leaseUpdate is what a refresh learnt of the jobs' leases: every leased
// job (full) or the jobs changed since the last refresh, each with only
// the fields of leaseView, and the change feed's continuation after them.
type leaseUpdate struct {
	full bool
	jobs []*fleet.Job
	cont string
}

// leaseChanges reads the jobs changed after cont from the jobs change feed,
// each as its latest version, until a page comes back empty. With no cont
// (the first refresh), or one the store no longer takes, it queries every
// leased job instead, having taken the feed's head first so that no lease
// granted meanwhile is missed.
func (c *Service) leaseChanges(ctx context.Context, cont string) (leaseUpdate, error) {
	if cont != "" {
		u := leaseUpdate{cont: cont}
		for {
			page, err := c.k.Store.ReadChanges(ctx, store.Jobs, u.cont, leaseFeedPage)
			if errors.Is(err, store.ErrBadContinuation) {
				break
			}
			if err != nil {
				return u, fmt.Errorf("read the jobs change feed: %w", err)
			}
			if len(page.Items) == 0 {
				return u, nil
			}
			for _, it := range page.Items {
				v, noted := c.factories.notedView(it)
				if noted {
					c.k.Counters.SeatFeedNoted.Add(1)
				} else {
					var err error
					if v, err = kernel.Decode[leaseView](it); err != nil {
						// Every refresh would read it again and fail: the
						// fleet's seat counts, and every dispatch, would stop.
						c.k.Undecodable(ctx, store.Jobs, it, err)
						continue
					}
					c.k.Counters.SeatFeedDecoded.Add(1)
				}
				u.jobs = append(u.jobs, &fleet.Job{ID: it.ID, Stage: v.Stage, HolderFactoryID: v.HolderFactoryID,
					LeaseExpiresAt: v.LeaseExpiresAt, TargetFactoryID: v.TargetFactoryID})
			}
			u.cont = page.Continuation
		}
	}
	head, err := c.k.Store.ChangesHead(ctx, store.Jobs)
	if err != nil {
		return leaseUpdate{}, fmt.Errorf("read the jobs change feed's head: %w", err)
	}
	// Those that do not decode are passed over, as in the feed above.
	leased, _, err := c.k.ScanJobs(ctx, store.Query{Where: []store.Cond{kernel.LeasedStage}})
	if err != nil {
		return leaseUpdate{}, err
	}
	return leaseUpdate{full: true, jobs: leased, cont: head}, nil
}

// notedView is what a refresh reads of it when it is a version this
// process wrote and noted (noted true): with one coordinator,
// most of what a refresh reads (not the creates, nor a job's version
// written before its note was made) is not decoded again. Decoding every
// changed job took about 20 µs a job, 1.6 to 4.4 ms a refresh at 100
// jobs/s on the handler's one P, and the dispatches that arrived meanwhile
// waited for it (issue 25's p99).
func (fc *factoryCache) notedView(it store.Item) (v *leaseView, noted bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	n, ok := fc.noted[it.ID]
	if !ok || n.rev != it.Rev {
		return nil, false
	}
	return &n.view, true
}

// leaseFeedPage is the page size of a refresh's change-feed reads;
// leaseFeedMaxGap the longest pause after which a refresh still reads the
// changes rather than every lease.
const (
	leaseFeedPage   = 500
	leaseFeedMaxGap = time.Minute
)

// readFactories reads every factory document, with its derived health and
// no seat counts.
func (c *Service) readFactories(ctx context.Context) ([]*fleet.Factory, error) {
	items, err := c.k.QueryAll(ctx, store.Factories, store.Query{})
	if err != nil {
		return nil, err
	}
	fs := make([]*fleet.Factory, 0, len(items))
	for _, it := range items {
		f, err := kernel.Decode[fleet.Factory](it)
		if err != nil {
			// Left out of the fleet (no work is scored for it) rather
			// than taking every read of the list, and every dispatch,
			// down with it.
			c.k.Undecodable(ctx, store.Factories, it, err)
			continue
		}
		f.Rev = it.Rev
		fs = append(fs, c.EffectiveHealth(f))
	}
	return fs, nil
}

// count sets each cached factory's Leases and Offers from held and offers
// at now, copying the factories whose counts change (callers may still hold
// the previous list). Entries past their time are dropped, as are offers
// whose job is leased (to whichever factory): taken, they count as leases.
func (fc *factoryCache) count(now time.Time) {
	if fc.counted && (fc.next.IsZero() || now.Before(fc.next)) {
		return
	}
	fc.next = time.Time{}
	leases, offers := map[string]int{}, map[string]int{}
	for id, u := range fc.held {
		if !now.Before(u.until) {
			delete(fc.held, id)
			continue
		}
		leases[u.factoryID]++
		fc.soonest(u.until)
	}
	for id, u := range fc.offers {
		if _, taken := fc.held[id]; taken || !now.Before(u.until) {
			delete(fc.offers, id)
			continue
		}
		offers[u.factoryID]++
		fc.soonest(u.until)
	}
	var fs []*fleet.Factory
	for i, f := range fc.factories {
		if f.Leases == leases[f.ID] && f.Offers == offers[f.ID] {
			continue
		}
		if fs == nil {
			fs = slices.Clone(fc.factories)
		}
		cp := *f
		cp.Leases, cp.Offers = leases[f.ID], offers[f.ID]
		fs[i] = &cp
	}
	if fs != nil {
		fc.factories = fs
	}
	fc.counted = true
}

// withoutOffer is fs as the job jobID sees it: its own dispatch, when it
// counts on its target, does not take a seat from itself.
func (fc *factoryCache) withoutOffer(fs []*fleet.Factory, jobID string) []*fleet.Factory {
	fc.mu.Lock()
	u, ok := fc.offers[jobID]
	fc.mu.Unlock()
	if !ok {
		return fs
	}
	i := slices.IndexFunc(fs, func(f *fleet.Factory) bool { return f.ID == u.factoryID && f.Offers > 0 })
	if i < 0 {
		return fs
	}
	fs = slices.Clone(fs)
	cp := *fs[i]
	cp.Offers--
	fs[i] = &cp
	return fs
}

// soonest keeps next at the earliest time a counted seat runs out.
func (fc *factoryCache) soonest(until time.Time) {
	if fc.next.IsZero() || until.Before(fc.next) {
		fc.next = until
	}
}

// tokenCache remembers verified factory tokens, so a factory's requests do
// not each read its token document. Entries stay while the ledger's tokens
// counter, which every revocation, rotation and deregistration moves, is
// unchanged: a process re-reads it at most once per TokenCacheTTL (one
// point read however many factories), and forgets every entry when it
// moved. Entries also expire after tokenMaxAge, bounding what a lost bump
// could leave trusted.
type tokenCache struct {
	mu      sync.Mutex
	entries map[string]tokenEntry
	// gen moves on every drop. A read of the store that began before a
	// revocation must not put its (unrevoked) copy back: put only stores
	// when gen is unchanged since the read began.
	gen uint64
	// ledger is the tokens counter last read, at checkedAt.
	ledger    int64
	checkedAt time.Time
}

// tokenMaxAge bounds how long a cached token is trusted without a read.
const tokenMaxAge = kernel.QuietRescanAfter

// due claims the next check of the ledger when the last one is ttl old:
// it returns true to one caller, which must then call checked.
func (tc *tokenCache) due(now time.Time, ttl time.Duration) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if !tc.checkedAt.IsZero() && now.Sub(tc.checkedAt) < ttl {
		return false
	}
	tc.checkedAt = now
	return true
}

// checked records the tokens counter read; when it moved (or could not be
// read, ok false) every entry is forgotten, and lookups in flight do not
// put their copies back.
func (tc *tokenCache) checked(counter int64, ok bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if ok && counter == tc.ledger {
		return
	}
	clear(tc.entries)
	tc.gen++
	if ok {
		tc.ledger = counter
	}
}

type tokenEntry struct {
	token   *fleet.Token
	expires time.Time
}

// maxTokens bounds the cache; past it, entries are dropped wholesale (a
// fleet has far fewer live tokens, so this only guards against abuse).
const maxTokens = 10000

func (tc *tokenCache) get(hash string, now time.Time) (*fleet.Token, bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	e, ok := tc.entries[hash]
	if !ok || !now.Before(e.expires) {
		return nil, false
	}
	return e.token, true
}

// generation is the value to pass to put for a read starting now.
func (tc *tokenCache) generation() uint64 {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.gen
}

func (tc *tokenCache) put(hash string, t *fleet.Token, expires time.Time, gen uint64) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if gen != tc.gen {
		return // a revocation happened while this copy was read
	}
	if len(tc.entries) >= maxTokens {
		clear(tc.entries)
	}
	tc.entries[hash] = tokenEntry{token: t, expires: expires}
}

// dropAll forgets every entry (the ledger says some token was revoked).
func (tc *tokenCache) dropAll() { tc.checked(0, false) }

func (tc *tokenCache) drop(hash string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.entries, hash)
	tc.gen++
}

// productCache holds products for at most ttl: each one submit's
// repo-ownership check reads, and the list of all a forge webhook searches
// for the product mapping its repository (every delivery of every
// repository the forge's app sees would otherwise be a cross-partition
// query: request units per push, review and check run). A write through
// this process drops what it cached of the product and the list, so its
// next read sees the write at once; a product written through another
// process is seen within ttl, the staleness the scheduler accepts for
// factories.
type productCache struct {
	mu      sync.Mutex
	ttl     time.Duration
	entries map[string]productEntry
	// all is every product, read at allAt; nil until read or once dropped.
	all   []*fleet.Product
	allAt time.Time
	// loading is closed when the read of all in flight ends: a burst of
	// deliveries on a stale list waits for one query instead of each
	// running its own.
	loading chan struct{}
	// gen moves on every drop: a read that began before a write must not
	// put its copy (without the write) back.
	gen uint64
}

type productEntry struct {
	product  *fleet.Product
	loadedAt time.Time
}

// CachedProduct reads a product through the cache.
func (c *Service) CachedProduct(ctx context.Context, id string) (*fleet.Product, error) {
	pc := c.products
	now := c.k.Now()
	pc.mu.Lock()
	e, ok := pc.entries[id]
	gen := pc.gen
	pc.mu.Unlock()
	if ok && now.Sub(e.loadedAt) < pc.ttl {
		return e.product, nil
	}
	p, err := c.GetProduct(ctx, id)
	if err != nil {
		return nil, err
	}
	pc.mu.Lock()
	if gen == pc.gen {
		if len(pc.entries) >= maxTokens {
			clear(pc.entries)
		}
		pc.entries[id] = productEntry{product: p, loadedAt: now}
	}
	pc.mu.Unlock()
	return p, nil
}

// CachedProducts reads every product through the cache: at most one query
// per ttl however many callers ask.
func (c *Service) CachedProducts(ctx context.Context) ([]*fleet.Product, error) {
	pc := c.products
	for {
		now := c.k.Now()
		pc.mu.Lock()
		if pc.all != nil && now.Sub(pc.allAt) < pc.ttl {
			defer pc.mu.Unlock()
			return pc.all, nil
		}
		if wait := pc.loading; wait != nil {
			pc.mu.Unlock()
			select {
			case <-wait:
				continue // fresh now, or the read failed or was dropped: look again
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		pc.loading = done
		gen := pc.gen
		pc.mu.Unlock()
		all, err := c.allProducts(ctx)
		pc.mu.Lock()
		pc.loading = nil
		close(done)
		if err == nil && gen == pc.gen {
			pc.all, pc.allAt = all, now
		}
		pc.mu.Unlock()
		return all, err
	}
}

// drop forgets product id and the list, which this process just wrote (or
// tried to).
func (pc *productCache) drop(id string) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	delete(pc.entries, id)
	pc.all, pc.allAt = nil, time.Time{}
	pc.gen++
}
