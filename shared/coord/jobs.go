package coord

import (
	"context"
	"errors"
	"fmt"

	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/coord/review"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Submit parses a manifest and creates its job in product productID. The
// same idempotencyKey again returns the existing job with created=false.
func (c *Coordinator) Submit(ctx context.Context, productID string, manifest []byte) (job *fleet.Job, created bool, err error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, false, err
	}
	m, err := fleet.ParseManifest(manifest)
	if err != nil {
		return nil, false, err
	}
	if m.ParentID != "" {
		// One way to make a child, so its parent always waits for it.
		return nil, false, fleet.Invalid("parentId", "children are posted with POST /api/fleet/jobs/%s/children, which makes the parent wait for them", m.ParentID)
	}
	return c.submitManifest(ctx, productID, m, nil)
}

// submitManifest creates the job of a parsed manifest, or, when the
// manifest's idempotencyKey names a root job already, returns that one with
// created=false (a child is a conflict): the one rule of idempotent
// submission (Submit, tracker ingest). mark, when set, adds to the job (and
// may write what must exist before it) once every check passed, before it.
func (c *Coordinator) submitManifest(ctx context.Context, productID string, m *fleet.Manifest, mark func(j *fleet.Job) error) (job *fleet.Job, created bool, err error) {
	id := c.k.NewID("j")
	if m.IdempotencyKey != "" {
		id = kernel.KeyedID(productID, m.IdempotencyKey)
		if existing, err := c.GetJob(ctx, productID, id); err == nil {
			return dag.FoundByKey(existing, nil, m.ParentID)
		}
	}
	j, err := c.prepareJob(ctx, productID, id, m, nil)
	if err != nil {
		return nil, false, err
	}
	if mark != nil {
		if err := mark(j); err != nil {
			return nil, false, err
		}
	}
	return c.createJob(ctx, j)
}

// prepareJob builds job id of manifest m and checks it against everything a
// submit reads (the product owns the repo, the persona exists, the
// dependencies exist, the document fits) without writing anything, so a
// request refused for any of them changes nothing. Dependencies in pending
// are jobs the same request creates first.
func (c *Coordinator) prepareJob(ctx context.Context, productID, id string, m *fleet.Manifest, pending map[string]bool) (*fleet.Job, error) {
	product, err := c.catalog.CachedProduct(ctx, productID)
	if errors.Is(err, fleet.ErrNotFound) {
		return nil, &fleet.Error{Code: fleet.CodeRepoNotOwned, Field: "repo",
			Message: fmt.Sprintf("product %s is not declared, so it owns no repo; declare the product and its repos first", productID)}
	}
	if err != nil {
		return nil, err
	}
	if !product.Owns(m.Repo) {
		return nil, &fleet.Error{Code: fleet.CodeRepoNotOwned, Field: "repo",
			Message: fmt.Sprintf("repo %s is not owned by product %s (it owns: %v)", m.Repo, productID, product.Repos)}
	}
	now := c.k.Now()
	j := &fleet.Job{
		ID: id, ProductID: productID, Title: m.Title, Repo: m.Repo, Kind: m.Kind,
		Capabilities: m.Capabilities, Persona: m.Persona, Priority: m.Priority,
		Stage: fleet.StageQueued, Body: m.Body, MaxAttempts: m.MaxAttempts,
		ParentID: m.ParentID, Deps: m.Deps, DepsMode: m.DepsMode, Budget: m.Budget,
		Review: m.Review, IdempotencyKey: m.IdempotencyKey,
		QueuedAt: now, CreatedAt: now, UpdatedAt: now,
	}
	// Submitted is its first event, committed with it (internal/kernel/events.go);
	// createJob names the stage it is created in.
	j.RecordEvent(fleet.Event{Type: fleet.EventSubmitted, To: j.Stage, Actor: fleet.ActorOperator})
	if j.Deps == nil {
		j.Deps = []string{}
	}
	if j.Review != nil {
		j.Review.Tally()
	}
	if err := c.catalog.ApplyPersona(ctx, j); err != nil {
		return nil, err
	}
	// After the persona, whose budget fills the manifest's gaps.
	if err := c.admission.CheckJobBudget(ctx, productID, j.Budget); err != nil {
		return nil, err
	}
	// The stored size is checked before any write (marking dependencies is
	// one): a manifest under its byte limit can still encode past the
	// store's, since JSON escapes '<', '>', '&' and control characters.
	if _, err := encodeSubmitted(j); err != nil {
		return nil, err
	}
	if err := c.dag.CheckDeps(ctx, productID, id, j.Deps, pending); err != nil {
		return nil, err
	}
	return j, nil
}

