// Package live is the fleet's history as it happens: a job's events and
// runs, and the live streams of them (one change-feed watcher per process,
// fanned out to the subscribed streams). coord's façade calls it.
package live

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Live events.
//
// One watcher per process reads the change feeds of the jobs container
// (every job mutation records its event in the job's own ring of recent
// events, which each version of the job carries: kernel/events.go) and of
// the factories container, and fans each page out to the streams connected
// to this process. A stream never queries the store on a timer: the watcher polls
// (Config.LivePoll) only while at least one stream is connected, and a
// write made by this process wakes it at once. Idle, with nobody watching,
// it costs nothing.
//
// A product stream's position is the pair of feed continuations (Position):
// the store's own change-feed position is the only order of every change of
// a product that both backends keep durably (SQLite's global revision
// counter, Cosmos's per-range LSN tokens), and it survives restarts and
// spans instances, so any instance can resume any client. A continuation
// marks a page boundary, not an item: every item of a page but the last
// carries the position before the page, the last the position after it. A
// client resuming from a mid-page id therefore reads that page again: it may
// see a change twice and never misses one.
//
// The jobs feed carries each changed job once, in its latest version, so a
// read tells which of the job's events are new by what it already passed on
// (the watcher remembers the last seq it delivered per job) or, for a job it
// has not seen, by time: a position also holds At, a time before which no
// event committed after its continuations was stamped (the time of the read
// less eventStampSlack, which covers an event stamped then committed late and
// the clocks of instances disagreeing). A job's events older than its ring
// are read from the events container when they may be new.

// Position is where a product stream stands in the two feeds it follows.
type Position struct {
	Jobs      string    `json:"j"`
	Factories string    `json:"f"`
	At        time.Time `json:"t,omitzero"`
}

// eventStampSlack bounds how long before its commit an event may have been
// stamped, clock disagreement between instances included.
const eventStampSlack = time.Minute

const positionPrefix = "p2."

