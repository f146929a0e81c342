package hostemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// within bounds every wait of these tests: a deadline, never a fixed sleep.
const within = 10 * time.Second

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// delivery is one invocation the fake handler received.
type delivery struct {
	ids    []string
	etags  []string
	failed bool
}

// fakeDispatch is a custom handler serving one cosmosDBTrigger function: it
// records every batch and fails the invocations fail says to fail.
type fakeDispatch struct {
	srv        *httptest.Server
	deliveries chan delivery
	mu         sync.Mutex
	fail       func(ids []string, attempt int) bool
	attempts   map[string]int // by the batch's first id
	// during, when set, runs inside each invocation, as a function's
	// own writes do.
	during func(ids []string)
}

func newFakeDispatch(t *testing.T, fail func(ids []string, attempt int) bool) *fakeDispatch {
	t.Helper()
	f := &fakeDispatch{deliveries: make(chan delivery, 64), fail: fail, attempts: map[string]int{}}
	s := funchost.NewServer(nil, "", nil)
	s.Handle("dispatch", func(_ context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		docs, err := funchost.Documents(inv.Data["documents"])
		if err != nil {
			return nil, err
		}
		var d delivery
		for _, raw := range docs {
			var doc struct {
				ID   string `json:"id"`
				ETag string `json:"_etag"`
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				return nil, err
			}
			d.ids = append(d.ids, doc.ID)
			d.etags = append(d.etags, doc.ETag)
		}
		f.mu.Lock()
		attempt := 0
		if len(d.ids) > 0 {
			f.attempts[d.ids[0]]++
			attempt = f.attempts[d.ids[0]]
		}
		d.failed = f.fail != nil && f.fail(d.ids, attempt)
		during := f.during
		f.mu.Unlock()
		if during != nil {
			during(d.ids)
		}
		f.deliveries <- d
		if d.failed {
			return nil, errors.New("dispatch failed on purpose")
		}
		return &funchost.Result{Logs: []string{fmt.Sprintf("batch of %d", len(docs))}}, nil
	})
	f.srv = httptest.NewServer(s)
	t.Cleanup(f.srv.Close)
	return f
}

// next returns the next delivery.
func (f *fakeDispatch) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-f.deliveries:
		return d
	case <-time.After(within):
		t.Fatalf("no invocation within %s", within)
		return delivery{}
	}
}

func (f *fakeDispatch) child() *Child { return readyChild(strings.TrimPrefix(f.srv.URL, "http://")) }

// feedFunction is the dispatch function.json with short intervals: a poll
// every 10 ms, batches of at most max, and the given retry policy.
func feedFunction(max int, retry *Retry) (*Function, Binding) {
	trig := Binding{Type: "cosmosDBTrigger", Direction: "in", Name: "documents", Props: map[string]json.RawMessage{
		"connection":            json.RawMessage(`"CosmosDB"`),
		"databaseName":          json.RawMessage(`"%DB%"`),
		"containerName":         json.RawMessage(`"fleet_jobs"`),
		"leaseContainerName":    json.RawMessage(`"leases"`),
		"feedPollDelay":         json.RawMessage(`10`),
		"maxItemsPerInvocation": json.RawMessage(fmt.Sprint(max)),
		"startFromBeginning":    json.RawMessage(`true`),
	}}
	return &Function{Name: "dispatch", Bindings: []Binding{trig}, Retry: retry}, trig
}

var feedSettings = Settings(func(name string) string {
	return map[string]string{"DB": "fleet"}[name]
})

type feedEnv struct {
	t     *testing.T
	store *sqlite.Store
}

func newFeedEnv(t *testing.T) *feedEnv {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return &feedEnv{t: t, store: st}
}

// write creates job documents and returns their revisions.
func (e *feedEnv) write(ids ...string) []string {
	e.t.Helper()
	revs := make([]string, len(ids))
	for i, id := range ids {
		rev, err := e.store.Create(e.t.Context(), store.Jobs, "p1", id, []byte(`{"id":"`+id+`","productId":"p1","stage":"queued"}`))
		require.NoError(e.t, err)
		revs[i] = rev
	}
	return revs
}

