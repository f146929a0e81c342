package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/schedule"
)

// Publisher delivers dispatch messages to the target factory's subscription.
type Publisher interface {
	Publish(ctx context.Context, msg protocol.DispatchMessage) error
}

// Skip says why dispatch published nothing for a job.
type Skip string

// Why a job was not dispatched. An unroutable job's Skip is the scheduler's
// own reason instead (see Decision).
const (
	SkipNotQueued   Skip = "not queued"
	SkipDispatched  Skip = "already dispatched"
	SkipBackingOff  Skip = "backing off"
	SkipGone        Skip = "job no longer exists"
	SkipNoTransport Skip = "no dispatch transport"
)

// Decision is what dispatch did with one job.
type Decision struct {
	JobID         string `json:"jobId"`
	Target        string `json:"target,omitempty"`
	DispatchEpoch int64  `json:"dispatchEpoch,omitempty"`
	// Skipped says why nothing was published: one of the Skip constants,
	// or the scheduler's reason when no factory can take the job.
	Skipped Skip `json:"skipped,omitempty"`
}

// DispatchChanged handles one change-feed batch of job documents: every job
// that is queued and has no dispatch for its current state is routed,
// stamped by CAS and published; of each version it decodes only the fields
// that decide this (kernel.DecodeJobHead). Redelivering the same batch is
// harmless: a job already stamped is skipped. Errors of single jobs are
// joined; the sweep retries whatever did not go out.
//
// Once the batch is handled it bumps the ledger (internal/kernel/ledger.go): activity when
// it held a job that is not terminal (or one it could not decode), ended
// when it held a terminal one. A failed bump fails the batch, so the host
// retries it.
func (c *Coordinator) DispatchChanged(ctx context.Context, items []store.Item) ([]Decision, error) {
	out := make([]Decision, 0, len(items)) // never grows: publishes below write in place
	var errs []error
	live, ended := false, false
	waiting := map[string]bool{} // products with a job in the queue untargeted
	var wg, begun sync.WaitGroup
	pubErrs := make([]error, len(items))
	for _, it := range items {
		j, err := kernel.DecodeJobHead(it)
		if err != nil {
			live = true
			errs = append(errs, err)
			continue
		}
		if j.Stage == fleet.StageQueued && j.TargetFactoryID == "" {
			waiting[j.ProductID] = true
		}
		if j.Stage.Terminal() {
			ended = true
		} else {
			live = true
		}
		kernel.Observe(&c.k.Counters.FeedLagSum, &c.k.Counters.FeedLagN, c.k.Now().Sub(j.UpdatedAt))
		c.k.Counters.Stages.Woken(j, c.k.Now())
		if skip := c.dueForDispatch(j, nil); skip != "" {
			out = append(out, Decision{JobID: j.ID, Skipped: skip})
			continue
		}
		// The feed's copy saves a read when this process has none; it never
		// replaces one (a retried batch carries old versions), and a stale
		// copy only costs a failed CAS and a re-read.
		c.k.Jobs.PutIfAbsent(j.ProductID, j.ID, it)
		d, r, err := c.stamp(ctx, j.ProductID, j.ID, nil)
		switch {
		case errors.Is(err, fleet.ErrNotFound):
			// Deleted after the feed saw it: nothing left to route.
			c.k.Jobs.Drop(j.ProductID, j.ID)
			d.Skipped = SkipGone
		case err != nil:
			errs = append(errs, fmt.Errorf("dispatch %s: %w", j.ID, err))
		}
		out = append(out, d)
		if r != nil {
			// Each job is routed in turn, so each sees the seats the jobs
			// before it were offered; their publishes overlap, so a job
			// late in a batch does not wait for every broker answer
			// before it. The batch ends once all are answered.
			slot, perr := &out[len(out)-1], &pubErrs[len(out)-1]
			begun.Add(1)
			wg.Go(func() {
				begun.Done()
				*slot, *perr = c.publish(ctx, r)
			})
		}
	}
	// Every write of the batch is done (a publish writes no job), so the
	// bumps go out while the broker answers: the batch takes the longer of
	// the two rather than their sum, and the feed's next batch waits that
	// much less (issue 25's dispatch p99). On one P (the local stack runs
	// the handler at GOMAXPROCS=1) a started goroutine runs only once this
	// one blocks, and the bumps' writes do not: wait for every publish to
	// begin, so they are on their way before the bumps are written rather
	// than after (TestDispatchPublishesBeforeItsBumps).
	begun.Wait()
	// A submitted job tells its product's pollers here, once per batch
	// (createJob leaves it to the feed when there is one).
	if c.k.ChangeFeed {
		for p := range waiting {
			c.catalog.BumpQueueState(ctx, p)
		}
	}
	// After handling, whatever its outcome: the sweeps must look.
	if live {
		errs = append(errs, c.k.Bump(ctx, kernel.LedgerActivity))
	}
	if ended {
		errs = append(errs, c.k.Bump(ctx, kernel.LedgerEnded))
	}
	wg.Wait()
	for i, err := range pubErrs {
		if err != nil {
			errs = append(errs, fmt.Errorf("dispatch %s: %w", out[i].JobID, err))
		}
	}
	return out, errors.Join(errs...)
}

