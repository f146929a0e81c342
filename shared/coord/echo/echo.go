// Package echo is the tracker bridge: tracker items ingested as jobs
// (ingest.go), and every event of a tracked job POSTed to its product's
// webhook, at least once and in seq order, through one delivery lane per
// product, re-driven by a sweep. coord's façade (Ingest, EchoChanged,
// EchoSweep, Echo, ResendEcho) calls it.
package echo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/retry"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Tracker echo.
//
// Every event of a tracked job is POSTed to its product's tracker webhook,
// at least once and in seq order, by the echo function: a change-feed
// trigger on the jobs container (its own lease prefix), so the API path
// never waits on a webhook. Each tracked job has one delivery document in
// Echoes (State): how far delivery got, the failure it met and when to
// try again. The function hands the batch's jobs to their products'
// delivery lanes (lanes.go) and returns; a job whose webhook fails
// backs off on its own, and the echosweep timer re-drives whatever is due
// (a change-feed trigger cannot be re-invoked on a schedule, and the host
// checkpoints past a failed batch). Events are sent strictly one after the
// other: a seq that neither the events container nor the job's ring of
// recent events holds is waited for, never skipped.

// Config tunes delivery: Backoff is the wait after a failed delivery,
// doubling with every failure in a row up to MaxBackoff; Timeout bounds
// one webhook request; Parallel bounds the deliveries one product's lane
// runs at once; BreakerFailures failed deliveries in a row stop a webhook
// from being tried for BreakerCooldown. coord.Config resolves and
// validates them (its Echo* fields).
type Config struct {
	Backoff, MaxBackoff, Timeout time.Duration
	Parallel, BreakerFailures    int
	BreakerCooldown              time.Duration
}

// Products is what the tracker bridge asks of the catalog: a product's
// tracker, and the queue state an ingest that changed a queued job moves.
type Products interface {
	GetProduct(ctx context.Context, productID string) (*fleet.Product, error)
	BumpQueueState(ctx context.Context, productID string)
}

// Lifecycle is what an ingest asks of the job lifecycle: the submit path
// (with its idempotency, so the same item is the same job) and the
// preparation of a job from a manifest, to replace what a job not started
// yet will run.
type Lifecycle interface {
	SubmitManifest(ctx context.Context, productID string, m *fleet.Manifest, mark func(j *fleet.Job) error) (*fleet.Job, bool, error)
	PrepareJob(ctx context.Context, productID, id string, m *fleet.Manifest, pending map[string]bool) (*fleet.Job, error)
}

// Events lists a job's events after seq after, with any the job holds
// that the events container lacks yet.
type Events interface {
	Events(ctx context.Context, productID, jobID string, after int64, limit int) ([]fleet.Event, error)
}

// Service delivers tracker echoes. It is safe for concurrent use.
type Service struct {
	k        *kernel.Kernel
	cfg      Config
	webhook  Webhook
	products Products
	events   Events
	life     Lifecycle
	lanes    *lanes
}

// New builds the echo service; webhook may be nil (deliveries then fail
// as no_client and are retried: only the echo function's process sends).
func New(k *kernel.Kernel, cfg Config, webhook Webhook, products Products, events Events, life Lifecycle) *Service {
	return &Service{k: k, cfg: cfg, webhook: webhook, products: products, events: events, life: life, lanes: newLanes()}
}

// Webhook sends one echo delivery. The adapter (shared/webhook) wraps an
// HTTP client; a non-2xx answer is an error.
type Webhook interface {
	Post(ctx context.Context, req WebhookRequest) error
}

// WebhookTargets is what a Webhook may also do: say at once that a URL
// names an address it would refuse to dial, so setting it is a 400 rather
// than a stream of refused deliveries. Only what needs no DNS can be judged
// then; the dial judges the rest.
type WebhookTargets interface {
	RefusedTarget(rawURL string) error
}

