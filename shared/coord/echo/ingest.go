package echo

import (
	"context"
	"fmt"
	"slices"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// IngestRequest is one tracker item as POST /fleet/tracker/ingest sends it.
type IngestRequest struct {
	ProductID string
	Ref       fleet.TrackerRef
	// Manifest is the job's manifest (Markdown with front matter); it must
	// not name an idempotencyKey: the item decides it.
	Manifest []byte
}

// IngestOutcome says what an ingest did.
type IngestOutcome string

// Ingest outcomes.
const (
	// IngestCreated: the item had no job; one was created (201).
	IngestCreated IngestOutcome = "created"
	// IngestUpdated: a newer revision replaced what the job, not started
	// yet, will run (200).
	IngestUpdated IngestOutcome = "updated"
	// IngestUnchanged: the job already carries this revision or a newer
	// one; it is returned as it is (200).
	IngestUnchanged IngestOutcome = "unchanged"
)

// Ingest turns a tracker item into a job: the tracker bridge's way in, as
// the echo is its way out. The item's job is the one of
// idempotency key fleet.TrackerKey(source, itemId), so the same item again
// is the same job, through the submit path's own idempotency. A higher
// revision replaces the job's manifest while the job has not started
// (fleet.Job.Started: never assigned); after that it is a conflict naming
// why. A lower or equal revision changes nothing.
func (c *Service) Ingest(ctx context.Context, req IngestRequest) (*fleet.Job, IngestOutcome, error) {
	if err := fleet.ValidateName("x-product-id", req.ProductID); err != nil {
		return nil, "", err
	}
	if err := req.Ref.Validate(); err != nil {
		return nil, "", err
	}
	m, err := fleet.ParseManifest(req.Manifest)
	if err != nil {
		return nil, "", err
	}
	switch {
	case m.IdempotencyKey != "":
		return nil, "", fleet.Invalid("idempotencyKey", "is decided by the tracker item (%s); leave it out of an ingested manifest", fleet.TrackerKey(req.Ref.Source, req.Ref.ItemID))
	case m.ParentID != "":
		return nil, "", fleet.Invalid("parentId", "a tracker item becomes a root job; children are posted with POST /api/fleet/jobs/%s/children", m.ParentID)
	}
	m.IdempotencyKey = fleet.TrackerKey(req.Ref.Source, req.Ref.ItemID)
	ref := req.Ref
	j, created, err := c.life.SubmitManifest(ctx, req.ProductID, m, func(j *fleet.Job) error {
		j.Tracker = &ref
		return c.Open(ctx, j)
	})
	if err != nil || created {
		return j, IngestCreated, err
	}
	if trackerRevision(j) >= ref.Revision {
		return j, IngestUnchanged, nil
	}
	return c.updateTracked(ctx, j, m, ref)
}

// trackerRevision is the revision a job carries; 0 for a job submitted
// with the item's key by hand, which any revision then updates.
func trackerRevision(j *fleet.Job) int64 {
	if j.Tracker == nil {
		return 0
	}
	return j.Tracker.Revision
}

// updateTracked replaces what job j (found by its key) will run with
// manifest m of revision ref, in one CAS that also checks the job has not
// started: a claim racing the update either sees the new manifest or makes
// the update a conflict, never a half of each.
func (c *Service) updateTracked(ctx context.Context, found *fleet.Job, m *fleet.Manifest, ref fleet.TrackerRef) (*fleet.Job, IngestOutcome, error) {
	// Everything a submit checks (repo owned, persona, budget, size) is
	// checked on the new manifest before anything is written.
	next, err := c.life.PrepareJob(ctx, found.ProductID, found.ID, m, nil)
	if err != nil {
		return nil, "", err
	}
	from := int64(0)
	outcome := IngestUpdated
	j, err := c.k.MutateJob(ctx, found.ProductID, found.ID, func(j *fleet.Job) error {
		outcome = IngestUpdated
		from = trackerRevision(j)
		if from >= ref.Revision {
			outcome = IngestUnchanged
			return kernel.ErrNoChange
		}
		if j.Started() {
			return &fleet.Error{Code: fleet.CodeConflict, Field: "revision", Message: fmt.Sprintf(
				"job %s has started (stage %s, assigned %d time(s)): revision %d of %s:%s cannot replace what it runs; cancel it, or ingest the change as a new item",
				j.ID, j.Stage, j.LeaseEpoch, ref.Revision, ref.Source, ref.ItemID)}
		}
		if !slices.Equal(j.Deps, next.Deps) || j.DepsMode != next.DepsMode {
			// Dependencies are registered on the jobs they name when the
			// job is created; an update would have to move those marks.
			return &fleet.Error{Code: fleet.CodeConflict, Field: "deps", Message: fmt.Sprintf(
				"revision %d changes the dependencies of job %s (%v -> %v); an update cannot, ingest it as a new item", ref.Revision, j.ID, j.Deps, next.Deps)}
		}
		j.Title, j.Repo, j.Kind, j.Capabilities = next.Title, next.Repo, next.Kind, next.Capabilities
		j.Persona, j.Profile, j.Priority, j.Body = next.Persona, next.Profile, next.Priority, next.Body
		j.MaxAttempts, j.Budget, j.Review = next.MaxAttempts, next.Budget, next.Review
		r := ref
		j.Tracker = &r
		if j.Stage == fleet.StageQueued {
			// Repo and capabilities may have changed: the job needs a new
			// dispatch decision (the dispatcher's new epoch voids any
			// message in flight for the old one, as on a requeue).
			j.TargetFactoryID = ""
			j.Dispatch = fleet.Dispatch{DeadLettered: j.Dispatch.DeadLettered}
		}
		j.UpdatedAt = c.k.Now()
		return c.k.RecordEvent(ctx, j, fleet.Event{Type: fleet.EventTrackerUpdated, To: j.Stage, Actor: fleet.ActorOperator,
			Message: fmt.Sprintf("tracker item %s:%s revision %d replaced revision %d", ref.Source, ref.ItemID, ref.Revision, from)})
	})
	if err != nil {
		return nil, "", err
	}
	if outcome == IngestUnchanged {
		return j, outcome, nil
	}
	ctx = context.WithoutCancel(ctx)
	if j.Stage == fleet.StageQueued {
		c.products.BumpQueueState(ctx, j.ProductID)
	}
	return j, IngestUpdated, nil
}
