package coord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

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
	product, err := c.cachedProduct(ctx, productID)
	if errors.Is(err, fleet.ErrNotFound) {
		return nil, false, &fleet.Error{Code: fleet.CodeRepoNotOwned, Field: "repo",
			Message: fmt.Sprintf("product %s is not declared, so it owns no repo; declare it with PUT /api/fleet/products/%s", productID, productID)}
	}
	if err != nil {
		return nil, false, err
	}
	if !product.Owns(m.Repo) {
		return nil, false, &fleet.Error{Code: fleet.CodeRepoNotOwned, Field: "repo",
			Message: fmt.Sprintf("repo %s is not owned by product %s (it owns: %v)", m.Repo, productID, product.Repos)}
	}

	id := c.newID("j")
	if m.IdempotencyKey != "" {
		// The key decides the id, so two racing submits collide on Create
		// and both get the one job.
		sum := sha256.Sum256([]byte(productID + "\x00" + m.IdempotencyKey))
		id = "k" + hex.EncodeToString(sum[:12])
		if existing, err := c.GetJob(ctx, productID, id); err == nil {
			return existing, false, nil
		}
	}
	if m.ParentID != "" {
		if _, err := c.GetJob(ctx, productID, m.ParentID); err != nil {
			if errors.Is(err, fleet.ErrNotFound) {
				return nil, false, fleet.Invalid("parentId", "job %s not found in product %s", m.ParentID, productID)
			}
			return nil, false, err
		}
	}
	satisfied, err := c.registerDependant(ctx, productID, id, m.Deps, m.DepsMode)
	if err != nil {
		return nil, false, err
	}

	now := c.now()
	j := &fleet.Job{
		ID: id, ProductID: productID, Title: m.Title, Repo: m.Repo,
		Capabilities: m.Capabilities, Persona: m.Persona, Priority: m.Priority,
		Stage: fleet.StageQueued, Body: m.Body, MaxAttempts: m.MaxAttempts,
		ParentID: m.ParentID, Deps: m.Deps, DepsMode: m.DepsMode, Budget: m.Budget,
		Review: m.Review, IdempotencyKey: m.IdempotencyKey,
		QueuedAt: now, EventSeq: 1, CreatedAt: now, UpdatedAt: now,
	}
	if j.Deps == nil {
		j.Deps = []string{}
	}
	if !satisfied {
		j.Stage = fleet.StageBlocked
	}
	body, err := json.Marshal(j)
	if err != nil {
		return nil, false, fmt.Errorf("encode job: %w", err)
	}
	rev, err := c.store.Create(ctx, Jobs, productID, id, body)
	if errors.Is(err, ErrExists) && m.IdempotencyKey != "" {
		existing, gerr := c.GetJob(ctx, productID, id)
		return existing, false, gerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("create job: %w", err)
	}
	j.Rev = rev
	c.jobs.put(productID, id, Item{ID: id, PartitionKey: productID, Rev: rev, Body: body})
	c.appendEvent(ctx, j, fleet.Event{Type: "submitted", To: j.Stage, Actor: fleet.ActorOperator})
	if j.Stage == fleet.StageQueued {
		c.bumpQueueState(ctx, productID)
	} else if ok, err := c.depsSatisfied(ctx, j); err == nil && ok {
		// A dependency shipped between our check and our create; its
		// unblock pass could not see this job yet, so unblock it here.
		c.unblock(ctx, j)
	}
	return j, true, nil
}

// registerDependant marks each unshipped dependency as having dependants (so
// shipping it looks for them) and reports whether the deps are satisfied.
func (c *Coordinator) registerDependant(ctx context.Context, productID, id string, deps []string, mode fleet.DepsMode) (bool, error) {
	if len(deps) == 0 {
		return true, nil
	}
	// Every dependency must exist before any is marked: a rejected submit
	// changes nothing, not even the jobs it named.
	for i, dep := range deps {
		if dep == id {
			return false, fleet.Invalid(fmt.Sprintf("deps[%d]", i), "a job cannot depend on itself")
		}
		if _, err := c.GetJob(ctx, productID, dep); err != nil {
			if errors.Is(err, fleet.ErrNotFound) {
				return false, fleet.Invalid(fmt.Sprintf("deps[%d]", i), "job %s not found in product %s", dep, productID)
			}
			return false, err
		}
	}
	shipped := 0
	for i, dep := range deps {
		var depStage fleet.Stage
		_, err := c.mutateJob(ctx, productID, dep, func(d *fleet.Job) error {
			depStage = d.Stage
			if d.Stage == fleet.StageShipped || d.HasDependants {
				return errNoChange
			}
			d.HasDependants = true
			return nil
		})
		if errors.Is(err, fleet.ErrNotFound) {
			return false, fleet.Invalid(fmt.Sprintf("deps[%d]", i), "job %s not found in product %s", dep, productID)
		}
		if err != nil {
			return false, err
		}
		if depStage == fleet.StageShipped {
			shipped++
		}
	}
	return depsMet(mode, shipped, len(deps)), nil
}

