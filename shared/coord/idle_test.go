package coord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// feeder is the change feed as the Functions host runs it: batches from a
// checkpoint, the checkpoint moved only after the handler returned.
type feeder struct {
	e    *env
	c    *coord.Coordinator
	cont string
}

// run hands every change since the checkpoint to DispatchChanged and moves
// the checkpoint.
func (f *feeder) run() {
	f.e.t.Helper()
	page := f.e.feed(f.cont)
	if len(page.Items) == 0 {
		return
	}
	_, err := f.c.DispatchChanged(f.e.ctx, page.Items)
	require.NoError(f.e.t, err)
	f.cont = page.Continuation
}

// crash reads the next batch and dies before handling it: the checkpoint
// stays where it was, so the batch comes again.
func (f *feeder) crash() { f.e.t.Helper(); require.NotEmpty(f.e.t, f.e.feed(f.cont).Items) }

// gcPublisher is a dispatch transport that also carries GC requests.
type gcPublisher struct {
	recordingPublisher
	mu  sync.Mutex
	gcs []protocol.GCRequest
}

func (p *gcPublisher) PublishGC(_ context.Context, req protocol.GCRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gcs = append(p.gcs, req)
	return nil
}

// sweepHooks decorates a store: beforeQuery runs before the next query of
// the jobs container; beforeArm before the next whole-document write of the
// ledger (a sweep arming its counter) and beforeMark before the one after
// (its quiet mark); bumps are Increments and pass.
type sweepHooks struct {
	store.Store
	mu                                 sync.Mutex
	beforeQuery, beforeArm, beforeMark func()
}

// ledgerWrite runs the hook due before a whole-document ledger write.
func (s *sweepHooks) ledgerWrite() {
	h := s.take(&s.beforeArm)
	if h == nil {
		h = s.take(&s.beforeMark)
	}
	if h != nil {
		h()
	}
}

func (s *sweepHooks) take(fn *func()) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := *fn
	*fn = nil
	return h
}

func (s *sweepHooks) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	if container == store.Jobs {
		if h := s.take(&s.beforeQuery); h != nil {
			h()
		}
	}
	return s.Store.Query(ctx, container, q)
}

func (s *sweepHooks) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	if container == store.Ledger {
		s.ledgerWrite()
	}
	return s.Store.Replace(ctx, container, pk, id, body, ifRev)
}

func (s *sweepHooks) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Ledger {
		s.ledgerWrite()
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

var feedConfig = coord.Config{ChangeFeed: true}

// TestIdleSweepCost: once a sweep has looked and found nothing, each later
// tick of the reaper, the redispatch sweep and the GC sweep costs exactly
// one point read and no query, until a job is written; then it scans again.
func TestIdleSweepCost(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	pub := &gcPublisher{}
	e := newEnv(t, withConfig(feedConfig), withPublisher(pub), countingStore(&counted))
	e.factory("f1")
	fd := &feeder{e: e, c: e.c}

	// A job through its whole life, every write fed, so both counters moved.
	j := e.submit()
	fd.run()
	cl := e.claim("f1")
	for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
		_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch})
		require.NoError(t, err)
	}
	fd.run()

	sweeps := []struct {
		name string
		run  func(context.Context) (int, error)
	}{
		{"reaper", e.c.Reap},
		{"redispatch", e.c.Redispatch},
		{"gcsweep", e.c.GCSweep},
	}
	tick := func(run func(context.Context) (int, error)) storecount.Counts {
		before := counted.Snapshot()
		_, err := run(e.ctx)
		require.NoError(t, err)
		return counted.Snapshot().Sub(before)
	}
	for _, s := range sweeps {
		first := tick(s.run)
		require.Positive(t, first.Queries, "%s: the first tick after activity scans", s.name)
	}
	require.Len(t, pub.gcs, 1, "the first GC sweep sends the plan")
	for range 3 {
		e.clock.Advance(30 * time.Second)
		for _, s := range sweeps {
			require.Equal(t, storecount.Counts{Reads: 1}, tick(s.run), "%s: an idle tick is one point read", s.name)
		}
	}
	require.Len(t, pub.gcs, 1, "idle GC sweeps send nothing again")

	// A new job: the feed bumps activity, and the sweeps look again.
	e.submit()
	fd.run()
	require.Positive(t, tick(e.c.Redispatch).Queries)
	require.Positive(t, tick(e.c.Reap).Queries)
	require.Equal(t, storecount.Counts{Reads: 1}, tick(e.c.GCSweep), "no job ended: GC stays quiet")

	// Without a change feed every tick scans, as before.
	plain := e.newCoord(coord.Config{}, coord.Deps{Store: counted})
	require.Positive(t, tick(plain.Reap).Queries)
}

