// Package agent is the factory's main loop: it heartbeats, receives work
// from a transport, accepts and runs each job in its own worktree under the
// seat limit, keeps leases and checkpoints, reports results, and cleans up
// git state that no job needs any more.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/retry"
)

// API is what the agent needs of the coordinator (*api.Client).
type API interface {
	LeaseAPI
	Heartbeat(ctx context.Context, hb api.HeartbeatRequest) (*fleet.Factory, error)
	Accept(ctx context.Context, r api.AcceptRequest) (*api.Claimed, error)
	GetJob(ctx context.Context, productID, id string) (*fleet.Job, error)
	Patch(ctx context.Context, productID, id string, p api.PatchRequest) error
	Release(ctx context.Context, productID, id string, r api.ReleaseRequest) (*fleet.Job, error)
	Fail(ctx context.Context, r api.FailRequest) (*fleet.Job, error)
	PostChildren(ctx context.Context, productID, id string, r api.ChildrenRequest) ([]*fleet.Job, error)
	UploadArtifact(ctx context.Context, productID, jobID string, a api.ArtifactUpload) (*fleet.Artifact, error)
	ReportUsage(ctx context.Context, productID, id string, r api.UsageRequest) (*fleet.Job, error)
}

// Outcome is how the factory's work ended; with --once it is the exit
// status.
type Outcome int

// Outcomes, with their exit codes.
const (
	OutcomeDone        Outcome = 0 // job delivered, or nothing to do
	OutcomeError       Outcome = 1 // the factory could not work (config, coordinator, transport)
	OutcomeFailed      Outcome = 3 // the job failed and was reported
	OutcomeFenced      Outcome = 4 // the lease was lost; work quarantined, nothing shipped
	OutcomeInterrupted Outcome = 5 // stopped by a signal; WIP checkpointed, job released
	OutcomeStopped     Outcome = 6 // cancelled or preempted by the coordinator; WIP checkpointed, acknowledged
)

func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeError:
		return "error"
	case OutcomeFailed:
		return "failed"
	case OutcomeFenced:
		return "fenced"
	case OutcomeInterrupted:
		return "interrupted"
	case OutcomeStopped:
		return "stopped"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// receiveWait is how long one bus receive waits for a message: long
// enough to be a cheap long-poll, short enough to notice freed seats.
const receiveWait = 20 * time.Second

// Agent runs one factory.
type Agent struct {
	cfg  config.Config
	api  API
	recv transport.Receiver
	git  *gitwt.Manager
	env  caps.Env
	log  *slog.Logger

	mu      sync.Mutex
	running map[string]*jobRun // by job id
	freed   chan struct{}      // a seat was freed
	changed chan struct{}      // load changed: heartbeat soon
	jobs    sync.WaitGroup
	gcMu    sync.Mutex

	// runAs is the account engines run as (FLEET_ENGINE_USER), nil for
	// the factory's own or a uid per seat.
	runAs *engine.User
	// seats are the seat uids (FLEET_ENGINE_UIDS), nil without.
	seats *uidPool
	// contain ends every process of a run when it ends; nil only in
	// tests that never call Run.
	contain *engine.Containment

	// clock is the agent's one time source: its heartbeats, sweeps,
	// receive backoffs, leases, checkpoints, wall budgets, watchdog,
	// cooldowns and the time of its local steps and uploads all run on
	// it, so tests drive them. The timeouts that only bound one request
	// or one process (the final heartbeat's, the ship hook's) stay on the
	// wall clock: they guard against the world outside hanging.
	clock clock.Timers
	// cool are the engines this factory's accounts are rate-limited for.
	cool *cooldowns

	hbMu     sync.Mutex
	lastLoad int
	detected *caps.Result // static capabilities, detected once
	fatal    chan error
}