// sameUnroutable compares the stored reason with a new one. "unroutable: no
// factory has capability X" is kept exactly. "no eligible factory: 2 have no
// free seat, 1 is down" changes with every heartbeat, so any two transient
// reasons count as the same: rewriting them would wake the change feed on
// each heartbeat for nothing, and Explain shows the live reason anyway.
func sameUnroutable(stored fleet.Dispatch, reason schedule.Reason) bool {
	if stored.UnroutableKind == fleet.UnroutableBusy && reason.Transient() {
		return true
	}
	return stored.Unroutable == reason.Text && stored.UnroutableKind == reason.Kind
}

// dueForDispatch is the one rule for which jobs dispatch routes: queued,
// not backing off, and without a target, or (redo set) with one redo says
// is lost. It returns "" when j is due, else why not. DispatchChanged gives
// it a head (kernel.DecodeJobHead): any field it reads must be among the head's.
func (c *Coordinator) dueForDispatch(j *fleet.Job, redo func(j *fleet.Job) bool) Skip {
	switch {
	case j.Stage != fleet.StageQueued:
		return SkipNotQueued
	case j.TargetFactoryID != "" && (redo == nil || !redo(j)):
		return SkipDispatched
	case j.NotBefore.After(c.k.Now()):
		return SkipBackingOff
	}
	return ""
}

// dispatch routes one job that has no target. With redo set, a job that has
// one is routed again when redo still holds on the fresh document: that
// replaces a dispatch that went nowhere (a lost message, a target that left)
// with a new epoch, voiding the old message.
func (c *Coordinator) dispatch(ctx context.Context, pk, id string, redo func(j *fleet.Job) bool) (Decision, error) {
	d, r, err := c.stamp(ctx, pk, id, redo)
	if err != nil || r == nil {
		return d, err
	}
	return c.publish(ctx, r)
}

// stamped is a dispatch routed and stamped on its job, its message not yet
// published.
type stamped struct {
	msg               protocol.DispatchMessage
	schedule, stamp   time.Duration // the stages' times, counted once published
	casDone, queuedAt time.Time
}