// TestQuietMarkRace: a job written while a sweep runs is never hidden by the
// sweep's quiet mark, wherever its write (W) and the change feed's bump (B)
// fall among the sweep's ledger read, its arming of the counter, its query
// and its mark. The job takes a lease during tick 1; its lease then
// expires, and tick 2 must reap it. B writes only when the counter is
// armed at its value (Bump), so W between the arm and the query, or
// between the query and the mark, is what the arm is for: without it B
// would write nothing and the mark would hide the job.
func TestQuietMarkRace(t *testing.T) {
	t.Parallel()
	const (
		before      = iota // before tick 1 reads the ledger
		beforeArm          // after the ledger read, before the arm
		beforeQuery        // after the arm, before the query
		beforeMark         // after the query found nothing, before the mark
		after              // after tick 1
	)
	names := []string{"before", "beforeArm", "beforeQuery", "beforeMark", "after"}
	for w := before; w <= after; w++ {
		for b := w; b <= after; b++ {
			t.Run("W "+names[w]+", B "+names[b], func(t *testing.T) {
				t.Parallel()
				hooks := &sweepHooks{}
				e := newEnv(t, withConfig(feedConfig), withStore(func(s store.Store) store.Store {
					hooks.Store = s
					return hooks
				}))
				e.factory("f1")
				fd := &feeder{e: e, c: e.c}
				e.submit()
				fd.run()
				// The reaper looked before: no lease anywhere, marked quiet.
				// Another job since moved the counter, so tick 1 scans.
				_, err := e.c.Reap(e.ctx)
				require.NoError(t, err)
				e.submit()
				fd.run()

				var held string
				write := func() { held = e.claim("f1").Job.ID }
				bump := fd.run
				at := func(pos int) func() {
					var fns []func()
					if w == pos {
						fns = append(fns, write)
					}
					if b == pos {
						fns = append(fns, bump)
					}
					return func() {
						for _, fn := range fns {
							fn()
						}
					}
				}
				at(before)()
				hooks.mu.Lock()
				hooks.beforeArm, hooks.beforeQuery, hooks.beforeMark = at(beforeArm), at(beforeQuery), at(beforeMark)
				hooks.mu.Unlock()
				_, err = e.c.Reap(e.ctx)
				require.NoError(t, err)
				// A step whose point tick 1 never reached (a query that found
				// the job writes no mark) happens after it, in order.
				for _, h := range []func(){hooks.take(&hooks.beforeArm), hooks.take(&hooks.beforeQuery), hooks.take(&hooks.beforeMark)} {
					if h != nil {
						h()
					}
				}
				at(after)()
				require.Equal(t, fleet.StageAssigned, e.job(held).Stage)

				e.clock.Advance(coord.DefaultLeaseTTL + time.Second)
				n, err := e.c.Reap(e.ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n, "tick 2 reaps the expired lease")
				require.Equal(t, fleet.StageQueued, e.job(held).Stage)
			})
		}
	}
}