// Deps are what an agent works with.
type Deps struct {
	Config   config.Config
	API      API
	Receiver transport.Receiver
	Git      *gitwt.Manager
	Env      caps.Env
	Log      *slog.Logger
	// Clock is the agent's one time source (Agent.clock); nil is the
	// system clock.
	Clock clock.Timers
}

// New returns an agent.
func New(d Deps) *Agent {
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	a := &Agent{
		cfg: d.Config, api: d.API, recv: d.Receiver, git: d.Git, env: d.Env, log: d.Log,
		running: map[string]*jobRun{}, freed: make(chan struct{}, 1), changed: make(chan struct{}, 1),
		lastLoad: -1, fatal: make(chan error, 1), clock: d.Clock,
	}
	a.cool = newCooldowns(agentClock{a})
	return a
}

// agentClock is the agent's clock as it is when read, for what keeps a
// clock of its own (the cooldowns): injecting the agent's moves it too.
type agentClock struct{ a *Agent }

func (c agentClock) Now() time.Time { return c.a.clock.Now() }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// load is the number of jobs running.
func (a *Agent) load() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running)
}

func (a *Agent) inFlight(repo, job string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.running[job]
	return ok && (repo == "" || r.repo == repo)
}

// runningDispatch is the dispatch epoch of job's run here, -1 when none
// runs.
func (a *Agent) runningDispatch(job string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.running[job]; ok {
		return r.dispatchEpoch
	}
	return -1
}

// Run works until ctx ends (a shutdown signal) or, with --once, until its
// one message is handled. On shutdown every running job is checkpointed
// and released before Run returns.
func (a *Agent) Run(ctx context.Context) Outcome {
	if err := a.isolate(ctx); err != nil {
		a.log.ErrorContext(ctx, "runs cannot be isolated as configured", "err", err)
		return OutcomeError
	}
	defer func() {
		if err := a.contain.Close(); err != nil {
			a.log.WarnContext(ctx, "remove the cgroup subtree", "err", err)
		}
	}()
	if err := os.MkdirAll(a.jobsDir(), a.dirMode()); err != nil {
		a.log.ErrorContext(ctx, "create jobs dir", "err", err)
		return OutcomeError
	}
	if cloned, err := a.git.EnsureClones(ctx); err != nil {
		a.log.ErrorContext(ctx, "clone configured repos", "err", err)
	} else if len(cloned) > 0 {
		a.log.InfoContext(ctx, "cloned configured repos", "repos", cloned)
	}
	a.gcLocal(ctx, "start")

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	if a.cfg.HeartbeatEnabled {
		if err := a.heartbeat(ctx, fleet.HealthOK); err != nil {
			if refused(err) {
				a.log.ErrorContext(ctx, "the coordinator refused the heartbeat: it no longer accepts this factory (its token revoked, or the factory deregistered)", "err", err)
				stopBG()
				return OutcomeError
			}
			a.log.WarnContext(ctx, "first heartbeat failed; retrying on the cadence", "err", err)
		}
		loops.Go(func() { a.heartbeatLoop(bg) })
	}
	if a.cfg.GCInterval > 0 && !a.cfg.Once {
		loops.Go(func() { a.sweepLoop(bg) })
	}

	var out Outcome
	if a.cfg.Once {
		out = a.runOnce(ctx)
	} else {
		out = a.loop(ctx)
	}

	// Stop every job: a shutdown has each one checkpoint and release.
	a.mu.Lock()
	for _, r := range a.running {
		r.cancel(errShutdown)
	}
	a.mu.Unlock()
	a.jobs.Wait()
	if a.cfg.HeartbeatEnabled && !a.cfg.Once {
		// Tell the scheduler at once rather than after 90 s of silence.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := a.heartbeat(hctx, fleet.HealthDown); err != nil {
			a.log.WarnContext(hctx, "final heartbeat", "err", err)
		}
		cancel()
	}
	stopBG()
	loops.Wait()
	return out
}