// createJob writes a job prepareJob built: it marks its dependencies,
// creates it queued (or blocked on them), and records it. A job whose
// idempotency key another request just used answers that job, created
// false.
func (c *Coordinator) createJob(ctx context.Context, j *fleet.Job) (*fleet.Job, bool, error) {
	productID, id := j.ProductID, j.ID
	satisfied, err := c.dag.RegisterDependant(ctx, productID, id, j.Deps, j.DepsMode)
	if err != nil {
		return nil, false, err
	}
	if !satisfied {
		j.Stage = fleet.StageBlocked
		j.RecentEvents[0].To = j.Stage
	}
	body, err := encodeSubmitted(j)
	if err != nil {
		return nil, false, err
	}
	began := c.k.Now()
	rev, err := c.k.Store.Create(ctx, store.Jobs, productID, id, body)
	if err == nil && j.Stage == fleet.StageQueued {
		c.k.Counters.Stages.Submit.Observe(c.k.Now().Sub(began))
	}
	if errors.Is(err, store.ErrExists) && j.IdempotencyKey != "" {
		existing, gerr := c.GetJob(ctx, productID, id)
		return dag.FoundByKey(existing, gerr, j.ParentID)
	}
	if errors.Is(err, store.ErrTooLarge) {
		return nil, false, &fleet.Error{Code: fleet.CodeTooLarge, Field: "body", Err: err,
			Message: "the job is too large for the store; shorten the task body"}
	}
	if err != nil {
		return nil, false, fmt.Errorf("create job: %w", err)
	}
	j.Rev = rev
	c.k.Jobs.Put(productID, id, store.Item{ID: id, PartitionKey: productID, Rev: rev, Body: body})
	// The job is committed: what follows must not be cut short by the
	// caller going away, as in transition.
	ctx = context.WithoutCancel(ctx)
	if j.Stage == fleet.StageQueued {
		// With a change feed, its batch tells the pollers once for every
		// job it carries (DispatchChanged).
		if !c.k.ChangeFeed {
			c.catalog.BumpQueueState(ctx, productID)
		}
	} else if settled, ok := c.dag.SettleBlocked(ctx, j); ok {
		// A dependency shipped or ended unshipped before or since our
		// check; its own pass could not see this job yet, so settle it here.
		j = settled
	}
	return j, true, nil
}

// encodeSubmitted encodes a new job as the store keeps it, refusing one
// whose document would exceed fleet.MaxSubmittedJobBytes. The body is
// named: every other field is bounded far below that.
func encodeSubmitted(j *fleet.Job) ([]byte, error) {
	body, err := kernel.EncodeJob(j)
	if err != nil {
		return nil, fmt.Errorf("encode job: %w", err)
	}
	if len(body) > fleet.MaxSubmittedJobBytes {
		return nil, &fleet.Error{Code: fleet.CodeTooLarge, Field: "body", Message: fmt.Sprintf(
			"the job would be stored as %d bytes of JSON, at most %d allowed; the task body's quotes, backslashes, newlines and control characters take 2 to 6 bytes each there",
			len(body), fleet.MaxSubmittedJobBytes)}
	}
	return body, nil
}

// ListJobs returns one page of a product's jobs, newest first (ids begin
// with their creation time), optionally of one stage: the job just
// submitted is on the first page, not the last. A document that does not
// decode is left out, logged and counted (kernel.JobPage), so one bad
// document does not take the product's whole list, and the console's jobs
// page, down with it; the page is then shorter than limit.
func (c *Coordinator) ListJobs(ctx context.Context, productID string, stage fleet.Stage, limit int, cursor string) ([]*fleet.Job, string, error) {
	if err := fleet.ValidateName("x-product-id", productID); err != nil {
		return nil, "", err
	}
	q := store.Query{PartitionKey: productID, Limit: limit, Continuation: cursor, Descending: true}
	if stage != "" {
		q.Where = []store.Cond{store.Eq("stage", string(stage))}
	}
	jobs, next, _, err := c.k.JobPage(ctx, q)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	return jobs, next, nil
}