// TestQuietMarkFeedCrash: the feed handler dies after a job was written and
// before it bumped the ledger. Until the batch comes again the sweep may
// skip, but the host redelivers it from the last checkpoint, the bump
// follows, and the next tick reaps.
func TestQuietMarkFeedCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(feedConfig))
	e.factory("f1")
	fd := &feeder{e: e, c: e.c}
	j := e.submit()
	fd.run()
	_, err := e.c.Reap(e.ctx)
	require.NoError(t, err)

	e.claim("f1")
	fd.crash()
	e.clock.Advance(coord.DefaultLeaseTTL + time.Second)
	n, err := e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "no bump yet: the tick trusts the mark")

	fd.run() // the redelivered batch
	n, err = e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, fleet.StageQueued, e.job(j.ID).Stage)

	// A bump lost for good (the host gave up on the batch): a mark is
	// trusted for an hour at most.
	fd.run()
	_, err = e.c.Reap(e.ctx) // nothing leased: marked quiet
	require.NoError(t, err)
	e.claim("f1")
	fd.cont = e.feed(fd.cont).Continuation // checkpointed past, never handled
	e.clock.Advance(coord.DefaultLeaseTTL + time.Second)
	n, err = e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	e.clock.Advance(time.Hour)
	n, err = e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestTokenRevalidationCost: four factories authenticating every 15 s for
// ten minutes cost one point read of the ledger per TokenCacheTTL, not a
// token and a factory read per factory per minute.
func TestTokenRevalidationCost(t *testing.T) {
	t.Parallel()
	var counted *storecount.Store
	e := newEnv(t, countingStore(&counted))
	var secrets []string
	for _, id := range []string{"f1", "f2", "f3", "f4"} {
		_, s, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: id})
		require.NoError(t, err)
		secrets = append(secrets, s)
	}
	auth := func() {
		for _, s := range secrets {
			_, err := e.c.AuthenticateFactory(e.ctx, s)
			require.NoError(t, err)
		}
	}
	auth() // fills the cache
	before := counted.Snapshot()
	const window = 10 * time.Minute
	for range window / (15 * time.Second) {
		e.clock.Advance(15 * time.Second)
		auth()
	}
	got := counted.Snapshot().Sub(before)
	require.Equal(t, storecount.Counts{Reads: int64(window / coord.DefaultTokenCacheTTL)}, got,
		"one ledger read per TokenCacheTTL, nothing per factory")
}

// TestRevocationOnPeerWithinTTL: a token another process has cached stops
// authenticating there within one TokenCacheTTL of its revocation, rotation
// or the factory's deregistration here; in this process at once.
func TestRevocationOnPeerWithinTTL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		revoke func(e *env, id string) error
	}{
		{"revoke", func(e *env, id string) error { return e.c.RevokeToken(e.ctx, id) }},
		{"rotate", func(e *env, id string) error { _, err := e.c.RotateToken(e.ctx, id); return err }},
		{"deregister", func(e *env, id string) error { return e.c.Deregister(e.ctx, id) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			peer := e.peer()
			_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1"})
			require.NoError(t, err)
			_, err = peer.AuthenticateFactory(e.ctx, secret)
			require.NoError(t, err)
			_, err = e.c.AuthenticateFactory(e.ctx, secret)
			require.NoError(t, err)

			e.clock.Advance(coord.DefaultTokenCacheTTL / 2)
			require.NoError(t, tc.revoke(e, "f1"))
			_, err = e.c.AuthenticateFactory(e.ctx, secret)
			requireCode(t, err, fleet.CodeUnauthenticated, "")

			// The peer's last ledger check was half a TTL ago; by the end of
			// the TTL it has looked again.
			e.clock.Advance(coord.DefaultTokenCacheTTL / 2)
			_, err = peer.AuthenticateFactory(e.ctx, secret)
			requireCode(t, err, fleet.CodeUnauthenticated, "")
		})
	}
}