// loop is the long-running mode. With every seat taken a bus factory keeps
// receiving, one message at a time, so a cancel or preempt command for a
// running job reaches it at once; a dispatch that arrives meanwhile waits
// (parked, at most one per seat) for the next free seat, where the fenced
// accept decides whether it is still current. A poll factory's receive is
// a claim, so it stops at full seats and hears of commands at renewal.
//
// A fatal condition (the heartbeat refused: the token revoked, the factory
// deregistered) ends the loop at once, whatever it waits on: a receive,
// the backoff after a failed one, or a seat while every seat is taken.
func (a *Agent) loop(ctx context.Context) Outcome {
	ctx, stop := a.untilFatal(ctx)
	defer stop()
	wait := receiveWait
	if a.cfg.Transport == config.TransportPoll {
		wait = a.cfg.Poll
	}
	backoff := time.Second
	var parked []transport.Delivery
	end := func() Outcome {
		a.abandonAll(ctx, parked)
		if a.stoppedByFatal(ctx) {
			return OutcomeError
		}
		return OutcomeDone
	}
	for {
		if ctx.Err() != nil {
			return end()
		}
		free := a.cfg.Seats - a.load()
		if free > 0 && len(parked) > 0 {
			d := parked[0]
			parked = parked[1:]
			a.handle(ctx, d)
			continue
		}
		rctx, max := ctx, free
		stopWaiting := func() {}
		if free <= 0 {
			if a.cfg.Transport == config.TransportPoll || len(parked) >= a.cfg.Seats {
				select {
				case <-ctx.Done():
					return end()
				case <-a.freed:
				}
				continue
			}
			// Listen for commands until a seat frees.
			var cancel context.CancelFunc
			rctx, cancel = context.WithCancel(ctx)
			go func() {
				select {
				case <-a.freed:
					cancel()
				case <-rctx.Done():
				}
			}()
			stopWaiting = cancel
			max = 1
		}
		a.syncLoad(ctx)
		ds, err := a.recv.Receive(rctx, max, wait)
		interrupted := rctx.Err() != nil && ctx.Err() == nil
		stopWaiting()
		if err != nil {
			if ctx.Err() != nil {
				return end()
			}
			if interrupted {
				continue // a seat freed
			}
			a.log.WarnContext(ctx, "receive failed", "err", err, "retryIn", backoff.String())
			if !a.sleep(ctx, backoff) {
				return end()
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		backoff = time.Second
		for _, d := range ds {
			if d.Dispatch != nil && a.cfg.Seats-a.load() <= 0 {
				parked = append(parked, d)
				continue
			}
			a.handle(ctx, d)
		}
	}
}

// fatalError is a condition no further work can get past (a heartbeat
// refused, see refused): the loop's cause when one stops it.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

// untilFatal is ctx ended, with a fatalError as its cause, by a fatal
// condition (see refused), and its stop. The loop and --once both
// work under it, so every wait of theirs ends on one.
func (a *Agent) untilFatal(ctx context.Context) (context.Context, func()) {
	ctx, stop := context.WithCancelCause(ctx)
	go func() {
		select {
		case err := <-a.fatal:
			stop(&fatalError{err})
		case <-ctx.Done():
		}
	}()
	return ctx, func() { stop(nil) }
}

// stoppedByFatal reports, and logs, whether a fatal condition ended ctx
// (one of untilFatal's).
func (a *Agent) stoppedByFatal(ctx context.Context) bool {
	var fatal *fatalError
	if !errors.As(context.Cause(ctx), &fatal) {
		return false
	}
	a.log.ErrorContext(ctx, "stopping: the coordinator no longer accepts this factory (its token revoked, or the factory deregistered)",
		"err", fatal.err)
	return true
}

// abandonAll gives parked dispatches back to the broker on the way out.
func (a *Agent) abandonAll(ctx context.Context, ds []transport.Delivery) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, d := range ds {
		if err := a.recv.Abandon(actx, d); err != nil {
			a.log.WarnContext(actx, "abandon a parked dispatch", "delivery", d.ID, "err", err)
		}
	}
}

// runOnce takes at most one message, handles it and waits for its job.
// It is how an elastic pool's execution runs, so a dispatch it accepts is
// held locked for the whole run and completed only when the run ends
// (see holdsLock). A fatal condition stops it as it stops the loop: at
// once, the job checkpointed and released as on a shutdown, with
// OutcomeError.
func (a *Agent) runOnce(ctx context.Context) Outcome {
	ctx, stop := a.untilFatal(ctx)
	defer stop()
	ds, err := a.recv.Receive(ctx, 1, a.cfg.OnceWait)
	if err != nil {
		if a.stoppedByFatal(ctx) {
			return OutcomeError
		}
		if ctx.Err() != nil {
			return OutcomeDone
		}
		a.log.ErrorContext(ctx, "receive failed", "err", err)
		return OutcomeError
	}
	if len(ds) == 0 {
		a.log.InfoContext(ctx, "no message within the receive timeout; nothing to do", "wait", a.cfg.OnceWait.String())
		return OutcomeDone
	}
	for _, d := range ds[1:] {
		// A receiver honours max; this is a guard, not a path.
		_ = a.recv.Abandon(ctx, d)
	}
	d := ds[0]
	var h *hold
	if lr, ok := a.holdsLock(d); ok {
		// Kept from now: the accept may take a while (retries).
		h = &hold{keeper: transport.KeepLock(ctx, lr, d, a.clock, a.log.With("job", d.Dispatch.JobID))}
	}
	r := a.handleHeld(ctx, d, h)
	if r == nil {
		if a.stoppedByFatal(ctx) {
			return OutcomeError
		}
		return OutcomeDone
	}
	stopped := false
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel(errShutdown)
		<-r.done
		stopped = true
	}
	if h != nil {
		// The run ended (shipped, failed, released, fenced): only now does
		// the message leave the subscription, and the scaler's count.
		h.release()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := a.recv.Complete(cctx, d); err != nil {
			a.log.WarnContext(cctx, "complete the dispatch message after the run", "delivery", d.ID, "err", err)
		}
		cancel()
	}
	if stopped && a.stoppedByFatal(ctx) {
		return OutcomeError
	}
	return r.outcome
}