// checkpoint reads the trigger's lease document.
func (e *feedEnv) checkpoint() (Checkpoint, bool) {
	it, err := e.store.Read(context.Background(), store.Leases, "hostemu.dispatch.fleet_jobs", "hostemu.dispatch.fleet_jobs")
	if errors.Is(err, store.ErrNotFound) {
		return Checkpoint{}, false
	}
	require.NoError(e.t, err)
	var cp Checkpoint
	require.NoError(e.t, json.Unmarshal(it.Body, &cp))
	return cp, true
}

// waitCheckpoint waits until the lease document holds continuation.
func (e *feedEnv) waitCheckpoint(continuation string) {
	e.t.Helper()
	eventually(e.t, "checkpoint "+continuation, func() bool {
		cp, ok := e.checkpoint()
		return ok && cp.Continuation == continuation
	})
}

// start runs a new trigger, as a freshly started host would, until the
// returned stop is called.
func (e *feedEnv) start(fn *Function, trig Binding, child *Child) (stop func()) {
	e.t.Helper()
	ft, err := newFeedTrigger(fn, trig, feedSettings, e.store, nil, child, slog.New(slog.DiscardHandler))
	require.NoError(e.t, err)
	return e.run(ft)
}

// restartDeliversOnly starts fn's trigger again and writes job id: the
// restarted trigger's first batch must be id alone (nothing from before
// its lease), and its lease then moves past it.
func (e *feedEnv) restartDeliversOnly(fn *Function, trig Binding, fake *fakeDispatch, id, why string) {
	e.t.Helper()
	e.start(fn, trig, fake.child())
	more := e.write(id)
	require.Equal(e.t, []string{id}, fake.next(e.t).ids, why)
	e.waitCheckpoint(more[0])
}