// move is one stage transition of one job.
type move struct {
	pk, id string
	// to is the target stage; decide, when set, picks it instead from the
	// job as read on each CAS attempt (a rule over stored fields such as
	// attempts).
	to     fleet.Stage
	decide func(j *fleet.Job) fleet.Stage
	// actor and actorID are who moves it; a factory actor becomes the holder
	// when the move takes a lease.
	actor   fleet.Actor
	actorID string
	// event is the event's type (EventStage when empty); message its
	// text (the rule's own explanation when empty).
	event   fleet.EventType
	message string
	// guard may refuse the move with an error; effect may change more
	// fields after the stage machine applied the move.
	guard  func(j *fleet.Job) error
	effect func(before, j *fleet.Job)
	// mayStay lets decide keep the job in its stage: the move is then a
	// recorded change of other fields (a review vote, more children).
	mayStay bool
	// messageOf, when set, makes the message once the move is written
	// (from what its guard saw).
	messageOf func() string
	// eventActor, when set, is the actor the event names instead of actor:
	// the review gate moves a job as the system on an operator's vote.
	eventActor fleet.Actor
	// describe, when set, names the event, its message and the result of
	// the run a release or revocation ends from the job as it was before
	// the move (a cancel acknowledged or forced); empty values keep the
	// defaults.
	describe func(before *fleet.Job) (fleet.EventType, string, fleet.RunResult)
	// report, when set, is the holder's last word on the run this move
	// ends (usage, head, diff): merged into the job's run report before
	// the move, so the run document and the budget settle from it.
	report *fleet.RunReport
}

// transition applies m: the guard, the stage machine's rule, the effect, its
// event and the run it ends in one CAS, then writes the event and, when the
// stage changed, tells the observers registered for committed transitions
// (coord.go New: queue state, admission, dependants). It returns the job as
// written.
func (c *Coordinator) transition(ctx context.Context, m move) (after *fleet.Job, err error) {
	var before *fleet.Job
	var rule fleet.Rule
	var run, ended fleet.RunResult
	after, err = c.k.MutateJob(ctx, m.pk, m.id, func(j *fleet.Job) error {
		if m.guard != nil {
			if err := m.guard(j); err != nil {
				return err
			}
		}
		if m.report != nil {
			admission.MergeReport(j, *m.report)
		}
		to := m.to
		if m.decide != nil {
			to = m.decide(j)
		}
		snapshot := *j
		before = &snapshot
		if m.mayStay && to == j.Stage {
			rule = fleet.Rule{From: to, To: to, Actor: m.actor, Lease: fleet.LeaseNone}
			j.UpdatedAt = c.k.Now()
		} else {
			r, err := fleet.CheckJobTransition(j, to, m.actor)
			if err != nil {
				return err
			}
			rule = r
			holder := ""
			if m.actor == fleet.ActorFactory {
				holder = m.actorID
			}
			j.Apply(rule, c.k.Now(), holder, c.cfg.LeaseTTL)
		}
		if m.effect != nil {
			m.effect(before, j)
		}
		// The event is committed with the move (internal/kernel/events.go).
		event, message := m.event, m.message
		if m.messageOf != nil {
			message = m.messageOf()
		}
		run = ""
		if m.describe != nil {
			if ev, msg, r := m.describe(before); ev != "" {
				event, message, run = ev, msg, r
			}
		}
		if event == "" {
			event = fleet.EventStage
		}
		if message == "" {
			message = rule.Why
		}
		actor := m.actor
		if m.eventActor != "" {
			actor = m.eventActor
		}
		// A move that ends the lease ends its run, recorded in this same
		// write.
		ended = ""
		if j.Stage != before.Stage {
			ended = runResult(rule, j.Stage, run)
		}
		if ended != "" {
			spilled := j.EndRun(fleet.RunOf(before, ended, message, c.k.Now()))
			if err := c.live.KeepRuns(ctx, spilled); err != nil {
				return err
			}
		}
		return c.k.RecordEvent(ctx, j, fleet.Event{Type: event, From: before.Stage, To: j.Stage, Actor: actor, ActorID: m.actorID, Message: message})
	})
	if err != nil {
		return nil, err
	}
	// The transition is committed: what follows must not be cut short by the
	// caller going away (a client disconnect, a host timeout).
	ctx = context.WithoutCancel(ctx)
	ev, _ := after.LatestEvent()
	message := ev.Message
	if before.Stage == after.Stage {
		return after, nil
	}
	c.k.Committed(ctx, kernel.Transition{Before: before, After: after, Rule: rule, Message: message, Run: ended})
	return after, nil
}