func depsMet(mode fleet.DepsMode, shipped, total int) bool {
	if mode == fleet.DepsAny {
		return shipped > 0
	}
	return shipped == total
}

// depsSatisfied reads j's dependencies now.
func (c *Coordinator) depsSatisfied(ctx context.Context, j *fleet.Job) (bool, error) {
	shipped := 0
	for _, dep := range j.Deps {
		d, err := c.GetJob(ctx, j.ProductID, dep)
		if err != nil {
			return false, err
		}
		if d.Stage == fleet.StageShipped {
			shipped++
		}
	}
	return depsMet(j.DepsMode, shipped, len(j.Deps)), nil
}

// GetJob reads a job. With productID empty it looks the id up across
// products (a plain cross-partition filter).
func (c *Coordinator) GetJob(ctx context.Context, productID, id string) (*fleet.Job, error) {
	if productID != "" {
		it, err := c.store.Read(ctx, Jobs, productID, id)
		if err != nil {
			return nil, jobReadError(err, id)
		}
		return decodeJob(it)
	}
	jobs, err := c.queryJobs(ctx, Query{Where: []Cond{Eq("id", id)}})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, jobReadError(ErrNotFound, id)
	}
	return jobs[0], nil
}

// ListJobs returns one page of a product's jobs in creation order,
// optionally of one stage.
func (c *Coordinator) ListJobs(ctx context.Context, productID string, stage fleet.Stage, limit int, cursor string) ([]*fleet.Job, string, error) {
	if err := fleet.ValidateName("x-product-id", productID); err != nil {
		return nil, "", err
	}
	q := Query{PartitionKey: productID, Limit: limit, Continuation: cursor}
	if stage != "" {
		q.Where = []Cond{Eq("stage", string(stage))}
	}
	page, err := c.store.Query(ctx, Jobs, q)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	jobs := make([]*fleet.Job, 0, len(page.Items))
	for _, it := range page.Items {
		j, err := decodeJob(it)
		if err != nil {
			return nil, "", err
		}
		jobs = append(jobs, j)
	}
	return jobs, page.Continuation, nil
}