// run runs ft until the returned stop is called.
func (e *feedEnv) run(ft *feedTrigger) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.t.Context())
	done := make(chan struct{})
	go func() { defer close(done); ft.run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// TestFeedTriggerStartsWhereTheHostDoes: a trigger without a lease reads
// the container's whole feed with startFromBeginning, and otherwise only
// what changes after it started, writing its lease at the head at once (a
// restart before any batch must not skip what changed meanwhile). With a
// lease the setting counts for nothing.
func TestFeedTriggerStartsWhereTheHostDoes(t *testing.T) {
	t.Parallel()
	for _, fromStart := range []bool{true, false} {
		t.Run(fmt.Sprintf("startFromBeginning=%t", fromStart), func(t *testing.T) {
			t.Parallel()
			e := newFeedEnv(t)
			old := e.write("old1", "old2")
			fake := newFakeDispatch(t, nil)
			fn, trig := feedFunction(10, nil)
			trig.Props["startFromBeginning"] = json.RawMessage(strconv.FormatBool(fromStart))
			stop := e.start(fn, trig, fake.child())
			if fromStart {
				require.Equal(t, []string{"old1", "old2"}, fake.next(t).ids)
				e.waitCheckpoint(old[1]) // a stop before it would deliver the batch again
			} else {
				eventually(t, "the first lease", func() bool { _, ok := e.checkpoint(); return ok })
			}
			stop()
			e.write("meanwhile")
			e.start(fn, trig, fake.child())
			require.Equal(t, []string{"meanwhile"}, fake.next(t).ids, "a restart resumes at its lease")
			select {
			case d := <-fake.deliveries:
				t.Fatalf("delivered %v besides", d.ids)
			default:
			}
		})
	}
}

func TestFeedTriggerConfig(t *testing.T) {
	t.Parallel()
	fn, trig := feedFunction(2, &Retry{Strategy: "fixedDelay", MaxRetryCount: 2, DelayInterval: "00:00:00.01"})
	ft, err := newFeedTrigger(fn, trig, feedSettings, idleFeed{}, nil, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, "fleet_jobs", ft.container)
	require.Equal(t, "leases", ft.lease)
	require.Equal(t, 10*time.Millisecond, ft.pollDelay)
	require.Equal(t, 2, ft.maxItems)
	require.Equal(t, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, delays(ft.retries, 10))
	require.True(t, ft.fromStart)
	delete(trig.Props, "startFromBeginning")
	ft, err = newFeedTrigger(fn, trig, feedSettings, idleFeed{}, nil, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.False(t, ft.fromStart, "the host's default: from now")

	tests := []struct {
		name  string
		props map[string]string
		store FeedStore
		want  string
	}{
		{name: "no store", store: nil, want: "needs a store"},
		{name: "no container", props: map[string]string{"containerName": `""`}, store: idleFeed{}, want: "containerName is required"},
		{name: "zero batch", props: map[string]string{"maxItemsPerInvocation": `0`}, store: idleFeed{}, want: "must be positive"},
		{name: "unset setting", props: map[string]string{"containerName": `"%UNSET%"`}, store: idleFeed{}, want: "UNSET"},
		{name: "setting in an integer", props: map[string]string{"feedPollDelay": `"%POLL_MS%"`}, store: idleFeed{}, want: "feedPollDelay must be a JSON number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fn, trig := feedFunction(2, nil)
			for k, v := range tc.props {
				trig.Props[k] = json.RawMessage(v)
			}
			_, err := newFeedTrigger(fn, trig, feedSettings, tc.store, nil, nil, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "function dispatch")
		})
	}
}

type idleFeed struct{}

func (idleFeed) ReadChanges(context.Context, string, string, int) (store.ChangePage, error) {
	return store.ChangePage{}, nil
}
func (idleFeed) Read(context.Context, string, string, string) (store.Item, error) {
	return store.Item{}, store.ErrNotFound
}
func (idleFeed) Upsert(context.Context, string, string, string, []byte) (string, error) {
	return "", nil
}
func (idleFeed) ChangesHead(context.Context, string) (string, error) { return "", nil }

func TestFeedTriggerBatchesAndResumes(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	fn, trig := feedFunction(2, nil)

	revs := e.write("j1", "j2", "j3", "j4", "j5")
	stop := e.start(fn, trig, fake.child())
	// Batches of at most maxItemsPerInvocation, in feed order, each
	// document carrying its revision as _etag.
	require.Equal(t, []string{"j1", "j2"}, fake.next(t).ids)
	d := fake.next(t)
	require.Equal(t, []string{"j3", "j4"}, d.ids)
	require.Equal(t, revs[2:4], d.etags)
	require.Equal(t, []string{"j5"}, fake.next(t).ids)
	e.waitCheckpoint(revs[4])
	cp, _ := e.checkpoint()
	require.Equal(t, "dispatch", cp.Function)
	require.Equal(t, "fleet_jobs", cp.Container)

	// A change after the batch is delivered while the trigger idles.
	more := e.write("j6")
	require.Equal(t, []string{"j6"}, fake.next(t).ids)
	e.waitCheckpoint(more[0])
	stop()

	// A new trigger (a restarted host) resumes from the lease: nothing
	// checkpointed is delivered again, only what changed meanwhile.
	later := e.write("j7", "j8", "j9")
	e.start(fn, trig, fake.child())
	require.Equal(t, []string{"j7", "j8"}, fake.next(t).ids)
	require.Equal(t, []string{"j9"}, fake.next(t).ids)
	e.waitCheckpoint(later[2])
	select {
	case d := <-fake.deliveries:
		t.Fatalf("unexpected delivery %v", d.ids)
	default:
	}
}

func TestFeedTriggerRetriesThenCheckpointsPast(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		retry    *Retry
		failFor  int // how many attempts of the first batch fail
		attempts int // attempts of the first batch the handler sees
	}{
		// Without a retry policy the host tries a batch once.
		{name: "no policy", retry: nil, failFor: 99, attempts: 1},
		{name: "fixed delay, always failing", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: 2, DelayInterval: "00:00:00.01"},
			failFor: 99, attempts: 3},
		{name: "exponential, always failing", retry: &Retry{Strategy: "exponentialBackoff", MaxRetryCount: 3,
			MinimumInterval: "00:00:00.005", MaximumInterval: "00:00:00.02"}, failFor: 99, attempts: 4},
		{name: "fixed delay, recovers", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: 2, DelayInterval: "00:00:00.01"},
			failFor: 1, attempts: 2},
		// -1: the host retries until the batch succeeds.
		{name: "without end, recovers", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: -1, DelayInterval: "00:00:00.001"},
			failFor: 6, attempts: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFeedEnv(t)
			fake := newFakeDispatch(t, func(ids []string, attempt int) bool {
				return ids[0] == "j1" && attempt <= tc.failFor
			})
			fn, trig := feedFunction(2, tc.retry)
			revs := e.write("j1", "j2", "j3")
			stop := e.start(fn, trig, fake.child())

			for attempt := 1; attempt <= tc.attempts; attempt++ {
				d := fake.next(t)
				require.Equal(t, []string{"j1", "j2"}, d.ids, "attempt %d", attempt)
				require.Equal(t, attempt <= tc.failFor, d.failed, "attempt %d", attempt)
			}
			// Then the feed moves on: the batch is checkpointed past,
			// failed or not, and never delivered again.
			require.Equal(t, []string{"j3"}, fake.next(t).ids)
			e.waitCheckpoint(revs[2])
			stop()

			e.restartDeliversOnly(fn, trig, fake, "j4", "a restarted trigger must not redeliver the failed batch")
		})
	}
}