// runResult is how a move by rule to stage `to` ends the run of the lease
// it releases or revokes ("" when it ends none); describe's result, when
// the move named one, wins.
func runResult(rule fleet.Rule, to fleet.Stage, described fleet.RunResult) fleet.RunResult {
	switch rule.Lease {
	case fleet.LeaseRelease, fleet.LeaseRevoke:
	default:
		return ""
	}
	switch {
	case described != "":
		return described
	case rule.Lease == fleet.LeaseRevoke:
		return fleet.RunLost
	case to == fleet.StageFailed || to == fleet.StageDeadLetter || to == fleet.StageQueued:
		return fleet.RunFailed
	}
	return fleet.RunSucceeded
}

// PatchRequest is a holder's fenced update of its job.
type PatchRequest struct {
	Stage      fleet.Stage
	LeaseEpoch int64
	Checkpoint *string
	// Usage, Head and Diff report on the run (final figures on the
	// delivering patch); see ReportUsage for how usage merges.
	Usage *fleet.Usage
	Head  string
	Diff  *fleet.DiffStat
	// Engine is what a structured engine said of the run.
	Engine fleet.EngineFacts
}

// report is the run report the patch carries, or nil.
func (r PatchRequest) report() *fleet.RunReport {
	if r.Usage == nil && r.Head == "" && r.Diff == nil && r.Engine.Equal(fleet.EngineFacts{}) {
		return nil
	}
	rep := &fleet.RunReport{LeaseEpoch: r.LeaseEpoch, Head: r.Head, Diff: r.Diff, EngineFacts: r.Engine}
	if r.Usage != nil {
		rep.Usage = *r.Usage
	}
	return rep
}

// Patch applies a holder factory's fenced update: a stage move, a new
// checkpoint, or both. A stale leaseEpoch or a non-holder gets ErrFenced and
// changes nothing.
func (c *Coordinator) Patch(ctx context.Context, factoryID, productID, jobID string, req PatchRequest) (*fleet.Job, error) {
	if req.Checkpoint != nil {
		if err := fleet.ValidateText("checkpoint", *req.Checkpoint, 1024); err != nil {
			return nil, err
		}
	}
	if err := admission.ValidateReport(req.Usage, req.Head, req.Diff, req.Engine); err != nil {
		return nil, err
	}
	report := req.report()
	fence := func(j *fleet.Job) error { return j.CheckFence(factoryID, req.LeaseEpoch) }
	setCheckpoint := func(_, j *fleet.Job) {
		if req.Checkpoint != nil {
			j.Checkpoint = *req.Checkpoint
		}
	}
	if req.Stage == "" {
		if req.Checkpoint == nil && report == nil {
			return nil, fleet.Invalid("stage", "a patch needs a stage, a checkpoint, a run report (usage, head, diff) or some of them")
		}
		return c.k.MutateJob(ctx, productID, jobID, func(j *fleet.Job) error {
			if err := fence(j); err != nil {
				return err
			}
			changed := false
			if req.Checkpoint != nil && j.Checkpoint != *req.Checkpoint {
				j.Checkpoint, changed = *req.Checkpoint, true
			}
			if report != nil && admission.MergeReport(j, *report) {
				changed = true
			}
			if !changed {
				return kernel.ErrNoChange
			}
			j.UpdatedAt = c.k.Now()
			return nil
		})
	}
	switch req.Stage {
	case fleet.StageBuilding, fleet.StageReview, fleet.StageTesting, fleet.StageShipped:
	default:
		return nil, fleet.Invalid("stage", "a factory may patch a job to building, review, testing or shipped; report a failure as a failure, not a stage")
	}
	guard := fence
	effect := setCheckpoint
	if req.Stage == fleet.StageReview {
		// A gated job goes to its reviewers with the head they vote on:
		// the checkpoint delivered with it.
		guard = func(j *fleet.Job) error {
			if err := fence(j); err != nil {
				return err
			}
			if j.Review != nil && j.Checkpoint == "" && (req.Checkpoint == nil || *req.Checkpoint == "") {
				return fleet.Invalid("checkpoint", "is required: a job with a review gate is delivered with the checkpoint its reviewers vote on")
			}
			return nil
		}
		effect = func(before, j *fleet.Job) {
			setCheckpoint(before, j)
			review.DeliverForReview(j, j.Checkpoint)
		}
	}
	effect, forge := c.forgeDelivery(ctx, productID, req.Stage, effect)
	after, err := c.transition(ctx, move{pk: productID, id: jobID, to: req.Stage, actor: fleet.ActorFactory, actorID: factoryID,
		guard: guard, effect: effect, report: report})
	if err == nil && forge && after.ForgeDue {
		c.pulls.Kick(productID, jobID)
	}
	return after, err
}

