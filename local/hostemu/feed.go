package hostemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/hist"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/funchost"

	"github.com/go-json-experiment/json/jsontext"
)

// FeedStore is what the Cosmos DB trigger needs of the store: the change
// feed (its head, for a trigger that starts from now), and documents in the
// lease container for its checkpoint.
type FeedStore interface {
	ReadChanges(ctx context.Context, container, continuation string, max int) (store.ChangePage, error)
	ChangesHead(ctx context.Context, container string) (string, error)
	Read(ctx context.Context, container, pk, id string) (store.Item, error)
	Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error)
}

// Checkpoint is the lease document the trigger keeps per function.
type Checkpoint struct {
	ID           string    `json:"id"`
	Continuation string    `json:"continuation"`
	Function     string    `json:"function"`
	Container    string    `json:"container"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

type feedTrigger struct {
	stats     feedStats
	fn        *Function
	binding   string
	container string
	lease     string
	prefix    string
	leaseID   string
	pollDelay time.Duration
	// checkpointEvery is CheckpointEvery but in tests; clock
	// schedules the lease writes (stats time what elapsed on the wall).
	checkpointEvery time.Duration
	clock           hostClock
	maxItems        int
	// fromStart is startFromBeginning: a trigger without a lease reads
	// the container's whole feed; else it starts at the feed's head.
	fromStart bool
	retries   RetryPolicy
	store     FeedStore
	changed   <-chan struct{}
	child     *Child
	client    *http.Client
	log       *slog.Logger
}

func newFeedTrigger(fn *Function, trig Binding, get Settings, store FeedStore, changed <-chan struct{}, child *Child, log *slog.Logger) (*feedTrigger, error) {
	if store == nil {
		return nil, fmt.Errorf("function %s: a cosmosDBTrigger needs a store", fn.Name)
	}
	t := &feedTrigger{fn: fn, binding: trig.Name, store: store, changed: changed, child: child, checkpointEvery: CheckpointEvery, clock: wallClock{},
		client: &http.Client{Transport: handlerTransport}, log: log} // New bounds it at functionTimeout
	var err error
	if t.container, err = get.String(trig, "containerName", ""); err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	if t.container == "" {
		return nil, fmt.Errorf("function %s: containerName is required", fn.Name)
	}
	if t.lease, err = get.String(trig, "leaseContainerName", "leases"); err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	if t.prefix, err = get.String(trig, "leaseContainerPrefix", ""); err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	delay, err := get.Int(trig, "feedPollDelay", 5000)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	t.pollDelay = time.Duration(delay) * time.Millisecond
	if t.maxItems, err = get.Int(trig, "maxItemsPerInvocation", 100); err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	if t.fromStart, err = get.Bool(trig, "startFromBeginning", false); err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	if t.maxItems <= 0 || t.pollDelay <= 0 {
		return nil, fmt.Errorf("function %s: feedPollDelay and maxItemsPerInvocation must be positive", fn.Name)
	}
	if t.retries, err = fn.Retry.Policy(); err != nil {
		return nil, fmt.Errorf("function %s: retry: %w", fn.Name, err)
	}
	t.leaseID = "hostemu." + fn.Name + "." + t.container
	if t.prefix != "" {
		// The host names leases by prefix and monitored container, not by
		// function: two functions sharing a prefix share one checkpoint.
		t.leaseID = "hostemu." + t.prefix + t.container
	}
	return t, nil
}

// leaseKey is what the host's lease documents are named after: the lease
// container, the prefix and the monitored container. Two functions with
// the same key would take each other's leases, and each would see only
// part of the feed.
func (t *feedTrigger) leaseKey() string { return t.lease + "/" + t.prefix + "/" + t.container }

// checkpoint returns where the trigger resumes: its lease's continuation.
// Without a lease, as the host does, it starts from the beginning of the
// container's feed (startFromBeginning) or at its head, writing the lease
// there at once so that a restart does not skip what changed meanwhile.
// Either way the setting counts only while no lease exists.
func (t *feedTrigger) checkpoint(ctx context.Context) (string, error) {
	it, err := t.store.Read(ctx, t.lease, t.leaseID, t.leaseID)
	if errors.Is(err, store.ErrNotFound) {
		if t.fromStart {
			return "", nil
		}
		head, err := t.store.ChangesHead(ctx, t.container)
		if err != nil {
			return "", fmt.Errorf("read the feed's head: %w", err)
		}
		if err := t.saveCheckpoint(ctx, head); err != nil {
			return "", fmt.Errorf("write the first lease: %w", err)
		}
		return head, nil
	}
	if err != nil {
		return "", fmt.Errorf("read checkpoint: %w", err)
	}
	var cp Checkpoint
	if err := json.Unmarshal(it.Body, &cp); err != nil {
		return "", fmt.Errorf("decode checkpoint: %w", err)
	}
	return cp.Continuation, nil
}

func (t *feedTrigger) saveCheckpoint(ctx context.Context, cont string) error {
	body, _ := json.Marshal(Checkpoint{ID: t.leaseID, Continuation: cont, Function: t.fn.Name, Container: t.container, UpdatedAt: t.clock.Now()})
	_, err := t.store.Upsert(ctx, t.lease, t.leaseID, t.leaseID, body)
	return err
}

// CheckpointEvery is how often at most a trigger writes its lease
// while batches follow each other: after a batch the lease is written at
// once if the last write is older, else once this much time has passed
// since it, or when the trigger stops. The host writes its lease after
// every batch, a Cosmos DB write that costs the function app no CPU; here
// it is a SQLite transaction on the handler's CPUs, and at 100 jobs/s (a
// batch for nearly every version of every job) it took twice the
// emulator's CPU that invoking the function did (perf, issue 25). The delay
// changes only what a crash re-delivers: up to this window of batches,
// where the host re-delivers the one in flight, and every change-feed
// function takes a batch twice without harm (at-least-once) on both.
const CheckpointEvery = 100 * time.Millisecond

// run reads the feed and invokes the function until ctx ends. After a full
// batch it reads again at once; after a short one, or an empty page, it
// waits for the change signal (when the store gives one) or feedPollDelay:
// the store signals every commit after it, so a read then would find
// nothing new.
func (t *feedTrigger) run(ctx context.Context) {
	cont, err := t.checkpoint(ctx)
	for err != nil {
		t.log.Error("change feed: cannot read checkpoint; retrying", "function", t.fn.Name, "err", err)
		if !sleep(ctx, t.pollDelay) {
			return
		}
		cont, err = t.checkpoint(ctx)
	}
	lease := leaseWriter{t: t, saved: cont}
	defer func() {
		// A stop writes what the lease lags by, so a restart resumes
		// where this run ended.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		lease.save(stopCtx, cont)
	}()
	caughtUp := false // the last page was short, or empty
	for ctx.Err() == nil {
		if caughtUp && !t.idle(ctx, &lease, cont) {
			continue
		}
		began := time.Now()
		page, err := t.store.ReadChanges(ctx, t.container, cont, t.maxItems)
		read := time.Since(began)
		if err != nil {
			if ctx.Err() == nil {
				t.log.Error("change feed read failed", "function", t.fn.Name, "err", err)
			}
			sleep(ctx, t.pollDelay)
			caughtUp = false // read again, whatever the signal says
			continue
		}
		// Only a change signal can say that nothing came since this read;
		// polling, a batch is followed by a read at once, as the host does.
		caughtUp = len(page.Items) == 0 || (t.changed != nil && len(page.Items) < t.maxItems)
		if len(page.Items) == 0 {
			continue
		}
		invoked := time.Now()
		ok := t.deliver(ctx, page.Items)
		if !ok && ctx.Err() != nil {
			// Stopped mid-batch: the function may not have run it, so the
			// lease stays before it and a restart delivers it again, as
			// the host leaves a batch in flight unchecked.
			return
		}
		t.stats.record(len(page.Items), ok)
		t.stats.read.Observe(read)
		t.stats.invoke.Observe(time.Since(invoked))
		// The host moves its lease past the batch whether or not the
		// function succeeded: a failed batch is not seen again.
		cont = page.Continuation
		if lease.due() {
			lease.save(ctx, cont)
		}
	}
}

// leaseWriter writes a trigger's checkpoint at most every checkpointEvery.
type leaseWriter struct {
	t       *feedTrigger
	saved   string    // the continuation the lease holds
	triedAt time.Time // the last write, or attempt at one
}

// dueIn is how long until a checkpoint may be written (<= 0: now).
func (w *leaseWriter) dueIn() time.Duration {
	return w.t.checkpointEvery - w.t.clock.Now().Sub(w.triedAt)
}

func (w *leaseWriter) due() bool { return w.dueIn() <= 0 }

// save writes cont to the lease unless it holds it already. A failed write
// is logged and tried again when next due.
func (w *leaseWriter) save(ctx context.Context, cont string) {
	if cont == w.saved {
		return
	}
	began := time.Now()
	err := w.t.saveCheckpoint(ctx, cont)
	w.triedAt = w.t.clock.Now()
	if err != nil {
		if ctx.Err() == nil {
			w.t.log.Error("change feed: checkpoint not saved", "function", w.t.fn.Name, "err", err)
		}
		return
	}
	w.saved = cont
	w.t.stats.checkpoint.Observe(time.Since(began))
}

// feedStats counts what a feed trigger delivered, and times each batch's
// steps: the read of the feed page and the function's invocation (its
// whole run, retries included); and times each checkpoint write (at most
// one every checkpointEvery). A dispatch's change-feed wake is made of
// them (issue 25).
type feedStats struct {
	batches, documents, failed atomic.Int64
	last                       atomic.Int64 // unix ms of the last batch
	read, invoke, checkpoint   hist.Hist
}

func (s *feedStats) record(docs int, ok bool) {
	s.batches.Add(1)
	s.documents.Add(int64(docs))
	if !ok {
		s.failed.Add(1)
	}
	s.last.Store(time.Now().UnixMilli())
}

// FeedStatus is one change-feed trigger's counters.
type FeedStatus struct {
	Container     string    `json:"container"`
	Batches       int64     `json:"batches"`
	Documents     int64     `json:"documents"`
	FailedBatches int64     `json:"failedBatches"`
	LastBatchAt   time.Time `json:"lastBatchAt,omitzero"`
	// Checkpoints counts the lease writes.
	Checkpoints int64 `json:"checkpoints"`
	// p50 and p99 in milliseconds (histogram bucket bounds, at most 19%
	// high): per batch, reading the page and invoking the function; per
	// checkpoint, its write.
	ReadP50Ms       float64 `json:"readP50Ms"`
	ReadP99Ms       float64 `json:"readP99Ms"`
	InvokeP50Ms     float64 `json:"invokeP50Ms"`
	InvokeP99Ms     float64 `json:"invokeP99Ms"`
	CheckpointP50Ms float64 `json:"checkpointP50Ms"`
	CheckpointP99Ms float64 `json:"checkpointP99Ms"`
}

func (t *feedTrigger) status() FeedStatus {
	st := FeedStatus{Container: t.container, Batches: t.stats.batches.Load(), Documents: t.stats.documents.Load(), FailedBatches: t.stats.failed.Load()}
	for _, h := range []struct {
		hist     *hist.Hist
		p50, p99 *float64
		n        *int64 // nil: the count is Batches
	}{
		{&t.stats.read, &st.ReadP50Ms, &st.ReadP99Ms, nil},
		{&t.stats.invoke, &st.InvokeP50Ms, &st.InvokeP99Ms, nil},
		{&t.stats.checkpoint, &st.CheckpointP50Ms, &st.CheckpointP99Ms, &st.Checkpoints},
	} {
		sum := h.hist.Summary()
		*h.p50, *h.p99 = sum.P50Ms(), sum.P99Ms()
		if h.n != nil {
			*h.n = sum.N
		}
	}
	if ms := t.stats.last.Load(); ms > 0 {
		st.LastBatchAt = time.UnixMilli(ms).UTC()
	}
	return st
}

// idle waits until the feed may have changed: the store's change signal
// (else feedPollDelay). While the lease lags behind cont it writes it when
// due, and then says not to read (false): nothing signalled a change.
func (t *feedTrigger) idle(ctx context.Context, lease *leaseWriter, cont string) (read bool) {
	var due <-chan time.Time
	if cont != lease.saved {
		due = t.clock.After(lease.dueIn())
	}
	var poll <-chan time.Time
	if t.changed == nil {
		timer := time.NewTimer(t.pollDelay)
		defer timer.Stop()
		poll = timer.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-t.changed:
	case <-poll:
	case <-due:
		lease.save(ctx, cont)
		return false
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// deliver invokes the function with one batch, retrying per the function's
// retry policy. It returns whether the batch succeeded.
func (t *feedTrigger) deliver(ctx context.Context, items []store.Item) bool {
	body := batchInvocation(t.binding, items, time.Now().Unix())
	for attempt := 0; ; attempt++ {
		addr, err := t.child.Addr(ctx)
		if err == nil {
			_, _, err = invokeBody(ctx, t.client, addr, t.fn.Name, body)
		}
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !t.retries.Allows(attempt) {
			t.log.Error("change-feed batch failed; checkpointing past it as the host does (the redispatch sweep covers it)",
				"function", t.fn.Name, "documents", len(items), "attempts", attempt+1, "err", err)
			return false
		}
		wait := t.retries.Delay(attempt)
		t.log.Warn("change-feed batch failed; retrying", "function", t.fn.Name, "attempt", attempt+1, "in", wait, "err", err)
		if !sleep(ctx, wait) {
			return false
		}
	}
}

// batchInvocation is the invocation of a change-feed function with items
// as its binding's value, in the host's encoding (funchost.EncodeDocuments)
// and each with the system properties (systemParts), _ts being ts: what
// encoding a funchost.Invocation gives, built in one buffer with one
// escaping pass over each document (every change of every job crosses it).
func batchInvocation(binding string, items []store.Item, ts int64) []byte {
	n := 0
	for _, it := range items {
		n += len(it.Body) + 48 // the system properties
	}
	b := make([]byte, 0, funchost.EncodedSize(n)+len(binding)+32)
	b = append(b, `{"Data":{`...)
	b, _ = jsontext.AppendQuote(b, binding) // a binding name is ASCII
	b = append(b, ':')
	var w funchost.BatchWriter
	w.Begin(b)
	scratch := make([]byte, 0, 64)
	for _, it := range items {
		prefix, rest := systemParts(scratch, it, ts)
		w.Add(prefix, rest)
		scratch = prefix[:0]
	}
	return append(w.End(), `},"Metadata":{}}`...)
}

// systemParts is a document as the host hands it out, in two parts: what
// Cosmos DB adds to every document (_etag, the revision a CAS needs, and
// _ts), appended to scratch, then the document's own fields. A body that is
// not an object is handed out as it is. The prefix is ASCII, so the parts
// split between characters as funchost.BatchWriter needs.
func systemParts(scratch []byte, it store.Item, ts int64) (prefix, rest []byte) {
	body := bytes.TrimSpace(it.Body)
	if len(body) < 2 || body[0] != '{' {
		return scratch[:0], it.Body
	}
	b := append(scratch[:0], `{"_etag":`...)
	b, _ = jsontext.AppendQuote(b, it.Rev)
	b = append(b, `,"_ts":`...)
	b = strconv.AppendInt(b, ts, 10)
	if rest := bytes.TrimSpace(body[1:]); len(rest) > 0 && rest[0] != '}' {
		b = append(b, ',')
	}
	return b, body[1:]
}

// WatchFiles signals on the returned channel whenever one of the files
// changes size or modification time. For SQLite in WAL mode every commit
// changes the -wal file (and the store touches its change markers), so this
// wakes the change-feed reader without a single query while nothing happens.
// Where the OS tells of changes (inotify on Linux) the signal comes at once;
// elsewhere, or if that fails, the files are checked every interval: a
// poll adds up to interval to every dispatch (issue 25 counts it in the
// change-feed wake stage).
func WatchFiles(ctx context.Context, interval time.Duration, paths ...string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	watch, err := notifyChanges(paths)
	go func() {
		if err == nil && watch(ctx, ch) {
			return
		}
		pollFiles(ctx, interval, paths, ch)
	}()
	return ch
}

// signal wakes the reader, once however many changes happened since it
// last looked.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pollFiles signals on ch whenever one of the files changed size or
// modification time since the last check, every interval, until ctx ends.
func pollFiles(ctx context.Context, interval time.Duration, paths []string, ch chan<- struct{}) {
	type sig struct {
		size int64
		mod  time.Time
	}
	stat := func() []sig {
		out := make([]sig, len(paths))
		for i, p := range paths {
			if fi, err := os.Stat(p); err == nil {
				out[i] = sig{fi.Size(), fi.ModTime()}
			}
		}
		return out
	}
	prev := stat()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur := stat()
		for i := range cur {
			if cur[i] != prev[i] {
				signal(ch)
				break
			}
		}
		prev = cur
	}
}