// TestFeedTriggerWaitsForHandler checks that a batch read while the handler
// is down (restarting) is delivered once it is back, not dropped.
func TestFeedTriggerWaitsForHandler(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	child := &Child{Log: slog.New(slog.DiscardHandler), ready: make(chan struct{})}
	revs := e.write("j1")
	ft, counted := e.newCountedTrigger(child, nil, time.Millisecond)
	var up, early atomic.Bool
	counted.onUpsert = func() { early.Store(early.Load() || !up.Load()) }
	e.run(ft)

	eventually(t, "the batch read", func() bool { return counted.reads.Load() >= 1 })
	child.mu.Lock()
	child.addr = strings.TrimPrefix(fake.srv.URL, "http://")
	up.Store(true)
	close(child.ready)
	child.mu.Unlock()
	require.Equal(t, []string{"j1"}, fake.next(t).ids)
	e.waitCheckpoint(revs[0])
	require.False(t, early.Load(), "nothing is checkpointed before the handler took the batch")
}

// TestFeedTriggerStoppedMidBatchDeliversItAgain: a trigger stopped while
// the function runs a batch leaves its lease before that batch (the
// function may not have finished it), so the next start delivers it again.
func TestFeedTriggerStoppedMidBatchDeliversItAgain(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	first := e.write("j1")
	fn, trig := feedFunction(10, nil)
	stop := e.start(fn, trig, fake.child())
	require.Equal(t, []string{"j1"}, fake.next(t).ids)
	e.waitCheckpoint(first[0])

	running, release := make(chan struct{}), make(chan struct{})
	fake.mu.Lock()
	fake.during = func(ids []string) {
		if ids[0] == "j2" {
			close(running)
			<-release
		}
	}
	fake.mu.Unlock()
	t.Cleanup(sync.OnceFunc(func() { close(release) }))
	e.write("j2")
	select {
	case <-running:
	case <-time.After(within):
		t.Fatal("j2 was never delivered")
	}
	stop() // cancels the invocation in flight
	cp, _ := e.checkpoint()
	require.Equal(t, first[0], cp.Continuation, "the lease stays before the batch cut off")

	fake.mu.Lock()
	fake.during = nil
	fake.mu.Unlock()
	e.start(fn, trig, fake.child())
	require.Equal(t, []string{"j2"}, fake.next(t).ids, "delivered again after the restart")
}

// countingFeed counts a trigger's feed reads and lease writes.
type countingFeed struct {
	FeedStore
	reads, upserts atomic.Int64
	onRead         func() // when set, called at each read
	onUpsert       func() // when set, called at each lease write before it is made
}

func (c *countingFeed) ReadChanges(ctx context.Context, container, cont string, max int) (store.ChangePage, error) {
	c.reads.Add(1)
	if c.onRead != nil {
		c.onRead()
	}
	return c.FeedStore.ReadChanges(ctx, container, cont, max)
}

func (c *countingFeed) Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	c.upserts.Add(1)
	if c.onUpsert != nil {
		c.onUpsert()
	}
	return c.FeedStore.Upsert(ctx, container, pk, id, body)
}

// newCountedTrigger is the dispatch trigger over e's store through a
// countingFeed, woken by changed (nil: polling), writing its lease at most
// every checkpointEvery.
func (e *feedEnv) newCountedTrigger(child *Child, changed <-chan struct{}, checkpointEvery time.Duration) (*feedTrigger, *countingFeed) {
	e.t.Helper()
	fn, trig := feedFunction(10, nil)
	counted := &countingFeed{FeedStore: e.store}
	ft, err := newFeedTrigger(fn, trig, feedSettings, counted, changed, child, slog.New(slog.DiscardHandler))
	require.NoError(e.t, err)
	ft.checkpointEvery = checkpointEvery
	return ft, counted
}

