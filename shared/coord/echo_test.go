package coord_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

const (
	hookURL    = "https://hooks.example/fleet"
	downURL    = "https://down.example/fleet"
	hookSecret = fleet.Secret("echo-secret-0123456789")
)

// fakeWebhook records deliveries; URLs in down fail, with fail's error
// when set; URLs in hold wait for their channel to close (a tarpit).
type fakeWebhook struct {
	mu    sync.Mutex
	got   []echo.WebhookRequest
	tries map[string]int
	down  map[string]bool
	fail  error
	hold  map[string]chan struct{}
	// holding counts the deliveries each held URL has taken in (hanging
	// until their channel closes).
	holding map[string]int
	// entered, when set, hears of every delivery a held URL takes in.
	entered chan string
	// posted, when set, hears of every acknowledged delivery.
	posted chan echo.WebhookRequest
	// refused are secrets whose deliveries are answered 401, to any URL
	// (a receiver that does not know that product's secret).
	refused map[string]bool
}

func (h *fakeWebhook) Post(ctx context.Context, r echo.WebhookRequest) error {
	h.mu.Lock()
	hold := h.hold[r.URL]
	if hold != nil {
		if h.holding == nil {
			h.holding = map[string]int{}
		}
		h.holding[r.URL]++
	}
	entered := h.entered
	h.mu.Unlock()
	if hold != nil && entered != nil {
		entered <- r.URL
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return &echo.WebhookError{Class: echo.TimeoutFailure, Err: ctx.Err()}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tries == nil {
		h.tries = map[string]int{}
	}
	h.tries[r.URL]++
	for secret := range h.refused {
		if fleet.VerifyEcho(fleet.Secret(secret), r.Body, r.Headers[fleet.EchoSignatureHeader]) {
			return &echo.WebhookError{Class: echo.HTTP4xx, Err: errors.New("the webhook answered 401 Unauthorized")}
		}
	}
	if h.down[r.URL] {
		if h.fail != nil {
			return h.fail
		}
		return &echo.WebhookError{Class: echo.HTTP5xx, Err: errors.New("the webhook answered 500 Internal Server Error")}
	}
	h.got = append(h.got, r)
	if h.posted != nil {
		h.posted <- r
	}
	return nil
}

func (h *fakeWebhook) holdingOf(url string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holding[url]
}

func (h *fakeWebhook) triesOf(url string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tries[url]
}

func (h *fakeWebhook) setDown(url string, down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down == nil {
		h.down = map[string]bool{}
	}
	h.down[url] = down
}

// seqs lists the delivered (jobId, seq) of one job, in delivery order,
// checking every delivery's signature and headers.
func (h *fakeWebhook) seqs(t *testing.T, jobID string) []int64 {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int64
	for _, r := range h.got {
		var ev fleet.EchoEvent
		require.NoError(t, json.Unmarshal(r.Body, &ev))
		if ev.JobID != jobID {
			continue
		}
		require.True(t, fleet.VerifyEcho(hookSecret, r.Body, r.Headers[fleet.EchoSignatureHeader]), "signature of %s", r.Body)
		require.Equal(t, fleet.EchoEventID(jobID, ev.Seq), r.Headers[fleet.EchoEventIDHeader])
		require.Equal(t, "application/json", r.Headers["Content-Type"])
		out = append(out, ev.Seq)
	}
	return out
}

func (h *fakeWebhook) bodies(t *testing.T) []fleet.EchoEvent {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]fleet.EchoEvent, len(h.got))
	for i, r := range h.got {
		require.NoError(t, json.Unmarshal(r.Body, &out[i]))
	}
	return out
}

type echoEnv struct {
	*env
	hook *fakeWebhook
	logs *bytes.Buffer
	mu   *sync.Mutex
}

func newEchoEnv(t *testing.T) *echoEnv {
	// The breaker stays out of the way of the backoff tests; its own test
	// sets it.
	return newEchoEnvWith(t, coord.Config{EchoBackoff: time.Second, EchoMaxBackoff: 8 * time.Second, EchoBreakerFailures: 1000})
}