// ledgerDown is a store whose ledger cannot be read while down is set (a
// throttled or corrupt document); everything else works.
type ledgerDown struct {
	store.Store
	down atomic.Bool
}

func (s *ledgerDown) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	if container == store.Ledger && s.down.Load() {
		return store.Item{}, fmt.Errorf("read %s: %w", container, store.ErrUnavailable)
	}
	return s.Store.Read(ctx, container, pk, id)
}

// TestSweepsWorkWhenTheLedgerCannotBeRead: the ledger only saves a scan.
// While it cannot be read, every tick scans and does its work (an expired
// lease is reaped, a silent factory pruned) and leaves no quiet mark; once
// it reads again, an idle tick is one point read again.
func TestSweepsWorkWhenTheLedgerCannotBeRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// due sets up work that falls due with time alone, once the
		// sweep has marked itself quiet, and returns the sweep.
		due func(e *env, fd *feeder) func(context.Context) (int, error)
	}{
		{"reaper: an expired lease", func(e *env, fd *feeder) func(context.Context) (int, error) {
			e.factory("f1")
			e.submit()
			fd.run()
			e.claim("f1")
			fd.run()
			e.clock.Advance(coord.DefaultLeaseTTL + time.Second)
			return e.c.Reap
		}},
		{"prune: a silent static factory", func(e *env, _ *feeder) func(context.Context) (int, error) {
			e.factory("f1")
			e.clock.Advance(coord.DefaultPruneAfter)
			return e.c.Prune
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ledger := &ledgerDown{}
			var counted *storecount.Store
			e := newEnv(t, withConfig(feedConfig), withStore(func(s store.Store) store.Store {
				ledger.Store = s
				counted = storecount.New(ledger)
				return counted
			}))
			sweep := tc.due(e, &feeder{e: e, c: e.c})

			ledger.down.Store(true)
			n, err := sweep(e.ctx)
			require.NoError(t, err, "the ledger only saves a scan: the tick scans")
			require.Equal(t, 1, n, "the work due is done")

			ledger.down.Store(false)
			before := counted.Snapshot()
			_, err = sweep(e.ctx)
			require.NoError(t, err)
			require.Positive(t, counted.Snapshot().Sub(before).Queries, "no mark was left by the blind tick: this one scans")
			before = counted.Snapshot()
			_, err = sweep(e.ctx)
			require.NoError(t, err)
			require.Equal(t, storecount.Counts{Reads: 1}, counted.Snapshot().Sub(before), "then idle again")
		})
	}
}

// TestQuietMarkKeepsFieldsItDoesNotKnow: a sweep's mark rewrites the ledger
// but leaves every other field as stored. A process of a newer version may
// have added a counter or a field to another sweep's mark; erasing them
// while both versions run (a rolling deploy) would reset that counter under
// its sweep's mark, which could then match again with work pending.
func TestQuietMarkKeepsFieldsItDoesNotKnow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(feedConfig))
	const stored = `{"id":"fleet","productId":"*","activity":0,"ended":0,"tokens":0,"future":7,
		"quiet":{"later":{"seen":7,"at":"2026-05-31T11:59:00Z","window":"1m"}}}`
	_, err := e.raw.Create(e.ctx, store.Ledger, "fleet", "fleet", []byte(stored))
	require.NoError(t, err)

	_, err = e.c.Reap(e.ctx) // nothing leased: marks itself quiet
	require.NoError(t, err)
	it, err := e.raw.Read(e.ctx, store.Ledger, "fleet", "fleet")
	require.NoError(t, err)
	var got struct {
		Future int64                      `json:"future"`
		Quiet  map[string]json.RawMessage `json:"quiet"`
	}
	require.NoError(t, json.Unmarshal(it.Body, &got))
	require.Equal(t, int64(7), got.Future, "a counter this version does not know: %s", it.Body)
	require.JSONEq(t, `{"seen":7,"at":"2026-05-31T11:59:00Z","window":"1m"}`, string(got.Quiet["later"]), "another sweep's mark, whole")
	require.Contains(t, got.Quiet, "reap", "the reaper's own mark")
}