// TestFeedTriggerWritesItsLeaseAtMostEvery: batches that follow each other
// within checkpointEvery write the lease once, at the first; the trigger's
// stop writes where it got to, so a restart redelivers nothing.
func TestFeedTriggerWritesItsLeaseAtMostEvery(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	ft, counted := e.newCountedTrigger(fake.child(), nil, time.Hour)
	stop := e.run(ft)

	var revs []string
	for _, id := range []string{"j1", "j2", "j3", "j4"} {
		revs = append(revs, e.write(id)...)
		require.Equal(t, []string{id}, fake.next(t).ids)
	}
	cp, ok := e.checkpoint()
	require.True(t, ok)
	require.Equal(t, revs[0], cp.Continuation, "only the first batch's checkpoint is written within the hour")
	// The fourth batch's answer reached the trigger (a stop before it would
	// leave the lease before that batch).
	eventually(t, "four batches done", func() bool { return ft.status().Batches == 4 })
	stop()
	require.Equal(t, int64(2), counted.upserts.Load(), "the first batch's lease write and the stop's")
	require.Equal(t, int64(2), ft.status().Checkpoints)
	require.Equal(t, int64(4), ft.status().Batches)
	cp, _ = e.checkpoint()
	require.Equal(t, revs[3], cp.Continuation, "the stop wrote where the trigger got to")

	fn, trig := feedFunction(10, nil)
	e.restartDeliversOnly(fn, trig, fake, "j5", "a restarted trigger must not redeliver what the stop wrote")
}

// TestFeedTriggerWritesALaggingLeaseWhenDue: a trigger with nothing more
// to read writes its lagging lease once checkpointEvery has passed on its
// clock, without waiting for a change or its stop, and without reading the
// feed for it.
func TestFeedTriggerWritesALaggingLeaseWhenDue(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	changed := make(chan struct{}, 1)
	ft, counted := e.newCountedTrigger(fake.child(), changed, 50*time.Millisecond)
	now := time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: now, events: make(chan timerEvent, 16)}
	ft.clock = clock
	e.run(ft)
	eventually(t, "the start's read", func() bool { return counted.reads.Load() == 1 })

	first := e.write("j1")
	changed <- struct{}{}
	require.Equal(t, []string{"j1"}, fake.next(t).ids)
	second := e.write("j2")
	changed <- struct{}{}
	require.Equal(t, []string{"j2"}, fake.next(t).ids)
	select {
	case ev := <-clock.events:
		require.Equal(t, 50*time.Millisecond, ev.wait, "the lease falls due a checkpointEvery after its last write")
	case <-time.After(within):
		t.Fatal("the trigger never waited for its lagging lease")
	}
	cp, _ := e.checkpoint()
	require.Equal(t, first[0], cp.Continuation, "not written before it is due")

	clock.Set(now.Add(50 * time.Millisecond))
	e.waitCheckpoint(second[0])
	require.Equal(t, int64(3), counted.reads.Load(), "the start's read and one per signalled change, none for the lease")
}

// TestFeedTriggerReadsOnlyWhenSignalled: with a change signal, a short
// batch is not followed by a read of the feed (it would find nothing: every
// later commit signals); one read follows each signal. Each read notes how
// many signals the test had begun to send: a read after a batch, before the
// next signal was taken, repeats a number.
func TestFeedTriggerReadsOnlyWhenSignalled(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	changed := make(chan struct{}) // unbuffered: a send returns once the trigger waits
	ft, counted := e.newCountedTrigger(fake.child(), changed, 0)
	var sent atomic.Int64
	var mu sync.Mutex
	var reads []int64
	counted.onRead = func() {
		mu.Lock()
		defer mu.Unlock()
		reads = append(reads, sent.Load())
	}
	send := func() {
		sent.Add(1)
		changed <- struct{}{}
	}
	e.run(ft)
	eventually(t, "the start's read", func() bool { return counted.reads.Load() == 1 })

	for _, id := range []string{"j1", "j2", "j3"} {
		e.write(id)
		send()
		require.Equal(t, []string{id}, fake.next(t).ids)
	}
	send() // taken once the trigger waits again, after whatever it read after j3's batch
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(reads), 4)
	require.Equal(t, []int64{0, 1, 2, 3}, reads[:4], "the start's read, then one per signal")
}