// stamp is a dispatch's first half: route the job and stamp the target by
// CAS. It returns what to publish when a target was stamped, else the
// decision saying why not.
func (c *Coordinator) stamp(ctx context.Context, pk, id string, redo func(j *fleet.Job) bool) (Decision, *stamped, error) {
	d := Decision{JobID: id}
	if c.publisher == nil {
		d.Skipped = SkipNoTransport
		return d, nil, nil
	}
	began := c.k.Now()
	factories, err := c.catalog.Factories(ctx)
	if err != nil {
		return d, nil, err
	}
	snap, err := c.admission.Snapshot(ctx, pk)
	if err != nil {
		return d, nil, err
	}
	var unroutable schedule.Reason
	var held *fleet.Hold
	done := false
	// The scorer runs inside the CAS (again on a retry): its time counts
	// as scheduling, the rest of the CAS as the stamp.
	var scoring time.Duration
	casBegan := c.k.Now()
	j, err := c.k.MutateJob(ctx, pk, id, func(j *fleet.Job) error {
		unroutable, held, done = schedule.Reason{}, nil, false
		if c.dueForDispatch(j, redo) != "" {
			return kernel.ErrNoChange
		}
		if held = snap.Hold(j); held != nil {
			// Admission: a held job is not sent anywhere; the budget
			// making room or a seat freeing routes it (ReleaseHeld).
			if !admission.RecordHold(j, *held, c.k.Now()) {
				return kernel.ErrNoChange
			}
			return nil
		}
		scored := c.k.Now()
		best, reason := schedule.BestFactory(j, factories, scored, c.cfg.Weights)
		scoring += c.k.Now().Sub(scored)
		if best == nil {
			unroutable = reason
			if sameUnroutable(j.Dispatch, reason) && j.TargetFactoryID == "" {
				// Writing the same reason again would only wake the change
				// feed for nothing.
				return kernel.ErrNoChange
			}
			j.TargetFactoryID = ""
			j.Dispatch.Unroutable, j.Dispatch.UnroutableKind, j.Dispatch.At = reason.Text, reason.Kind, c.k.Now()
			return nil
		}
		j.DispatchEpoch++
		j.TargetFactoryID = best.ID
		j.Dispatch.Unroutable, j.Dispatch.UnroutableKind, j.Dispatch.At = "", "", c.k.Now()
		done = true
		return nil
	})
	casDone := c.k.Now()
	if err != nil {
		return d, nil, err
	}
	switch {
	case held != nil:
		d.Skipped = Skip(held.Message)
		return d, nil, nil
	case unroutable.Kind != "":
		d.Skipped = Skip(unroutable.Text)
		if unroutable.Kind == fleet.UnroutableBusy {
			c.preempt(ctx, j, factories)
		}
		return d, nil, nil
	case !done:
		d.Skipped = SkipDispatched
		return d, nil, nil
	}
	return d, &stamped{
		msg: protocol.DispatchMessage{
			JobID: j.ID, ProductID: j.ProductID, Repo: j.Repo, Capabilities: j.Capabilities,
			Priority: j.Priority, TargetFactoryID: j.TargetFactoryID, DispatchEpoch: j.DispatchEpoch,
		},
		schedule: casBegan.Sub(began) + scoring, stamp: casDone.Sub(casBegan) - scoring, casDone: casDone, queuedAt: j.QueuedAt,
	}, nil
}

// publish is a dispatch's second half: the stamped message goes to the
// target's subscription. A failed publish leaves the stamp; the redispatch
// sweep sends it again.
func (c *Coordinator) publish(ctx context.Context, r *stamped) (Decision, error) {
	d := Decision{JobID: r.msg.JobID}
	if err := c.publisher.Publish(ctx, r.msg); err != nil {
		c.k.Counters.PublishFailed.Add(1)
		return d, fmt.Errorf("publish %s: %w", r.msg.MessageID(), err)
	}
	stages := &c.k.Counters.Stages
	stages.Schedule.Observe(r.schedule)
	stages.Stamp.Observe(r.stamp)
	stages.Publish.Observe(c.k.Now().Sub(r.casDone))
	c.k.Counters.Dispatched.Add(1)
	kernel.Observe(&c.k.Counters.DispatchLagSum, &c.k.Counters.DispatchLagN, c.k.Now().Sub(r.queuedAt))
	d.Target, d.DispatchEpoch = r.msg.TargetFactoryID, r.msg.DispatchEpoch
	return d, nil
}

// DeadLetterSource hands over the dispatch messages the broker gave up on
// (max deliveries, refused as unreadable; expired ones simply expire), one
// subscription at a time. The transport implements it when its broker keeps
// dead letters.
type DeadLetterSource interface {
	DrainDeadLetters(ctx context.Context, subscriptions []string, handle func(ctx context.Context, msg protocol.DispatchMessage) error) (int, error)
}