// Action is an operator action on a job.
type Action string

// Operator actions.
const (
	ActionShip    Action = "ship"
	ActionRequeue Action = "requeue"
	ActionReject  Action = "reject"
	ActionCancel  Action = "cancel"
)

// ParseAction validates an action name.
func ParseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case ActionShip, ActionRequeue, ActionReject, ActionCancel:
		return a, nil
	}
	return "", fleet.Invalid("action", "unknown action %q (want ship, requeue, reject or cancel)", s)
}

// Act applies an operator action.
func (c *Coordinator) Act(ctx context.Context, operatorID, productID, jobID string, action Action, reason string) (*fleet.Job, error) {
	if err := fleet.ValidateText("reason", reason, 2000); err != nil {
		return nil, err
	}
	var to fleet.Stage
	var event fleet.EventType
	var effect func(before, j *fleet.Job)
	switch action {
	case ActionShip:
		to, event = fleet.StageShipped, fleet.EventShip
		// A pull request is shipped by merging it; a refused merge keeps
		// the job where it is, with the forge's reason.
		j, err := c.GetJob(ctx, productID, jobID)
		if err != nil {
			return nil, err
		}
		merged, err := c.mergeForShip(ctx, operatorID, j)
		if err != nil {
			return nil, err
		}
		if merged {
			effect = func(_, j *fleet.Job) { j.PullRequest.State = fleet.PRMerged }
		}
	case ActionReject:
		to, event = fleet.StageFailed, fleet.EventReject
		effect = func(_, j *fleet.Job) {
			j.LastFailure = &fleet.Failure{Reason: "rejected: " + reason, At: j.UpdatedAt}
		}
	case ActionCancel:
		return c.cancelTree(ctx, fleet.ActorOperator, operatorID, productID, jobID, reason)
	case ActionRequeue:
		to, event = fleet.StageQueued, fleet.EventRequeue
		// A job whose dependencies have not shipped waits for them in
		// blocked: queued, it could be claimed and run without them.
		// Deps never change and a shipped job stays shipped, so a
		// "ready" read here stays true; a "not ready" one is settled again
		// below, once the job is blocked where every pass can see it.
		j, err := c.GetJob(ctx, productID, jobID)
		if err != nil {
			return nil, err
		}
		switch {
		case j.Kind == fleet.KindComposite && len(j.Children) > 0:
			// It has no step of its own: it waits, and ships once its
			// children have (settled below).
			to = fleet.StageBlocked
		case len(j.Deps) > 0 || len(j.Children) > 0:
			v, _, err := c.dag.WaitState(ctx, j, c.dag.Stage)
			if err != nil {
				return nil, err
			}
			if v != dag.Ready {
				to = fleet.StageBlocked
			}
		}
		// An operator's requeue is a fresh start: the retry budget resets.
		effect = func(_, j *fleet.Job) {
			j.Attempts = 0
			j.NotBefore = j.UpdatedAt
		}
	default:
		return nil, fleet.Invalid("action", "unknown action %q", action)
	}
	after, err := c.transition(ctx, move{pk: productID, id: jobID, to: to, actor: fleet.ActorOperator, actorID: operatorID,
		event: event, message: reason, effect: effect})
	if err != nil {
		return nil, err
	}
	if after.Stage == fleet.StageBlocked {
		if settled, ok := c.dag.SettleBlocked(context.WithoutCancel(ctx), after); ok {
			after = settled
		}
	}
	return after, nil
}