// TestFeedTriggerReadsAChangeMadeDuringItsBatch: a commit while the batch
// is being handled (the dispatch function's own stamp, say) signals while
// the trigger is not waiting; the signal is kept, so the change is read.
func TestFeedTriggerReadsAChangeMadeDuringItsBatch(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	changed := make(chan struct{}, 1) // as WatchFiles makes it
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var once sync.Once
	fake.during = func([]string) {
		once.Do(func() {
			e.write("j2")
			signal()
		})
	}
	ft, _ := e.newCountedTrigger(fake.child(), changed, 0)
	e.run(ft)

	e.write("j1")
	signal()
	require.Equal(t, []string{"j1"}, fake.next(t).ids)
	require.Equal(t, []string{"j2"}, fake.next(t).ids)
}

// TestFeedTriggerTimesItsBatches: the trigger's status gives each batch's
// read, invocation and checkpoint as p50/p99 (issue 25: the parts of a
// dispatch's change-feed wake), once a batch has run.
func TestFeedTriggerTimesItsBatches(t *testing.T) {
	t.Parallel()
	e := newFeedEnv(t)
	fake := newFakeDispatch(t, nil)
	fn, trig := feedFunction(2, nil)
	ft, err := newFeedTrigger(fn, trig, feedSettings, e.store, nil, fake.child(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Zero(t, ft.status().InvokeP99Ms, "no batch, no figure")

	revs := e.write("j1", "j2", "j3")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); ft.run(ctx) }()
	fake.next(t)
	fake.next(t)
	e.waitCheckpoint(revs[2])
	cancel()
	<-done

	st := ft.status()
	require.Equal(t, int64(2), st.Batches)
	for name, v := range map[string]float64{
		"read p50": st.ReadP50Ms, "read p99": st.ReadP99Ms, "invoke p50": st.InvokeP50Ms,
		"invoke p99": st.InvokeP99Ms, "checkpoint p50": st.CheckpointP50Ms, "checkpoint p99": st.CheckpointP99Ms,
	} {
		require.Positive(t, v, name)
	}
	require.GreaterOrEqual(t, st.InvokeP99Ms, st.InvokeP50Ms)
}

// TestBatchInvocation: the invocation a change-feed trigger sends is what
// encoding the host's envelope gives, byte for byte, with each document's
// system properties first.
func TestBatchInvocation(t *testing.T) {
	t.Parallel()
	items := []store.Item{
		{ID: "j1", PartitionKey: "p1", Rev: "41", Body: []byte(`{"id":"j1","title":"a \"b\" <c> \\ \u00e9t\u00e9\n"}`)},
		{ID: "j2", PartitionKey: "p1", Rev: "42", Body: []byte(`{"id":"j2"}`)},
	}
	batch := funchost.EncodeDocuments([]json.RawMessage{
		json.RawMessage(`{"_etag":"41","_ts":1764230400,"id":"j1","title":"a \"b\" <c> \\ \u00e9t\u00e9\n"}`),
		json.RawMessage(`{"_etag":"42","_ts":1764230400,"id":"j2"}`),
	})
	want, err := json.Marshal(&funchost.Invocation{Data: map[string]json.RawMessage{"documents": batch}, Metadata: map[string]json.RawMessage{}})
	require.NoError(t, err)
	got := batchInvocation("documents", items, 1764230400)
	require.JSONEq(t, string(want), string(got))
	var inv funchost.Invocation
	require.NoError(t, json.Unmarshal(got, &inv))
	require.Equal(t, string(batch), string(inv.Data["documents"]))
	docs, err := funchost.Documents(inv.Data["documents"])
	require.NoError(t, err)
	require.Len(t, docs, 2)
}

// BenchmarkBatchInvocation is the emulator's side of a change-feed batch:
// three job-sized documents given their system properties and encoded as
// the host's invocation.
func BenchmarkBatchInvocation(b *testing.B) {
	items := make([]store.Item, 3)
	for i := range items {
		items[i] = store.Item{ID: fmt.Sprintf("j%06d", i), PartitionKey: "p", Rev: strconv.Itoa(1000 + i),
			Body: fmt.Appendf(nil, `{"id":"j%06d","productId":"p","stage":"queued","title":"Fix \"flaky\" <test>","task":%q}`, i, strings.Repeat("do the thing\n", 100))}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = batchInvocation("documents", items, 1764230400)
	}
}