// TestFeedBumpsOnlyWhenArmed: a change-feed batch writes the activity bump
// only when a sweep armed the counter at its value; every other batch
// writes nothing to the ledger (issue 25: a dispatch batch's bump was a
// store write on every job change, in the way of the next job's
// dispatch). A sweep that scans arms again.
func TestFeedBumpsOnlyWhenArmed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(feedConfig))
	e.factory("f1")
	fd := &feeder{e: e, c: e.c}

	e.submit()
	fd.run()
	_, _, rev := e.docInt(store.Ledger, "fleet", "activity")
	require.Empty(t, rev, "no sweep armed: the batch wrote no ledger")

	_, err := e.c.Reap(e.ctx) // scans, arms activity at 0, marks quiet
	require.NoError(t, err)
	armed, ok, _ := e.docInt(store.Ledger, "fleet", "activityArmed")
	require.True(t, ok)
	require.Zero(t, armed)

	e.submit()
	fd.run()
	n, _, rev := e.docInt(store.Ledger, "fleet", "activity")
	require.Equal(t, int64(1), n, "armed at 0: the batch bumps")

	for range 3 {
		e.submit()
		fd.run()
		n2, _, rev2 := e.docInt(store.Ledger, "fleet", "activity")
		require.Equal(t, int64(1), n2, "armed at 0, counter 1: nothing written")
		require.Equal(t, rev, rev2)
	}
	require.EqualValues(t, 4, e.c.Stats().BumpsSkipped, "the first batch (no ledger) and three armed below the counter")

	_, err = e.c.Reap(e.ctx) // the counter moved: scans and arms at 1
	require.NoError(t, err)
	armed, _, _ = e.docInt(store.Ledger, "fleet", "activityArmed")
	require.Equal(t, int64(1), armed)
	e.submit()
	fd.run()
	n, _, _ = e.docInt(store.Ledger, "fleet", "activity")
	require.Equal(t, int64(2), n)
}

// TestQuietMarksNotTrusted: an expired lease is reaped despite a quiet mark
// at the current counter that must not be trusted:
//   - one from the future, written by an instance whose clock runs ahead:
//     trusted, it would stretch QuietRescanAfter by the skew were the bump
//     that should end it lost;
//   - one written without arming, by a process of a version before
//     conditional bumps (a rolling deploy): the change feed no longer
//     bumps after every job write, so such a mark could hide a job its
//     scan missed.
func TestQuietMarksNotTrusted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		ahead time.Duration
		armed bool
	}{
		{"from the future", 2 * time.Hour, true},
		{"of an older version", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withConfig(feedConfig))
			fd := &feeder{e: e, c: e.c}
			e.factory("f1")
			e.submit()
			fd.run()
			_, err := e.c.Reap(e.ctx) // arms activity
			require.NoError(t, err)
			e.claim("f1")
			fd.run()

			// The reaper's mark at the current counter (the bump after it lost).
			it, err := e.raw.Read(e.ctx, store.Ledger, "fleet", "fleet")
			require.NoError(t, err)
			var l map[string]any
			require.NoError(t, json.Unmarshal(it.Body, &l))
			mark := map[string]any{"seen": l["activity"], "at": e.clock.Now().Add(c.ahead)}
			if c.armed {
				mark["armed"] = true
			}
			l["quiet"] = map[string]any{"reap": mark}
			body, err := json.Marshal(l)
			require.NoError(t, err)
			_, err = e.raw.Replace(e.ctx, store.Ledger, "fleet", "fleet", body, it.Rev)
			require.NoError(t, err)

			e.clock.Advance(coord.DefaultLeaseTTL + time.Second)
			n, err := e.c.Reap(e.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n, "the expired lease is reaped despite the mark")
		})
	}
}