// String is the position as a stream id: opaque, URL-safe, no newline.
func (p Position) String() string {
	b, _ := json.Marshal(p)
	return positionPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ErrBadPosition: a stream id this service did not issue.
var ErrBadPosition = errors.New("not a live event stream id")

// ParsePosition reads a stream id. Its continuations are checked by the
// store when read (ErrBadContinuation).
func ParsePosition(s string) (Position, error) {
	rest, ok := strings.CutPrefix(s, positionPrefix)
	if !ok {
		return Position{}, ErrBadPosition
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return Position{}, ErrBadPosition
	}
	var p Position
	if err := json.Unmarshal(b, &p); err != nil || p.Jobs == "" || p.Factories == "" {
		return Position{}, ErrBadPosition
	}
	return p, nil
}

// ChangeFactory is the stream type of a factory change.
const ChangeFactory = "factory"

// Change is one item of a product stream.
type Change struct {
	// ID is the position to resume from after this change.
	ID Position
	// Type is the job event's type, or ChangeFactory.
	Type    string
	Event   *fleet.Event
	Factory *fleet.Factory
}

// Data is the change's JSON body.
func (ch Change) Data() any {
	if ch.Factory != nil {
		return ch.Factory
	}
	return ch.Event
}

func (ch Change) forProduct(product string) bool {
	if ch.Factory != nil {
		return ch.Factory.Serves(product)
	}
	return ch.Event.ProductID == product
}

// Batch is what the watcher read in one pass, for one subscriber: the
// changes it may see and the position after the pass (which moves even when
// none of them was for it, so an idle stream's position stays fresh).
type Batch struct {
	Changes []Change
	Pos     Position
}

// Watch says what a subscriber follows: one job (it is woken when the job
// has new events) or one product (it receives its changes).
type Watch struct {
	JobID     string
	ProductID string
}

// Subscription is one stream's share of the watcher.
type Subscription struct {
	live  *Service
	watch Watch
	// Start is the position from which this subscription receives every
	// change (product subscriptions).
	Start Position
	wake  chan struct{}
	batch chan Batch
	lost  chan struct{}
	once  sync.Once
}

// Woken receives when the followed job may have new events.
func (s *Subscription) Woken() <-chan struct{} { return s.wake }

// Batches receives the product's changes.
func (s *Subscription) Batches() <-chan Batch { return s.batch }

// Lost is closed when the subscriber fell so far behind that the watcher
// dropped it: the stream should end so that its client resumes.
func (s *Subscription) Lost() <-chan struct{} { return s.lost }

// Close ends the subscription; the watcher stops with its last subscriber.
func (s *Subscription) Close() { s.live.unsubscribe(s) }

// subscriberBuffer is how many batches a product stream may lag behind
// before it is dropped (and its client resumes from its last id).
const subscriberBuffer = 256

// feedPage bounds one feed read of the watcher and of a replay.
const feedPage = 100

// Service reads a job's history and runs the process's live watcher. It is
// safe for concurrent use.
type Service struct {
	k *kernel.Kernel
	// health is a factory as the fleet sees it (its effective health),
	// which is what a factory change on a stream shows.
	health func(*fleet.Factory) *fleet.Factory
	timers clock.Timers
	poll   time.Duration

	mu      sync.Mutex
	subs    map[*Subscription]struct{}
	pos     Position
	gen     int
	stop    context.CancelFunc
	done    chan struct{}
	kick    chan struct{}
	running bool
}

// New builds the service. health may be nil (factories as stored).
func New(k *kernel.Kernel, timers clock.Timers, poll time.Duration, health func(*fleet.Factory) *fleet.Factory) *Service {
	if health == nil {
		health = func(f *fleet.Factory) *fleet.Factory { return f }
	}
	l := &Service{k: k, health: health, timers: timers, poll: poll, subs: map[*Subscription]struct{}{}, kick: make(chan struct{}, 1)}
	return l
}

// Waking wraps s so every write of this process to a container the watcher
// follows wakes it: a stream sees the change without waiting for a poll.
func (l *Service) Waking(s store.Store) store.Store { return wakingStore{Store: s, live: l} }

// Subscribe follows a job or a product from now on. The first subscriber of
// the process starts the watcher at the feeds' current ends.
func (l *Service) Subscribe(ctx context.Context, w Watch) (*Subscription, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.running {
		// Reading the heads under the lock holds back other first
		// subscribers only: no watcher runs yet.
		pos, err := l.heads(ctx)
		if err != nil {
			return nil, err
		}
		l.pos = pos
		l.gen++
		wctx, cancel := context.WithCancel(context.Background())
		l.stop, l.done, l.running = cancel, make(chan struct{}), true
		go l.run(wctx, l.gen, pos, l.done)
	}
	s := &Subscription{live: l, watch: w, Start: l.pos, lost: make(chan struct{})}
	if w.JobID != "" {
		s.wake = make(chan struct{}, 1)
	} else {
		s.batch = make(chan Batch, subscriberBuffer)
	}
	l.subs[s] = struct{}{}
	return s, nil
}

func (l *Service) unsubscribe(s *Subscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.subs[s]; !ok {
		return
	}
	delete(l.subs, s)
	if len(l.subs) == 0 && l.running {
		l.stop()
		l.running = false
	}
}

// wake asks a running watcher to read the feeds now: this process wrote.
func (l *Service) wakeUp() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *Service) heads(ctx context.Context) (Position, error) {
	at := l.k.Now().Add(-eventStampSlack)
	j, err := l.k.Store.ChangesHead(ctx, store.Jobs)
	if err != nil {
		return Position{}, fmt.Errorf("live events: head of %s: %w", store.Jobs, err)
	}
	f, err := l.k.Store.ChangesHead(ctx, store.Factories)
	if err != nil {
		return Position{}, fmt.Errorf("live events: head of %s: %w", store.Factories, err)
	}
	return Position{Jobs: j, Factories: f, At: at}, nil
}

func (l *Service) run(ctx context.Context, gen int, pos Position, done chan struct{}) {
	defer close(done)
	t := l.timers.NewTicker(l.poll)
	defer t.Stop()
	seen := newDelivered()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-l.kick:
		}
		next, err := l.readChanges(ctx, pos, seen, func(b []Change, at Position) bool {
			l.deliver(gen, b, at)
			return true
		})
		if err != nil {
			if ctx.Err() == nil {
				l.k.Log.WarnContext(ctx, "live events: change feed read failed; retrying at the next poll", "err", err)
			}
		}
		pos = next
	}
}

// deliver fans a page out. A product subscriber that cannot keep up is
// dropped (Lost) rather than blocking everyone else.
func (l *Service) deliver(gen int, changes []Change, at Position) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen != l.gen {
		return
	}
	l.pos = at
	jobs := map[string]bool{}
	for _, ch := range changes {
		if ch.Event != nil {
			jobs[ch.Event.JobID] = true
		}
	}
	for s := range l.subs {
		if s.watch.JobID != "" {
			if jobs[s.watch.JobID] {
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
			continue
		}
		var mine []Change
		for _, ch := range changes {
			if ch.forProduct(s.watch.ProductID) {
				mine = append(mine, ch)
			}
		}
		select {
		case s.batch <- Batch{Changes: mine, Pos: at}:
		default:
			delete(l.subs, s)
			s.once.Do(func() { close(s.lost) })
			if len(l.subs) == 0 {
				l.stop()
				l.running = false
			}
		}
	}
}