func newEchoEnvWith(t *testing.T, cfg coord.Config, opts ...envOpt) *echoEnv {
	hook := &fakeWebhook{}
	logs, mu := &bytes.Buffer{}, &sync.Mutex{}
	e := newEnv(t, append([]envOpt{withConfig(cfg),
		withDeps(func(d *coord.Deps) {
			d.Webhook = hook
			d.Log = slog.New(slog.NewJSONHandler(lockedWriter{mu, logs}, nil))
		})}, opts...)...)
	_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo, "api"},
		Tracker: &catalog.TrackerChange{WebhookURL: hookURL, Secret: hookSecret}})
	require.NoError(t, err)
	return &echoEnv{env: e, hook: hook, logs: logs, mu: mu}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (e *echoEnv) ingest(item string) *fleet.Job {
	e.t.Helper()
	j, out, err := e.c.Ingest(e.ctx, echo.IngestRequest{ProductID: prod, Ref: fleet.TrackerRef{Source: "jira", ItemID: item, Revision: 1}, Manifest: manifest()})
	require.NoError(e.t, err)
	require.Equal(e.t, echo.IngestCreated, out)
	return j
}

// feed runs the echo function on the jobs' current documents.
func (e *echoEnv) feed(ids ...string) int {
	e.t.Helper()
	items := make([]store.Item, len(ids))
	for i, id := range ids {
		items[i] = e.rawJob(id)
	}
	run, err := e.c.EchoChanged(e.ctx, items, echo.Await)
	require.NoError(e.t, err)
	return run.Delivered
}

func (e *echoEnv) sweep() int {
	e.t.Helper()
	n, err := e.c.EchoSweep(e.ctx)
	require.NoError(e.t, err)
	return n
}

func (e *echoEnv) echo(id string) *echo.View {
	e.t.Helper()
	v, err := e.c.Echo(e.ctx, prod, id)
	require.NoError(e.t, err)
	return v
}

// run takes the job through claim, building and a failure, so it has a
// few events of several stages.
func (e *echoEnv) run(j *fleet.Job) {
	e.t.Helper()
	e.factory("f1")
	cl := e.claim("f1")
	require.Equal(e.t, j.ID, cl.Job.ID)
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(e.t, err)
	_, err = e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "broke", Retryable: false})
	require.NoError(e.t, err)
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// TestEchoDeliversEveryEventInOrderSigned: each event once, in seq order,
// signed with the product's secret, with the stage the job was in after
// it; the state shows it up to date, and closed once the job ended.
func TestEchoDeliversEveryEventInOrderSigned(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	j := e.ingest("PROJ-1")
	require.Equal(t, 1, e.feed(j.ID))
	e.run(j)
	last := e.job(j.ID).EventSeq
	require.Equal(t, int(last-1), e.feed(j.ID))
	require.Zero(t, e.feed(j.ID), "nothing new: nothing sent")
	require.Equal(t, seqRange(1, last), e.hook.seqs(t, j.ID))

	evs := e.events(j.ID)
	bodies := e.hook.bodies(t)
	stage := fleet.Stage("")
	for i, b := range bodies {
		if evs[i].To != "" {
			stage = evs[i].To
		}
		require.Equal(t, fleet.EchoEvent{Source: "jira", ItemID: "PROJ-1", JobID: j.ID, ProductID: prod, Seq: evs[i].Seq,
			Type: evs[i].Type, Stage: stage, At: evs[i].At}, b)
	}
	require.Equal(t, fleet.StageFailed, bodies[len(bodies)-1].Stage)
	v := e.echo(j.ID)
	require.Equal(t, &echo.View{JobID: j.ID, DeliveredSeq: last, LatestSeq: last}, v)
	e.clock.Advance(time.Hour)
	require.Zero(t, e.sweep(), "a finished job is not swept")

	// Untracked jobs are not echoed.
	plain := e.submit()
	require.Zero(t, e.feed(plain.ID))
	_, err := e.c.Echo(e.ctx, prod, plain.ID)
	requireCode(t, err, fleet.CodeConflict, "")
}