// holdsLock says whether an elastic execution keeps d locked for its run,
// and with what. Only a dispatch on a bus whose locks are per message: a
// Service Bus session lock covers the repo's whole session, and holding it
// for a run would keep that repo's next dispatch from every other
// execution (each one the scaler starts for it would wait and find
// nothing), so with sessions the execution completes on claim.
func (a *Agent) holdsLock(d transport.Delivery) (transport.LockRenewer, bool) {
	lr, ok := a.recv.(transport.LockRenewer)
	if !ok || d.Dispatch == nil || !a.cfg.Once ||
		(a.cfg.Transport == config.TransportServiceBus && a.cfg.ServiceBusSessions) {
		return nil, false
	}
	return lr, true
}

// hold is an elastic execution's lock on its dispatch message: renewed
// from receipt until the run ends, so the subscription's active count
// (queued + locked) is queued + running, and KEDA's default ScaledJob
// strategy, which subtracts running executions, starts exactly the
// queued ones. A static factory completes on claim instead.
type hold struct {
	keeper *transport.Keeper
}

// release stops renewing; call it before settling the message. Safe on
// a nil hold and more than once.
func (h *hold) release() {
	if h != nil {
		h.keeper.Stop()
	}
}

// handle acts on one delivery and returns the job it started, if any.
func (a *Agent) handle(ctx context.Context, d transport.Delivery) *jobRun {
	return a.handleHeld(ctx, d, nil)
}