// ErrEnough, returned by Replay's emit, ends the replay after that page:
// Replay returns the position after it, and no error. A reader that
// answers in one piece (a long poll, a stream behind a front door that
// buffers) pages with it rather than holding a whole history at once.
var ErrEnough = errors.New("live: the replay's reader has enough")

// Replay reads the product's changes after from up to the feeds' current
// ends, calling emit per page, and returns the position reached. A
// continuation the store did not issue is ErrBadContinuation before any
// emit.
func (l *Service) Replay(ctx context.Context, from Position, productID string, emit func([]Change, Position) error) (Position, error) {
	var emitErr error
	pos, err := l.readChanges(ctx, from, newDelivered(), func(all []Change, at Position) bool {
		var mine []Change
		for _, ch := range all {
			if ch.forProduct(productID) {
				mine = append(mine, ch)
			}
		}
		emitErr = emit(mine, at)
		return emitErr == nil
	})
	if err == nil && !errors.Is(emitErr, ErrEnough) {
		err = emitErr
	}
	return pos, err
}

// readChanges drains both feeds from pos, jobs first, calling page per
// page read with the position after it, and returns the position reached
// (as far as it got, on error, or where page said to stop). seen is what
// this reader passed on so far.
func (l *Service) readChanges(ctx context.Context, pos Position, seen *delivered, page func([]Change, Position) bool) (Position, error) {
	for _, feed := range []struct {
		container string
		cur       *string
	}{{store.Jobs, &pos.Jobs}, {store.Factories, &pos.Factories}} {
		for {
			// Whatever commits after this read was stamped after readAt.
			readAt := l.k.Now().Add(-eventStampSlack)
			p, err := l.k.Store.ReadChanges(ctx, feed.container, *feed.cur, feedPage)
			if err != nil {
				return pos, err
			}
			if len(p.Items) == 0 {
				if p.Continuation != "" {
					*feed.cur = p.Continuation
				}
				if feed.container == store.Jobs && readAt.After(pos.At) {
					pos.At = readAt
				}
				break
			}
			before := pos
			*feed.cur = p.Continuation
			if feed.container == store.Jobs && readAt.After(pos.At) {
				pos.At = readAt
			}
			var changes []Change
			seen.begin()
			for _, it := range p.Items {
				chs, err := l.changes(ctx, feed.container, it, before.At, seen)
				var bad undecodable
				switch {
				case errors.As(err, &bad):
					l.k.Log.WarnContext(ctx, "live events: undecodable change skipped", "container", feed.container, "id", it.ID, "err", err)
					continue
				case err != nil:
					// The store failed (a throttled query of the archived
					// events): the page is read again, as if never read,
					// rather than passed on without them.
					seen.rollback()
					return before, err
				}
				changes = append(changes, chs...)
			}
			// Every change but the page's last resumes before the page.
			for i := range changes {
				changes[i].ID = before
			}
			if n := len(changes); n > 0 {
				changes[n-1].ID = pos
			}
			if !page(changes, pos) {
				return pos, nil
			}
		}
	}
	return pos, nil
}

// changes are the stream items one feed item makes: a factory's new
// version, or a job's events this reader has not passed on (for a job it
// has not seen, those stamped from `since` on).
func (l *Service) changes(ctx context.Context, container string, it store.Item, since time.Time, seen *delivered) ([]Change, error) {
	if container == store.Factories {
		f, err := kernel.Decode[fleet.Factory](it)
		if err != nil {
			return nil, undecodable{err}
		}
		f.Rev = it.Rev
		return []Change{{Type: ChangeFactory, Factory: l.health(f)}}, nil
	}
	j, err := kernel.DecodeJob(it)
	if err != nil {
		return nil, undecodable{err}
	}
	ring := j.Recent()
	last, known := seen.last(j.ID)
	var evs []fleet.Event
	switch {
	case len(ring) == 0:
	case known && ring[0].Seq > last+1:
		// Events left the ring since this reader passed some on.
		older, err := l.archived(ctx, j.ID, func(ev *fleet.Event) bool { return ev.Seq > last && ev.Seq < ring[0].Seq })
		if err != nil {
			return nil, err
		}
		evs = older
	case !known && ring[0].Seq > 1 && !ring[0].At.Before(since):
		// The ring may not reach back to the first new event.
		older, err := l.archived(ctx, j.ID, func(ev *fleet.Event) bool { return ev.Seq < ring[0].Seq && !ev.At.Before(since) })
		if err != nil {
			return nil, err
		}
		evs = older
	}
	for _, ev := range ring {
		if (known && ev.Seq > last) || (!known && !ev.At.Before(since)) {
			evs = append(evs, ev)
		}
	}
	seen.note(j.ID, j.EventSeq, j.Stage.Terminal())
	out := make([]Change, len(evs))
	for i := range evs {
		out[i] = Change{Type: string(evs[i].Type), Event: &evs[i]}
	}
	return out, nil
}