// Redispatch is the sweep that makes dispatch reliable although the
// Functions host checkpoints past a failed change-feed batch: it routes
// every queued job with no dispatch (never routed, unroutable until now,
// backoff over), and routes again every job whose dispatch is older than
// RedispatchAfter or whose target is gone, stale or down. It returns how
// many messages it published. A tick reads the next page of the queue
// (kernel.NextPage), so its cost does not grow with the backlog.
//
// Idle (no queued or blocked job since the last tick that looked), a tick
// costs one point read and skips the dead-letter drain too: a dead letter
// only matters for a job still queued at its dispatch epoch (internal/kernel/ledger.go).
func (c *Coordinator) Redispatch(ctx context.Context) (int, error) {
	skip, view := c.k.Quiet(ctx, kernel.SweepRedispatch)
	if skip {
		return 0, nil
	}
	var errs []error
	// Blocked jobs whose dependencies shipped while their unblock was lost
	// join the queue first, so this pass routes them too.
	_, blocked, err := c.dag.UnblockReady(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("unblock: %w", err))
	}
	queued, none, err := c.k.NextPage(ctx, &c.sweeps.Redispatch, c.sweeps.PageSize(), []store.Cond{store.Eq("stage", string(fleet.StageQueued))})
	if err != nil {
		return 0, err
	}
	if len(errs) == 0 && blocked == 0 && none { // none anywhere
		c.k.MarkQuiet(ctx, view)
	}
	c.catalog.InvalidateFactories()
	factories, err := c.catalog.Factories(ctx)
	if err != nil {
		return 0, err
	}
	health := make(map[string]fleet.Health, len(factories))
	draining := map[string]bool{}
	subs := make([]string, 0, len(factories))
	for _, f := range factories {
		health[f.ID] = f.Health
		if f.Draining {
			draining[f.ID] = true
		}
		subs = append(subs, f.ID)
	}
	if ds, ok := c.publisher.(DeadLetterSource); ok {
		// Dead-lettered messages re-route their job first, so the pass below
		// sees it already dispatched anew.
		if _, err := ds.DrainDeadLetters(ctx, subs, c.DeadLettered); err != nil {
			errs = append(errs, fmt.Errorf("drain dead letters: %w", err))
		}
	}
	lost := func(j *fleet.Job) bool {
		h, ok := health[j.TargetFactoryID]
		return !ok || h == fleet.HealthStale || h == fleet.HealthDown || draining[j.TargetFactoryID] ||
			c.k.Now().Sub(j.Dispatch.At) >= c.cfg.RedispatchAfter
	}
	c.admission.ReclaimHeld(ctx, queued)
	n := 0
	for _, j := range queued {
		if c.dueForDispatch(j, lost) != "" {
			continue
		}
		d, err := c.dispatch(ctx, j.ProductID, j.ID, lost)
		if err != nil {
			errs = append(errs, err)
		}
		if d.Target != "" {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// retryUnroutable routes queued jobs that have no target after the fleet
// changed, so a job waiting for a capability goes out as soon as a factory
// offers it rather than at the next sweep.
func (c *Coordinator) retryUnroutable(ctx context.Context) {
	// No queued job since the redispatch sweep last looked: nothing waits.
	if c.k.Skips(ctx, kernel.SweepRedispatch) {
		return
	}
	waiting, _, err := c.k.ScanJobs(ctx, store.Query{Where: []store.Cond{store.Eq("stage", string(fleet.StageQueued)), store.Eq("targetFactoryId", "")}})
	if err != nil {
		c.k.Log.ErrorContext(ctx, "retry unroutable jobs", "err", err)
		return
	}
	for _, j := range waiting {
		if _, err := c.dispatch(ctx, j.ProductID, j.ID, nil); err != nil {
			c.k.Log.ErrorContext(ctx, "retry unroutable job", "job", j.ID, "err", err)
		}
	}
}

// DeadLettered records that the broker gave up on a dispatch message, and
// routes the job again if the message was its current dispatch (epoch and
// target: a factory may publish to its own dead-letter queue locally).
func (c *Coordinator) DeadLettered(ctx context.Context, msg protocol.DispatchMessage) error {
	c.k.Counters.DeadLettered.Add(1)
	_, err := c.k.MutateJob(ctx, msg.ProductID, msg.JobID, func(j *fleet.Job) error {
		if j.Stage != fleet.StageQueued || j.DispatchEpoch != msg.DispatchEpoch || j.TargetFactoryID != msg.TargetFactoryID {
			return kernel.ErrNoChange
		}
		j.Dispatch.DeadLettered++
		j.TargetFactoryID = ""
		j.UpdatedAt = c.k.Now()
		return nil
	})
	if errors.Is(err, fleet.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = c.dispatch(ctx, msg.ProductID, msg.JobID, nil)
	return err
}