// handleHeld is handle with the delivery's lock held by h (nil: complete
// on claim). With a hold, a dispatch whose job starts is left unsettled:
// the caller completes it when the run ends. Any other outcome settles it
// here, after releasing the hold.
func (a *Agent) handleHeld(ctx context.Context, d transport.Delivery, h *hold) *jobRun {
	log := a.log.With("delivery", d.ID)
	switch {
	case d.GC != nil:
		// Complete first: GC is idempotent and the sweep repeats, so a
		// cleanup that fails half-way is simply done again next time.
		if err := a.recv.Complete(ctx, d); err != nil {
			log.WarnContext(ctx, "complete gc message", "err", err)
		}
		a.gcRequest(ctx, *d.GC)
		return nil
	case d.Control != nil:
		// Complete first: the command is also in every renewal answer, so
		// a lost one only costs the wait for the next renewal. control
		// acts only on the coordinator's confirmation.
		if err := a.recv.Complete(ctx, d); err != nil {
			log.WarnContext(ctx, "complete control message", "err", err)
		}
		a.control(ctx, log, *d.Control)
		return nil
	case d.Claimed != nil:
		return a.start(ctx, d.Claimed, a.clock.Now())
	case d.Dispatch != nil:
		return a.accept(ctx, log, d, h)
	}
	h.release()
	return nil
}

// control stops the run a cancel or preempt command names, if it runs here
// under the lease the command names (a command for an older lease, or for
// a job not running here, is stale) and the coordinator confirms it. The
// message is only a prompt to ask now rather than at the next renewal:
// anyone able to publish on the subscription could have sent it, so the
// run stops only when an immediate lease renewal, answered by the API to
// this factory's token, says cancelRequested or preemptRequested. A
// forged command costs one renewal and stops nothing.
func (a *Agent) control(ctx context.Context, log *slog.Logger, msg protocol.ControlMessage) {
	a.mu.Lock()
	r, ok := a.running[msg.JobID]
	a.mu.Unlock()
	log = log.With("job", msg.JobID, "leaseEpoch", msg.LeaseEpoch, "action", msg.Action)
	if !ok || r.epoch != msg.LeaseEpoch {
		log.InfoContext(ctx, "control message for a run not here; ignored")
		return
	}
	// The run's own lease: its product and epoch, not the message's.
	ren, err := r.lease.renew(ctx)
	switch {
	case errors.Is(err, errFenced):
		// The coordinator's word too: the lease is no longer ours.
		log.WarnContext(ctx, "control message: the renewal that confirms it was fenced; stopping the run", "err", err)
		r.cancel(errFenced)
		return
	case err != nil:
		// Unconfirmed: the lease keeper's next renewal carries the
		// command if there is one.
		log.WarnContext(ctx, "control message not confirmed (renewal failed); left to the next renewal", "err", err)
		return
	}
	cause := stopCause(ren)
	if cause == nil {
		log.WarnContext(ctx, "control message the coordinator does not confirm (no cancel or preemption requested); ignored")
		return
	}
	log.InfoContext(ctx, "stopping the run at the coordinator's request", "cause", cause.Error())
	r.cancel(cause)
}