// transition moves a job to `to` on behalf of actor, after guard (which may
// refuse with an error) and then effect (which may change more fields). It
// appends the event and keeps the queue state current. It returns the job
// as it was before and after.
func (c *Coordinator) transition(ctx context.Context, pk, id string, to fleet.Stage, actor fleet.Actor, actorID, eventType, message string,
	guard func(j *fleet.Job) error, effect func(before, j *fleet.Job)) (before, after *fleet.Job, err error) {
	var rule fleet.Rule
	after, err = c.mutateJob(ctx, pk, id, func(j *fleet.Job) error {
		if guard != nil {
			if err := guard(j); err != nil {
				return err
			}
		}
		r, err := fleet.CheckJobTransition(j, to, actor)
		if err != nil {
			return err
		}
		rule = r
		snapshot := *j
		before = &snapshot
		holder := ""
		if actor == fleet.ActorFactory {
			holder = actorID
		}
		j.Apply(rule, c.now(), holder, c.cfg.LeaseTTL)
		j.EventSeq++
		if effect != nil {
			effect(before, j)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	// The transition is committed: what follows must not be cut short by the
	// caller going away (a client disconnect, a host timeout).
	ctx = context.WithoutCancel(ctx)
	if eventType == "" {
		eventType = "stage"
	}
	if message == "" {
		message = rule.Why
	}
	c.appendEvent(ctx, after, fleet.Event{Type: eventType, From: before.Stage, To: after.Stage, Actor: actor, ActorID: actorID, Message: message})
	if after.Stage == fleet.StageQueued {
		c.bumpQueueState(ctx, pk)
	}
	switch rule.Lease {
	case fleet.LeaseRelease, fleet.LeaseRevoke:
		result := fleet.RunSucceeded
		switch {
		case rule.Lease == fleet.LeaseRevoke:
			result = fleet.RunLost
		case after.Stage == fleet.StageFailed || after.Stage == fleet.StageDeadLetter || after.Stage == fleet.StageQueued:
			result = fleet.RunFailed
		}
		c.recordRun(ctx, before, result, message)
	}
	if after.Stage == fleet.StageShipped {
		c.unblockDependants(ctx, after)
	}
	return before, after, nil
}

// PatchRequest is a holder's fenced update of its job.
type PatchRequest struct {
	Stage      fleet.Stage
	LeaseEpoch int64
	Checkpoint *string
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
	fence := func(j *fleet.Job) error { return j.CheckFence(factoryID, req.LeaseEpoch) }
	setCheckpoint := func(_, j *fleet.Job) {
		if req.Checkpoint != nil {
			j.Checkpoint = *req.Checkpoint
		}
	}
	if req.Stage == "" {
		if req.Checkpoint == nil {
			return nil, fleet.Invalid("stage", "a patch needs a stage, a checkpoint or both")
		}
		return c.mutateJob(ctx, productID, jobID, func(j *fleet.Job) error {
			if err := fence(j); err != nil {
				return err
			}
			if j.Checkpoint == *req.Checkpoint {
				return errNoChange
			}
			j.Checkpoint = *req.Checkpoint
			j.UpdatedAt = c.now()
			return nil
		})
	}
	switch req.Stage {
	case fleet.StageBuilding, fleet.StageReview, fleet.StageTesting, fleet.StageShipped:
	default:
		return nil, fleet.Invalid("stage", "a factory may patch a job to building, review, testing or shipped; report failures with POST /api/fleet/fail")
	}
	_, after, err := c.transition(ctx, productID, jobID, req.Stage, fleet.ActorFactory, factoryID, "", "",
		fence, setCheckpoint)
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
	var effect func(before, j *fleet.Job)
	switch action {
	case ActionShip:
		to = fleet.StageShipped
	case ActionReject:
		to = fleet.StageFailed
		effect = func(_, j *fleet.Job) {
			j.LastFailure = &fleet.Failure{Reason: "rejected: " + reason, At: j.UpdatedAt}
		}
	case ActionCancel:
		to = fleet.StageCancelled
	case ActionRequeue:
		to = fleet.StageQueued
		// An operator's requeue is a fresh start: the retry budget resets.
		effect = func(_, j *fleet.Job) {
			j.Attempts = 0
			j.NotBefore = j.UpdatedAt
		}
	default:
		return nil, fleet.Invalid("action", "unknown action %q", action)
	}
	_, after, err := c.transition(ctx, productID, jobID, to, fleet.ActorOperator, operatorID, string(action), reason, nil, effect)
	return after, err
}

// unblockDependants moves blocked jobs waiting on shipped to queued when
// their dependencies are now satisfied.
func (c *Coordinator) unblockDependants(ctx context.Context, shipped *fleet.Job) {
	if !shipped.HasDependants {
		return
	}
	blocked, err := c.queryJobs(ctx, Query{PartitionKey: shipped.ProductID, Where: []Cond{Eq("stage", string(fleet.StageBlocked))}})
	if err != nil {
		c.log.ErrorContext(ctx, "unblock: list blocked jobs", "product", shipped.ProductID, "err", err)
		return
	}
	for _, j := range blocked {
		if slices.Contains(j.Deps, shipped.ID) {
			c.unblock(ctx, j)
		}
	}
}

// UnblockReady queues every blocked job whose dependencies are satisfied.
// Shipping a dependency unblocks its dependants at once; this pass, run by
// the redispatch sweep, catches the ones that pass missed (the process died
// between the ship and the unblock, or the store failed then). It returns
// how many it queued.
func (c *Coordinator) UnblockReady(ctx context.Context) (int, error) {
	blocked, err := c.queryJobs(ctx, Query{Where: []Cond{Eq("stage", string(fleet.StageBlocked))}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, j := range blocked {
		ok, err := c.depsSatisfied(ctx, j)
		if err != nil || !ok {
			continue
		}
		if c.unblock(ctx, j) {
			n++
		}
	}
	return n, nil
}

// unblock queues j if its dependencies are satisfied now.
// It reports whether it did.
func (c *Coordinator) unblock(ctx context.Context, j *fleet.Job) bool {
	ok, err := c.depsSatisfied(ctx, j)
	if err != nil || !ok {
		return false
	}
	_, _, err = c.transition(ctx, j.ProductID, j.ID, fleet.StageQueued, fleet.ActorSystem, "", "unblocked", "", nil, nil)
	if err != nil && !errors.Is(err, fleet.ErrConflict) {
		c.log.ErrorContext(ctx, "unblock", "job", j.ID, "err", err)
	}
	return err == nil
}