// TestEchoBacksOffAndTheSweepRetries: a failing webhook is retried after
// EchoBackoff doubling per failure up to EchoMaxBackoff; before it is due
// neither the feed nor the sweep sends; once it answers, the sweep sends
// everything, in order.
func TestEchoBacksOffAndTheSweepRetries(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	e.hook.setDown(hookURL, true)
	j := e.ingest("PROJ-2")
	require.Zero(t, e.feed(j.ID))
	v := e.echo(j.ID)
	require.Equal(t, int64(0), v.DeliveredSeq)
	require.Equal(t, ptr(int64(1)), v.PendingSeq)
	require.Equal(t, 1, v.Attempts)
	require.Equal(t, "http_5xx", *v.LastError)
	require.Equal(t, t0.Add(time.Second), *v.NextAttemptAt)

	e.run(j)
	require.Zero(t, e.feed(j.ID), "backing off: the feed does not send")
	require.Zero(t, e.sweep(), "not due yet")
	require.Equal(t, 1, e.echo(j.ID).Attempts)

	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		e.clock.Advance(wait)
		require.Zero(t, e.sweep())
		v := e.echo(j.ID)
		require.Equal(t, i+2, v.Attempts)
		next := min(2*wait, 8*time.Second)
		require.Equal(t, e.clock.Now().Add(next), *v.NextAttemptAt, "attempt %d", i+2)
	}
	e.hook.setDown(hookURL, false)
	e.clock.Advance(8 * time.Second)
	last := e.job(j.ID).EventSeq
	require.Equal(t, int(last), e.sweep())
	require.Equal(t, seqRange(1, last), e.hook.seqs(t, j.ID))
	v = e.echo(j.ID)
	require.Nil(t, v.LastError)
	require.Nil(t, v.NextAttemptAt)
	require.Zero(t, v.Attempts)

	e.mu.Lock()
	defer e.mu.Unlock()
	require.Contains(t, e.logs.String(), "tracker echo: delivery paused")
	require.Contains(t, e.logs.String(), "the webhook answered 500", "the log keeps the detail")
	require.NotContains(t, e.logs.String(), string(hookSecret), "the secret is never logged")
}

// TestEchoWaitsForAMissingEvent: a seq not in the events container yet
// stops delivery before it (never skipped); once it is there, the sweep
// sends it and the rest.
func TestEchoWaitsForAMissingEvent(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	j := e.ingest("PROJ-3")
	e.run(j)
	last := e.job(j.ID).EventSeq
	require.GreaterOrEqual(t, last, int64(4))
	// Event 2 is nowhere: taken out of the job's ring of recent events, and
	// not in the container (the job has not let any event go yet).
	id2 := fleet.EventID(j.ID, 2)
	var ev2 fleet.Event
	for _, ev := range e.job(j.ID).Recent() {
		if ev.Seq == 2 {
			ev2 = ev
		}
	}
	require.Equal(t, id2, ev2.ID)
	ev2Body, err := json.Marshal(ev2)
	require.NoError(t, err)
	raw := e.rawJob(j.ID)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw.Body, &doc))
	var ring []any
	for _, ev := range doc["recentEvents"].([]any) {
		if ev.(map[string]any)["seq"] != float64(2) {
			ring = append(ring, ev)
		}
	}
	doc["recentEvents"] = ring
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = e.raw.Replace(e.ctx, store.Jobs, prod, j.ID, body, raw.Rev)
	require.NoError(t, err)

	require.Equal(t, 1, e.feed(j.ID))
	require.Equal(t, []int64{1}, e.hook.seqs(t, j.ID))
	v := e.echo(j.ID)
	require.Equal(t, int64(1), v.DeliveredSeq)
	require.Equal(t, ptr(int64(2)), v.PendingSeq)
	require.Equal(t, "event_missing", *v.LastError)
	e.clock.Advance(time.Second)
	require.Zero(t, e.sweep(), "still missing: still waiting")

	_, err = e.raw.Create(e.ctx, store.Events, j.ID, id2, ev2Body)
	require.NoError(t, err)
	e.clock.Advance(2 * time.Second)
	require.Equal(t, int(last-1), e.sweep())
	require.Equal(t, seqRange(1, last), e.hook.seqs(t, j.ID))
}

// TestEchoDownWebhookBlocksOnlyItsJobs: in one batch, a product whose
// webhook is down backs off on its own; another product's job is
// delivered in full.
func TestEchoDownWebhookBlocksOnlyItsJobs(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p2", Repos: []string{"docs"},
		Tracker: &catalog.TrackerChange{WebhookURL: downURL, Secret: hookSecret}})
	require.NoError(t, err)
	e.hook.setDown(downURL, true)
	stuck, _, err := e.c.Ingest(e.ctx, echo.IngestRequest{ProductID: "p2", Ref: fleet.TrackerRef{Source: "jira", ItemID: "X-1", Revision: 1}, Manifest: manifest("repo: docs")})
	require.NoError(t, err)
	ok := e.ingest("PROJ-4")
	stuckItem, err := e.raw.Read(e.ctx, store.Jobs, "p2", stuck.ID)
	require.NoError(t, err)
	run, err := e.c.EchoChanged(e.ctx, []store.Item{stuckItem, e.rawJob(ok.ID)}, echo.Await)
	require.NoError(t, err)
	require.Equal(t, echo.Run{Jobs: 2, Delivered: 1}, run)
	require.Equal(t, []int64{1}, e.hook.seqs(t, ok.ID))
	v, err := e.c.Echo(e.ctx, "p2", stuck.ID)
	require.NoError(t, err)
	require.Equal(t, 1, v.Attempts)
}