// accept claims a dispatched job and settles its message. Without a hold
// that is complete-on-claim: from here on the lease and the reaper own
// liveness. With one (an elastic execution), an accepted message stays
// locked while the job runs; every other outcome settles it at once.
func (a *Agent) accept(ctx context.Context, log *slog.Logger, d transport.Delivery, h *hold) *jobRun {
	msg := *d.Dispatch
	log = log.With("job", msg.JobID, "dispatchEpoch", msg.DispatchEpoch)
	complete := func(what string) {
		h.release()
		if err := a.recv.Complete(ctx, d); err != nil {
			log.WarnContext(ctx, "complete "+what, "err", err)
		}
	}
	if a.runningDispatch(msg.JobID) >= msg.DispatchEpoch {
		// A redelivery of the dispatch being run. A newer dispatch (the
		// job was requeued) goes to accept: start supersedes the old run.
		log.InfoContext(ctx, "duplicate delivery of a job already running here")
		complete("duplicate message")
		return nil
	}
	received := a.clock.Now()
	cl, err := a.api.Accept(ctx, api.AcceptRequest{JobID: msg.JobID, DispatchEpoch: &msg.DispatchEpoch, ProductID: msg.ProductID})
	switch {
	case err == nil:
	case errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrNotFound) || errors.Is(err, api.ErrFenced):
		// Stale or taken. An accept whose answer was lost comes back as
		// a conflict too: adopt the job if it is in fact ours. Not for a
		// held message delivered again: its lock lapsed, so another
		// execution of this pool (same factory id) took it and may still
		// run it; if that one crashed, the reaper and the redispatch
		// recover the job.
		if h == nil || !d.Redelivered {
			cl = a.adopt(ctx, msg)
		}
		if cl == nil {
			log.InfoContext(ctx, "dispatch is stale; someone else has the job", "err", err, "redelivered", d.Redelivered)
			complete("stale message")
			return nil
		}
	case api.IsPermanent(err):
		log.ErrorContext(ctx, "accept refused", "err", err)
		complete("refused message")
		return nil
	default:
		log.WarnContext(ctx, "accept failed; message goes back for redelivery", "err", err)
		h.release()
		if aerr := a.recv.Abandon(ctx, d); aerr != nil {
			log.WarnContext(ctx, "abandon", "err", aerr)
		}
		return nil
	}
	if h == nil {
		// The job is ours either way; a redelivery is refused by accept.
		complete("accepted message")
	}
	r := a.start(ctx, cl, received)
	if r == nil && h != nil {
		complete("accepted message")
	}
	return r
}

// adopt returns the claim of a job the coordinator says this factory
// already holds under msg's dispatch, or nil.
func (a *Agent) adopt(ctx context.Context, msg protocol.DispatchMessage) *protocol.Claimed {
	j, err := a.api.GetJob(ctx, msg.ProductID, msg.JobID)
	if err != nil || j.HolderFactoryID != a.cfg.FactoryID || j.Stage != fleet.StageAssigned || j.DispatchEpoch != msg.DispatchEpoch {
		return nil
	}
	return &protocol.Claimed{Job: j, LeaseEpoch: j.LeaseEpoch, LeaseExpiresAt: j.LeaseExpiresAt}
}

// heartbeat reports the factory to the coordinator.
func (a *Agent) heartbeat(ctx context.Context, health fleet.Health) error {
	a.hbMu.Lock()
	defer a.hbMu.Unlock()
	if a.detected == nil {
		det, err := caps.Detect(ctx, a.env, a.cfg.Engines, a.cfg.RepoBase, a.cfg.ExtraCaps)
		if err != nil {
			return err
		}
		a.detected = &det
	}
	// Repos are rescanned every time: one cloned while the factory runs
	// is advertised at the next beat.
	repos, err := caps.Repos(a.cfg.RepoBase)
	if err != nil {
		return err
	}
	load := a.load()
	if health == fleet.HealthDown {
		load = 0
	}
	for {
		hb := api.HeartbeatRequest{Capabilities: a.detected.Capabilities, Repos: repos, Load: load, Health: health, SeatLimit: a.cfg.Seats,
			Cooldowns: a.cool.active()}
		_, err := a.api.Heartbeat(ctx, hb)
		if err == nil {
			a.lastLoad = load
			return nil
		}
		// A token enrolled with a capability list refuses anything else,
		// naming the first capability it refuses: stop advertising that
		// one and try again, rather than never heartbeating at all.
		i, ok := refusedCapability(err, len(a.detected.Capabilities))
		if !ok {
			return err
		}
		a.log.WarnContext(ctx, "capability outside this factory token's scope; not advertising it",
			"capability", a.detected.Capabilities[i])
		a.detected.Capabilities = slices.Delete(slices.Clone(a.detected.Capabilities), i, i+1)
	}
}