// archived are the job's events in the events container that keep selects,
// oldest first, less those that do not decode.
func (l *Service) archived(ctx context.Context, jobID string, keep func(*fleet.Event) bool) ([]fleet.Event, error) {
	items, err := l.k.QueryAll(ctx, store.Events, store.Query{PartitionKey: jobID})
	if err != nil {
		return nil, err
	}
	var out []fleet.Event
	for _, it := range items {
		ev, err := kernel.Decode[fleet.Event](it)
		if err != nil {
			// Left out, as listings leave such documents out: a history
			// (and the tracker echo reading it) that stopped at it would
			// stay stopped for good.
			l.k.Undecodable(ctx, store.Events, it, err)
			continue
		}
		if keep(ev) {
			out = append(out, *ev)
		}
	}
	slices.SortFunc(out, func(a, b fleet.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// delivered is the last event seq a reader passed on, per job. Bounded: a
// job it forgets is judged by time again, which at worst repeats an event.
// undecodable is a feed item that does not decode: skipped, where a store
// failure fails the read.
type undecodable struct{ error }

func (u undecodable) Unwrap() error { return u.error }

type delivered struct {
	m map[string]int64
	// undo is what the notes since begin replaced, for rollback.
	undo []undoNote
}

type undoNote struct {
	jobID string
	seq   int64
	had   bool
}

const deliveredMax = 50_000

func newDelivered() *delivered { return &delivered{m: map[string]int64{}} }

// begin starts a page: rollback undoes the notes made after it.
func (d *delivered) begin() { d.undo = d.undo[:0] }

// rollback undoes the notes since begin: the page they were for was not
// passed on.
func (d *delivered) rollback() {
	for i := len(d.undo) - 1; i >= 0; i-- {
		u := d.undo[i]
		if u.had {
			d.m[u.jobID] = u.seq
		} else {
			delete(d.m, u.jobID)
		}
	}
	d.undo = d.undo[:0]
}

func (d *delivered) last(jobID string) (int64, bool) {
	seq, ok := d.m[jobID]
	return seq, ok
}

// note records that the job's events up to seq were passed on; an ended
// job is forgotten (it has no more events to tell apart).
func (d *delivered) note(jobID string, seq int64, ended bool) {
	prev, had := d.m[jobID]
	d.undo = append(d.undo, undoNote{jobID: jobID, seq: prev, had: had})
	if ended {
		delete(d.m, jobID)
		return
	}
	if _, ok := d.m[jobID]; !ok && len(d.m) >= deliveredMax {
		clear(d.m)
	}
	d.m[jobID] = seq
}

// wakingStore wakes the live watcher after every write of this process to a
// container it follows, so a stream sees the change without waiting for the
// next poll.
type wakingStore struct {
	store.Store
	live *Service
}

func (s wakingStore) wrote(container string, err error) {
	if err == nil && (container == store.Jobs || container == store.Factories) {
		s.live.wakeUp()
	}
}

func (s wakingStore) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	rev, err := s.Store.Create(ctx, container, pk, id, body)
	s.wrote(container, err)
	return rev, err
}

func (s wakingStore) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	rev, err := s.Store.Replace(ctx, container, pk, id, body, ifRev)
	s.wrote(container, err)
	return rev, err
}

func (s wakingStore) Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	rev, err := s.Store.Upsert(ctx, container, pk, id, body)
	s.wrote(container, err)
	return rev, err
}

func (s wakingStore) Delete(ctx context.Context, container, pk, id, ifRev string) error {
	err := s.Store.Delete(ctx, container, pk, id, ifRev)
	s.wrote(container, err)
	return err
}

func (s wakingStore) Increment(ctx context.Context, container, pk, id, field string, delta int64) (int64, error) {
	v, err := s.Store.Increment(ctx, container, pk, id, field, delta)
	s.wrote(container, err)
	return v, err
}

func (s wakingStore) IncrementIfEqual(ctx context.Context, container, pk, id, field, guard string, delta int64) (int64, error) {
	v, err := s.Store.IncrementIfEqual(ctx, container, pk, id, field, guard, delta)
	s.wrote(container, err)
	return v, err
}