// CheckTarget refuses a webhook URL the webhook would never dial.
func (c *Service) CheckTarget(rawURL string) error {
	wt, ok := c.webhook.(WebhookTargets)
	if !ok {
		return nil
	}
	if err := wt.RefusedTarget(rawURL); err != nil {
		return fleet.Invalid("tracker.webhookUrl", "%v", err)
	}
	return nil
}

// WebhookRequest is one POST of an echo delivery.
type WebhookRequest struct {
	URL     string
	Headers map[string]string
	Body    []byte
}

// Failure is why a delivery stopped, as the delivery state shows it
// (lastError): a class, never the far end's words or the URL. A webhook
// may point anywhere, so echoing what answered there would let whoever
// sets the URL read other services back; the log keeps the detail.
type Failure string

// Echo failure classes. The webhook adapter names transport and HTTP
// failures; the rest are the coordinator's own.
const (
	ConnRefused    Failure = "connection_refused"
	ConnReset      Failure = "connection_reset"
	TimeoutFailure Failure = "timeout"
	DNS            Failure = "dns"
	RefusedAddress Failure = "refused_address"
	TLS            Failure = "tls"
	Unreachable    Failure = "unreachable"
	HTTP3xx        Failure = "http_3xx"
	HTTP4xx        Failure = "http_4xx"
	HTTP5xx        Failure = "http_5xx"
	HTTPOther      Failure = "http_status"
	BadResponse    Failure = "bad_response"
	Failed         Failure = "failed"
	CircuitOpen    Failure = "circuit_open"
	EventMissing   Failure = "event_missing"
	NoTracker      Failure = "no_tracker"
	StoreFailed    Failure = "store"
	NoClient       Failure = "no_client"
)

// WebhookError is a failed delivery and its class; Err is the detail, for
// the log.
type WebhookError struct {
	Class Failure
	Err   error
}

func (e *WebhookError) Error() string { return string(e.Class) + ": " + e.Err.Error() }
func (e *WebhookError) Unwrap() error { return e.Err }

// webhookFailure is the class of a Webhook error; one the adapter did
// not classify is just failed.
func webhookFailure(err error) Failure {
	if we, ok := errors.AsType[*WebhookError](err); ok && we.Class != "" {
		return we.Class
	}
	return Failed
}