// refusedCapability reads the index of the capability a 403 names in its
// field (capabilities[i]).
func refusedCapability(err error, n int) (int, bool) {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusForbidden {
		return 0, false
	}
	s, ok := strings.CutPrefix(apiErr.Field, "capabilities[")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(strings.TrimSuffix(s, "]"))
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// syncLoad heartbeats when the load changed since the last heartbeat: the
// scheduler admits a claim only while the stored load leaves a free seat.
func (a *Agent) syncLoad(ctx context.Context) {
	if !a.cfg.HeartbeatEnabled {
		return
	}
	a.hbMu.Lock()
	stale := a.lastLoad != a.load()
	a.hbMu.Unlock()
	if stale {
		if err := a.heartbeat(ctx, fleet.HealthOK); err != nil {
			a.log.WarnContext(ctx, "heartbeat", "err", err)
		}
	}
}

// refused reports whether err, a heartbeat's failure, is the
// coordinator's answer that it no longer accepts this factory, so no
// further work can get past it: 401, the token unknown or revoked; 403,
// the token may not act as this factory (a capability outside its scope
// is dropped by heartbeat before it gets here); 404, the factory is not
// enrolled (deregistered: its document is gone while a cached token
// still authenticates). Any other answer is about this one heartbeat or
// the moment (400 a field of the report, 409 a lost race to write the
// factory, 413, 429, 5xx, no answer): the factory works on and beats
// again on its cadence. The one rule for the first heartbeat and the
// loop's.
func refused(err error) bool {
	apiErr, ok := errors.AsType[*api.Error](err)
	if !ok {
		return false
	}
	switch apiErr.Status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// heartbeatLoop heartbeats every interval on the agent's clock, and at
// once when the load changed. A refused heartbeat is the fatal condition.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	t := a.clock.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-a.changed:
		}
		if err := a.heartbeat(ctx, fleet.HealthOK); err != nil {
			if ctx.Err() != nil {
				return
			}
			if refused(err) {
				// Revoked or deregistered: every further call fails too.
				select {
				case a.fatal <- fmt.Errorf("heartbeat refused: %w", err):
				default:
				}
				return
			}
			a.log.WarnContext(ctx, "heartbeat failed", "err", err)
		}
	}
}

func (a *Agent) jobsDir() string { return filepath.Join(a.cfg.WorkDir, "jobs") }

// dirMode is the mode of job directories: the engine's user must pass
// through them to read its prompt file, and list nothing.
func (a *Agent) dirMode() os.FileMode {
	if a.runAs != nil {
		return 0o711
	}
	return 0o700
}

// engineUser resolves FLEET_ENGINE_USER and checks the factory can run
// engines as that user and that they can reach their files.
func (a *Agent) engineUser() (*engine.User, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%s needs the factory to run as root (it runs as uid %d)", config.EnvEngineUser, os.Geteuid())
	}
	u, err := engine.LookupUser(a.cfg.EngineUser)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(a.jobsDir(), 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(a.jobsDir(), 0o711); err != nil {
		return nil, err
	}
	return u, errors.Join(u.CheckReach(a.git.WorktreesDir()), u.CheckReach(a.jobsDir()))
}

// within is ctx ending once d has passed on the agent's clock, its cause
// then context.DeadlineExceeded.
func (a *Agent) within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return within(a.clock, ctx, d)
}

// within is ctx ending once d has passed on clk, its cause then
// context.DeadlineExceeded.
func within(clk clock.Timers, ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return withinCause(clk, ctx, d, fmt.Errorf("%w: %s passed", context.DeadlineExceeded, d))
}

// withinCause is ctx ending with cause once d has passed on clk (at once
// when d is not positive).
func withinCause(clk clock.Timers, ctx context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if d <= 0 {
		cancel(cause)
		return ctx, func() { cancel(context.Canceled) }
	}
	t := clk.NewTicker(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel(cause)
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// sleep waits until d has passed on the agent's clock or ctx ends; it
// reports whether d passed.
func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	return retry.Sleep(ctx, a.clock, d) == nil
}