// TestEchoResend: a re-send starts over from seq 1 and is itself an event,
// sent last.
func TestEchoResend(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	j := e.ingest("PROJ-5")
	e.run(j)
	last := e.job(j.ID).EventSeq
	e.feed(j.ID)
	v, err := e.c.ResendEcho(e.ctx, prod, j.ID, "alice")
	require.NoError(t, err)
	require.Equal(t, int64(0), v.DeliveredSeq)
	require.Equal(t, last+1, v.LatestSeq)
	require.Equal(t, int(last+1), e.feed(j.ID))
	require.Equal(t, append(seqRange(1, last), seqRange(1, last+1)...), e.hook.seqs(t, j.ID))
	evs := e.events(j.ID)
	require.Equal(t, fleet.EventEchoResend, evs[len(evs)-1].Type)

	_, err = e.c.ResendEcho(e.ctx, prod, e.submit().ID, "alice")
	requireCode(t, err, fleet.CodeConflict, "")
}

// TestEchoConcurrentDeliverers: feed invocations and sweeps racing on one
// job deliver every event, and the first delivery of each seq comes after
// the first of the one before.
func TestEchoConcurrentDeliverers(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	j := e.ingest("PROJ-6")
	e.run(j)
	last := e.job(j.ID).EventSeq
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			if i%2 == 0 {
				_, err := e.c.EchoChanged(e.ctx, []store.Item{e.rawJob(j.ID)}, echo.Await)
				require.NoError(t, err)
				return
			}
			_, err := e.c.EchoSweep(e.ctx)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	got := e.hook.seqs(t, j.ID)
	var firsts []int64
	seen := map[int64]bool{}
	for _, s := range got {
		if !seen[s] {
			seen[s] = true
			firsts = append(firsts, s)
		}
	}
	require.Equal(t, seqRange(1, last), firsts)
}

// jobCreateHook is a store that runs a hook before the next job document
// is created, and fails that create when fail is set.
type jobCreateHook struct {
	store.Store
	mu     sync.Mutex
	before func()
	fail   bool
}

func (s *jobCreateHook) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Jobs {
		s.mu.Lock()
		h, fail := s.before, s.fail
		s.before, s.fail = nil, false
		s.mu.Unlock()
		if h != nil {
			h()
		}
		if fail {
			return "", fmt.Errorf("create %s: %w", container, store.ErrUnavailable)
		}
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

// TestEchoSweepKeepsTheStateOfAJobBeingWritten: an ingest writes the job's
// delivery state before the job, so that the sweep finds a job whose change
// never reaches the echo function. A sweep that runs between the two writes
// must not take the state for an orphan's: the job's change is then lost
// (its hand-off died with the process) and the next sweep still delivers.
// A state whose job never came is removed once it is old.
func TestEchoSweepKeepsTheStateOfAJobBeingWritten(t *testing.T) {
	t.Parallel()
	hooks := &jobCreateHook{}
	e := newEchoEnvWith(t, coord.Config{}, withStore(func(s store.Store) store.Store {
		hooks.Store = s
		return hooks
	}))
	hooks.mu.Lock()
	hooks.before = func() { require.Zero(t, e.sweep(), "the job is not written yet") }
	hooks.mu.Unlock()
	j := e.ingest("PROJ-7")
	// No feed: the echo function never sees the job's change.
	require.Equal(t, 1, e.sweep(), "the sweep delivers the job's first event")
	require.Equal(t, []int64{1}, e.hook.seqs(t, j.ID))

	// An ingest whose job is never written leaves an orphan state.
	hooks.mu.Lock()
	hooks.fail = true
	hooks.mu.Unlock()
	_, _, err := e.c.Ingest(e.ctx, echo.IngestRequest{ProductID: prod, Ref: fleet.TrackerRef{Source: "jira", ItemID: "PROJ-8", Revision: 1}, Manifest: manifest()})
	require.ErrorIs(t, err, store.ErrUnavailable)
	openStates := func() int {
		page, err := e.raw.Query(e.ctx, store.Echoes, store.Query{Where: []store.Cond{store.Eq("open", true)}})
		require.NoError(t, err)
		return len(page.Items)
	}
	require.Equal(t, 2, openStates(), "PROJ-7's and the orphan's")
	require.Zero(t, e.sweep())
	require.Equal(t, 2, openStates(), "a young orphan may be a job being written: kept")
	e.clock.Advance(time.Hour)
	e.sweep()
	require.Equal(t, 1, openStates(), "an old orphan is removed")
}