// State is the delivery document of one tracked job (Echoes, /jobId).
type State struct {
	ID        string `json:"id"` // the job id
	JobID     string `json:"jobId"`
	ProductID string `json:"productId"`
	// DeliveredSeq is the last seq the webhook acknowledged; every seq up
	// to it was acknowledged, in order.
	DeliveredSeq int64 `json:"deliveredSeq"`
	// Stage is the job's stage after event DeliveredSeq: the stage sent
	// with an event that moves none.
	Stage fleet.Stage `json:"stage,omitempty"`
	// Attempts counts failures since the last delivery; the backoff grows
	// with it.
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"lastError,omitempty"`
	NextAttemptAt time.Time `json:"nextAttemptAt,omitzero"`
	// Open while events may remain to send: the job is not terminal, or
	// not every event of it was delivered. The sweep reads open documents
	// only (a plain cross-partition filter).
	Open bool `json:"open"`
	// SweepAt is when the sweep next looks at the job: a due retry, or a
	// periodic look at a job in progress in case a change-feed batch was
	// lost.
	SweepAt time.Time `json:"sweepAt,omitzero"`
	// LockOwner holds the job's delivery until LockedUntil, so a sweep and
	// a feed invocation never send the same job's events at once.
	LockOwner   string    `json:"lockOwner,omitempty"`
	LockedUntil time.Time `json:"lockedUntil,omitzero"`
	UpdatedAt   time.Time `json:"updatedAt"`
	Rev         string    `json:"-"`
}

// View is a job's delivery state as GET /fleet/jobs/{id}/echo shows it.
type View = view.EchoState

// echoDocs is the delivery documents' kind for cas.
var echoDocs = kernel.DocKind[State]{Name: "echo state", Container: store.Echoes, SetRev: func(s *State, r string) { s.Rev = r }}

// Echo delivery defaults.
const (
	DefaultBackoff    = 2 * time.Second
	DefaultMaxBackoff = 5 * time.Minute
	DefaultTimeout    = 10 * time.Second
	// echoGapWait bounds the wait for a missing seq: its event is written
	// (or repaired) in the events container, whose writes do not wake the
	// echo function, so the sweep looks again this soon at the latest.
	echoGapWait = 30 * time.Second
	// echoRecheck is how often the sweep looks at a tracked job in
	// progress that is up to date, in case a change-feed batch was lost.
	echoRecheck = time.Minute
	// echoOrphanAfter is how old a delivery state whose job does not exist
	// must be before the sweep removes it: far longer than an ingest takes
	// from the state's write to the job's.
	echoOrphanAfter = 10 * time.Minute
)

// echoBackoff is the wait after the attempts-th failure in a row:
// EchoBackoff doubling up to EchoMaxBackoff.
func (c *Service) echoBackoff(attempts int) time.Duration {
	return retry.Policy{Initial: c.cfg.Backoff, Max: c.cfg.MaxBackoff}.Delay(attempts)
}

// Changed hands the tracked jobs among changed job documents (a
// change-feed batch) to their products' delivery lanes; with Await it
// waits for their deliveries too. Jobs not tracked cost nothing: the
// batch's own document says so.
func (c *Service) Changed(ctx context.Context, items []store.Item, mode Mode) (Run, error) {
	var refs []JobRef
	for _, it := range items {
		// Only whether it is tracked: the whole job is read by its lane,
		// and most jobs are not tracked (their versions are most of what
		// the feed carries).
		if Untracked(it.Body) {
			continue
		}
		var j struct {
			ID        string          `json:"id"`
			ProductID string          `json:"productId"`
			Tracker   json.RawMessage `json:"tracker"`
		}
		// encoding/json's semantics on the v2 engine, which skips the
		// rest of the job in a third of the time.
		if err := jsonv1.Unmarshal(it.Body, &j); err != nil {
			return Run{}, fmt.Errorf("decode job %s: %w", it.ID, err)
		}
		if len(j.Tracker) > 0 && string(j.Tracker) != "null" {
			refs = append(refs, JobRef{ProductID: j.ProductID, JobID: j.ID})
		}
	}
	return c.echoJobs(ctx, refs, false, mode)
}

// Untracked reports that no job in raw can be tracked: raw, a job document
// or a change-feed batch of them however many times quoted, does not hold
// the name tracker anywhere. Such a job is not decoded, nor such a batch
// split: the store's documents are written by the kernel's encoder, which
// writes a name as it is, and quoting escapes the quotes around a name,
// never its letters (were one missed, the sweep finds the job by its open
// echo state). A mention elsewhere, in a task's text, only costs the
// decode.
func Untracked(raw []byte) bool { return !bytes.Contains(raw, trackerLetters) }

// trackerLetters is the tracker field's name, without the quotes a batch
// escapes.
var trackerLetters = []byte("tracker")

// JobRef names a job to deliver for.
type JobRef struct{ ProductID, JobID string }

// Sweep re-drives delivery for every open tracked job that is due: a
// retry whose backoff passed, a seq that was missing, a job whose change
// the feed lost. It waits for those deliveries (each in its product's
// lane) and returns how many events were delivered.
//
// Idle, a tick is one point read of the ledger: a scan that found nothing
// due marks the sweep quiet until the earliest open state is due, and every
// write of an open state moves the echoes counter (writeEcho, Open), which
// ends the mark.
func (c *Service) Sweep(ctx context.Context) (int, error) {
	skip, view := c.k.Quiet(ctx, kernel.SweepEcho)
	if skip {
		return 0, nil
	}
	items, err := c.k.QueryAll(ctx, store.Echoes, store.Query{Where: []store.Cond{store.Eq("open", true)}})
	if err != nil {
		return 0, err
	}
	now := c.k.Now()
	var due []JobRef
	var next time.Time
	skipped := 0
	for _, it := range items {
		s, err := kernel.Decode[State](it)
		if err != nil {
			// Skipped, not allowed to stop every delivery after it.
			c.k.Undecodable(ctx, store.Echoes, it, err)
			skipped++
			continue
		}
		if !s.SweepAt.After(now) {
			due = append(due, JobRef{ProductID: s.ProductID, JobID: s.JobID})
		} else if next.IsZero() || s.SweepAt.Before(next) {
			next = s.SweepAt
		}
	}
	if len(due) == 0 && skipped == 0 { // a skipped state's due time is unknown
		c.k.MarkQuietUntil(ctx, view, next)
	}
	run, err := c.echoJobs(ctx, due, true, Await)
	return run.Delivered, err
}

// echoJobs hands each job to its product's lane and, with Await,
// waits for the outcomes (or ctx: the deliveries go on in their lanes).
func (c *Service) echoJobs(ctx context.Context, refs []JobRef, sweep bool, mode Mode) (Run, error) {
	run := Run{Jobs: len(refs)}
	dones := make([]<-chan echoResult, len(refs))
	for i, r := range refs {
		dones[i] = c.submitEcho(ctx, r, sweep)
	}
	if mode != Await {
		return run, nil
	}
	var errs []error
	for i, d := range dones {
		select {
		case res := <-d:
			run.Delivered += res.delivered
			if res.err != nil {
				errs = append(errs, fmt.Errorf("job %s: %w", refs[i].JobID, res.err))
			}
		case <-ctx.Done():
			return run, ctx.Err()
		}
	}
	return run, errors.Join(errs...)
}

// errEchoLost: the delivery document changed under this delivery (a
// re-send, or another deliverer after our lock ran out): stop, the other
// one carries on.
var errEchoLost = errors.New("echo state changed under this delivery")

// echoJob delivers the job's undelivered events in order until one fails,
// one is missing, or none remains; then it records where it stands and
// returns. Webhook failures are recorded, not returned: the job backs off,
// and other jobs go on.
func (c *Service) echoJob(ctx context.Context, productID, jobID string, sweep bool) (int, error) {
	total := 0
	for {
		n, again, err := c.echoOnce(ctx, productID, jobID, sweep)
		total += n
		if err != nil || !again {
			if errors.Is(err, errEchoLost) {
				err = nil
			}
			return total, err
		}
	}
}

// echoOnce is one locked pass over a job. again says the job moved on
// while the pass held the lock (a feed invocation for it may have found
// the lock and left), so another pass is due.
func (c *Service) echoOnce(ctx context.Context, productID, jobID string, sweep bool) (delivered int, again bool, err error) {
	j, err := c.k.GetJob(ctx, productID, jobID)
	if errors.Is(err, fleet.ErrNotFound) {
		return 0, false, c.dropOrphan(ctx, jobID)
	}
	if err != nil || j.Tracker == nil {
		return 0, false, err
	}
	owner := c.k.NewID("l")
	st, err := c.lockEcho(ctx, j, owner, sweep)
	if err != nil || st == nil {
		return 0, false, err
	}
	// The pass's outcome is written whatever the caller does meanwhile.
	ctx = context.WithoutCancel(ctx)
	var (
		fail    Failure
		detail  error // for the log only: it may quote the far end
		waitGap bool
		stopped bool
		reopen  time.Time // when an open breaker lets the webhook be tried
	)
	product, err := c.products.GetProduct(ctx, productID)
	switch {
	case err != nil && !errors.Is(err, fleet.ErrNotFound):
		fail, detail = StoreFailed, fmt.Errorf("read product: %w", err)
	case product == nil || product.Tracker == nil:
		fail, detail = NoTracker, fmt.Errorf("product %s has no tracker webhook (PUT /api/fleet/products/%s with tracker)", productID, productID)
	}
	if fail == "" && st.DeliveredSeq < j.EventSeq {
		// Events merges what the job's change holds but the container
		// lacks yet (internal/kernel/events.go), so a seq is missing here only while
		// neither has it.
		evs, rerr := c.events.Events(ctx, productID, jobID, st.DeliveredSeq, 0)
		if rerr != nil {
			fail, detail = StoreFailed, fmt.Errorf("read events: %w", rerr)
		}
		bySeq := make(map[int64]fleet.Event, len(evs))
		for _, ev := range evs {
			bySeq[ev.Seq] = ev
		}
		for seq := st.DeliveredSeq + 1; fail == "" && seq <= j.EventSeq; seq++ {
			ev, ok := bySeq[seq]
			if !ok {
				fail, detail, waitGap = EventMissing, fmt.Errorf("waiting for event %d, not recorded yet", seq), true
				break
			}
			stage := st.Stage
			if ev.To != "" {
				stage = ev.To
			}
			key := breakerKey{productID: productID, url: product.Tracker.WebhookURL}
			allowed, until := c.echoAllow(key)
			if !allowed {
				fail, detail, reopen = CircuitOpen, fmt.Errorf("event %d: the webhook failed %d times in a row; not tried before %s", seq, c.cfg.BreakerFailures, until.Format(time.RFC3339)), until
				break
			}
			perr := c.postEcho(ctx, product.Tracker, j, ev, stage)
			c.echoRecord(key, perr == nil)
			if perr != nil {
				fail, detail = webhookFailure(perr), fmt.Errorf("event %d: %w", seq, perr)
				break
			}
			delivered++
			st.DeliveredSeq, st.Stage, st.Attempts, st.LastError, st.NextAttemptAt = seq, stage, 0, "", time.Time{}
			// Recorded after each acknowledgement: a crash re-sends at most
			// the one event in flight.
			if err := c.writeEcho(ctx, st); err != nil {
				stopped = true
				break
			}
		}
	}
	if stopped {
		return delivered, false, errEchoLost
	}
	now := c.k.Now()
	st.LockOwner, st.LockedUntil = "", time.Time{}
	if fail != "" {
		st.Attempts++
		// Only the class is kept where an operator reads it back: what
		// answered at the far end stays in the log.
		st.LastError = string(fail)
		wait := c.echoBackoff(st.Attempts)
		if waitGap {
			wait = min(wait, echoGapWait)
		}
		st.NextAttemptAt = now.Add(wait)
		if reopen.After(st.NextAttemptAt) {
			st.NextAttemptAt = reopen
		}
		st.SweepAt, st.Open = st.NextAttemptAt, true
		c.k.Log.WarnContext(ctx, "tracker echo: delivery paused", "job", jobID, "product", productID, "deliveredSeq", st.DeliveredSeq,
			"attempts", st.Attempts, "retryIn", st.NextAttemptAt.Sub(now), "class", st.LastError, "err", detail)
	} else {
		st.Open = !(j.Stage.Terminal() && st.DeliveredSeq >= j.EventSeq)
		st.SweepAt = now.Add(echoRecheck)
	}
	if err := c.writeEcho(ctx, st); err != nil {
		return delivered, false, errEchoLost
	}
	if fail != "" {
		return delivered, false, nil
	}
	// The lock is released: a change that found it held is in the job now.
	after, err := c.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return delivered, false, err
	}
	return delivered, after.EventSeq > st.DeliveredSeq, nil
}

// dropOrphan removes the delivery document of a job that does not exist:
// an ingest that created the state but never the job, so nothing will ever
// be sent. Open writes the state before the job, so a young one may be a
// job being written now (or not yet seen by this process): it stays, due,
// and a later sweep looks again. Deleting it would leave that job to the
// change feed alone, which Open exists to back up.
func (c *Service) dropOrphan(ctx context.Context, jobID string) error {
	st, it, err := kernel.ReadDoc[State](ctx, c.k.Store, store.Echoes, jobID, jobID, "echo state")
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return nil
	case err != nil:
		return err
	case c.k.Now().Sub(st.UpdatedAt) < echoOrphanAfter:
		return nil
	}
	if err := c.k.Store.Delete(ctx, store.Echoes, jobID, jobID, it.Rev); err != nil &&
		!errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrPrecondition) {
		return fmt.Errorf("remove the echo state of missing job %s: %w", jobID, err)
	}
	return nil
}

// lockEcho takes the job's delivery document for one pass, creating it on
// the first; nil when another deliverer holds it, when its backoff has not
// passed, or when nothing is left to send and nothing to record.
func (c *Service) lockEcho(ctx context.Context, j *fleet.Job, owner string, sweep bool) (*State, error) {
	now := c.k.Now()
	for range kernel.MaxCASAttempts {
		st, it, err := kernel.ReadDoc[State](ctx, c.k.Store, store.Echoes, j.ID, j.ID, "echo state")
		fresh := errors.Is(err, fleet.ErrNotFound)
		switch {
		case fresh:
			st = &State{ID: j.ID, JobID: j.ID, ProductID: j.ProductID}
		case err != nil:
			return nil, err
		default:
			st.Rev = it.Rev
		}
		switch {
		case st.LockOwner != "" && now.Before(st.LockedUntil):
			return nil, nil
		case now.Before(st.NextAttemptAt):
			// Backing off: the sweep comes back when it is due.
			return nil, nil
		case !fresh && !sweep && st.DeliveredSeq >= j.EventSeq && st.Open == !j.Stage.Terminal():
			// Up to date and nothing to record.
			return nil, nil
		}
		st.LockOwner, st.LockedUntil, st.UpdatedAt = owner, now.Add(c.cfg.Timeout*4), now
		body, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		var rev string
		if fresh {
			rev, err = c.k.Store.Create(ctx, store.Echoes, j.ID, j.ID, body)
		} else {
			rev, err = c.k.Store.Replace(ctx, store.Echoes, j.ID, j.ID, body, st.Rev)
		}
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lock echo of job %s: %w", j.ID, err)
		}
		st.Rev = rev
		return st, nil
	}
	return nil, nil
}

// writeEcho writes a pass's progress at the revision it holds.
func (c *Service) writeEcho(ctx context.Context, st *State) error {
	st.UpdatedAt = c.k.Now()
	body, err := json.Marshal(st)
	if err != nil {
		return err
	}
	rev, err := c.k.Store.Replace(ctx, store.Echoes, st.ID, st.ID, body, st.Rev)
	if err != nil {
		if !errors.Is(err, store.ErrPrecondition) && !errors.Is(err, store.ErrNotFound) {
			c.k.Log.ErrorContext(ctx, "tracker echo: state not recorded", "job", st.JobID, "err", err)
		}
		return errEchoLost
	}
	st.Rev = rev
	if st.Open {
		c.wakeSweep(ctx)
	}
	return nil
}

// wakeSweep ends the sweep's quiet mark: an open state was written, due
// perhaps sooner than the mark's end. A failed bump is logged; the mark
// ends within kernel.QuietRescanAfter anyway.
func (c *Service) wakeSweep(ctx context.Context) {
	if !c.k.ChangeFeed {
		return
	}
	if err := c.k.Bump(ctx, kernel.LedgerEchoes); err != nil {
		c.k.Log.WarnContext(ctx, "tracker echo: sweep not told of an open state", "err", err)
	}
}

// postEcho sends one event, signed.
func (c *Service) postEcho(ctx context.Context, t *fleet.TrackerConfig, j *fleet.Job, ev fleet.Event, stage fleet.Stage) error {
	if c.webhook == nil {
		return &WebhookError{Class: NoClient, Err: errors.New("no webhook client configured in this process")}
	}
	body, err := json.Marshal(fleet.EchoEvent{
		Source: j.Tracker.Source, ItemID: j.Tracker.ItemID, JobID: j.ID, ProductID: j.ProductID,
		Seq: ev.Seq, Type: ev.Type, Stage: stage, At: ev.At,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	return c.webhook.Post(ctx, WebhookRequest{URL: t.WebhookURL, Body: body, Headers: map[string]string{
		"Content-Type":            "application/json",
		fleet.EchoEventIDHeader:   fleet.EchoEventID(j.ID, ev.Seq),
		fleet.EchoSignatureHeader: fleet.SignEcho(t.Secret, body),
	}})
}

// Get is a tracked job's delivery state.
func (c *Service) Get(ctx context.Context, productID, jobID string) (*View, error) {
	j, err := c.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	if j.Tracker == nil {
		return nil, notTracked(j)
	}
	st, _, err := kernel.ReadDoc[State](ctx, c.k.Store, store.Echoes, jobID, jobID, "echo state")
	if errors.Is(err, fleet.ErrNotFound) {
		st, err = &State{}, nil
	}
	if err != nil {
		return nil, err
	}
	v := &View{JobID: j.ID, DeliveredSeq: st.DeliveredSeq, LatestSeq: j.EventSeq, Attempts: st.Attempts}
	if st.DeliveredSeq < j.EventSeq {
		next := st.DeliveredSeq + 1
		v.PendingSeq = &next
	}
	if st.LastError != "" {
		v.LastError = &st.LastError
	}
	if !st.NextAttemptAt.IsZero() {
		at := st.NextAttemptAt
		v.NextAttemptAt = &at
	}
	return v, nil
}

// Resend starts a job's delivery over from seq 1: every event is sent
// again, in order, with the backoff cleared. The request itself is an event
// of the job (echo_resend, sent last), and its write wakes the echo
// function, so the re-send starts at once; the API does not wait for it.
func (c *Service) Resend(ctx context.Context, productID, jobID, operator string) (*View, error) {
	j, err := c.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return nil, err
	}
	if j.Tracker == nil {
		return nil, notTracked(j)
	}
	now := c.k.Now()
	reset := func(st *State) {
		*st = State{ID: j.ID, JobID: j.ID, ProductID: j.ProductID, Open: true, SweepAt: now, UpdatedAt: now, Rev: st.Rev}
	}
	_, _, err = kernel.CAS(ctx, c.k, echoDocs, jobID, jobID, func(st *State) error { reset(st); return nil })
	if errors.Is(err, fleet.ErrNotFound) {
		st := &State{}
		reset(st)
		body, merr := json.Marshal(st)
		if merr != nil {
			return nil, merr
		}
		if _, err = c.k.Store.Create(ctx, store.Echoes, jobID, jobID, body); errors.Is(err, store.ErrExists) {
			_, _, err = kernel.CAS(ctx, c.k, echoDocs, jobID, jobID, func(st *State) error { reset(st); return nil })
		}
	}
	if err != nil {
		return nil, err
	}
	c.wakeSweep(ctx)
	j, err = c.k.MutateJob(ctx, productID, jobID, func(j *fleet.Job) error {
		j.UpdatedAt = c.k.Now()
		return c.k.RecordEvent(ctx, j, fleet.Event{Type: fleet.EventEchoResend, Actor: fleet.ActorOperator, ActorID: operator,
			Message: fmt.Sprintf("every event of %s:%s is sent to the tracker again, from seq 1", j.Tracker.Source, j.Tracker.ItemID)})
	})
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, productID, jobID)
}

// Open creates a tracked job's delivery document, open and due for
// the sweep, before the job itself is written: a job whose change the feed
// never delivered is still found by the sweep. A document whose job was
// never written is removed by the sweep.
func (c *Service) Open(ctx context.Context, j *fleet.Job) error {
	now := c.k.Now()
	body, err := json.Marshal(State{ID: j.ID, JobID: j.ID, ProductID: j.ProductID, Open: true, SweepAt: now, UpdatedAt: now})
	if err != nil {
		return err
	}
	if _, err := c.k.Store.Create(ctx, store.Echoes, j.ID, j.ID, body); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("create echo state of job %s: %w", j.ID, err)
	}
	c.wakeSweep(ctx)
	return nil
}

// notTracked: the job came from no tracker item.
func notTracked(j *fleet.Job) error {
	return &fleet.Error{Code: fleet.CodeConflict, Message: fmt.Sprintf("job %s was not ingested from a tracker item (POST /api/fleet/tracker/ingest), so nothing is echoed", j.ID)}
}
