// Package artifacts keeps a job's artifacts: pointer documents in the store
// (fleet_artifacts, partitioned by job) and the bytes in a blob.Store,
// content-addressed per product. coord's façade calls it.
package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gigafactory/fleet/shared/blob"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// References and the blob's lifetime. Identical bytes are one blob, shared
// by every pointer carrying their digest; the blob goes when the last such
// pointer does. Two rules make that safe against an upload of the same
// bytes racing the delete of their last pointer:
//
//   - An upload creates its pointer before it commits the blob (and a
//     commit always gives the blob a new version).
//   - releaseBlob reads the blob's version before it looks for pointers,
//     and deletes the blob only at that version.
//
// So a racing upload is either seen (its pointer exists when the query
// runs: nothing is deleted), or commits after the version was read (the
// conditional delete fails), or commits after the delete (and writes the
// bytes again). No interleaving leaves a pointer without its bytes.

// Upload is one upload of an artifact.
type Upload struct {
	ProductID string
	JobID     string
	Name      string
	Kind      fleet.ArtifactKind
	// ContentType is what the uploader said the bytes are; "" is
	// fleet.DefaultContentType.
	ContentType string
	// FactoryID is the holder uploading for its run, fenced by LeaseEpoch
	// (required); "" is an operator (ActorID), whose artifact belongs to no
	// run and who sends no LeaseEpoch.
	FactoryID  string
	LeaseEpoch *int64
	ActorID    string
	// Size is the length the client declared, checked against the limit
	// before anything is read; -1 when unknown.
	Size int64
	Body io.Reader
}

// Service runs the artifact use cases.
type Service struct {
	k *kernel.Kernel
	// blobs may be nil: the use cases then answer errNoBlobs.
	blobs blob.Store
	// maxBytes bounds one upload (coord.Config.ArtifactMaxBytes).
	maxBytes int64
}

// New builds the service over blobs (nil when none is configured).
func New(k *kernel.Kernel, blobs blob.Store, maxBytes int64) *Service {
	return &Service{k: k, blobs: blobs, maxBytes: maxBytes}
}

// errNoBlobs is what artifact use cases answer when no blob store is
// configured (a cloud store without FLEET_ARTIFACTS_URL).
var errNoBlobs = fleet.Errorf(fleet.CodeUnavailable, "artifacts are not configured on this deployment (no blob store; see FLEET_ARTIFACTS_URL)")

// Upload stores an artifact: the bytes streamed to the blob store (never
// held whole in memory), then its pointer. A fenced holder, a bad name or
// kind, or bytes over the limit store nothing.
func (s *Service) Upload(ctx context.Context, up Upload) (*fleet.Artifact, error) {
	if s.blobs == nil {
		return nil, errNoBlobs
	}
	// The job first: one that does not exist (or is another product's) is
	// not found whatever else is wrong.
	j, err := s.k.GetJob(ctx, up.ProductID, up.JobID)
	if err != nil {
		return nil, err
	}
	var epoch int64
	switch {
	case up.FactoryID != "" && up.LeaseEpoch == nil:
		return nil, fleet.Invalid("leaseEpoch", "is required (the leaseEpoch the claim returned)")
	case up.FactoryID == "" && up.LeaseEpoch != nil:
		return nil, fleet.Invalid("leaseEpoch", "is for the holder factory: an operator's artifact belongs to no run")
	case up.LeaseEpoch != nil:
		epoch = *up.LeaseEpoch
	}
	if up.Name == "" {
		return nil, fleet.Invalid("name", "is required (the artifact's name, such as output.log)")
	}
	if err := fleet.ValidateName("name", up.Name); err != nil {
		return nil, err
	}
	kind, err := fleet.ParseArtifactKind("kind", string(up.Kind))
	if err != nil {
		return nil, err
	}
	ctype, err := fleet.NormalizeContentType("Content-Type", up.ContentType)
	if err != nil {
		return nil, err
	}
	limit := s.maxBytes
	if up.Size > limit {
		return nil, tooLarge(limit)
	}
	fence := func(j *fleet.Job) error {
		if up.FactoryID == "" {
			return nil
		}
		return j.CheckFence(up.FactoryID, epoch)
	}
	// Checked before a byte is read, so a fenced holder's upload costs
	// nothing; checked again below, atomically with the job's write.
	if err := fence(j); err != nil {
		return nil, err
	}
	body := &uploadReader{r: up.Body}
	staged, err := s.blobs.Stage(ctx, up.ProductID, body, limit)
	switch {
	case body.err != nil:
		return nil, fleet.Invalid("body", "the upload stopped before its end: %v", body.err)
	case errors.Is(err, blob.ErrTooLarge):
		return nil, tooLarge(limit)
	case err != nil:
		return nil, fmt.Errorf("stage artifact: %w", err)
	}
	defer func() { _ = staged.Discard() }()

	a := &fleet.Artifact{
		ID: fleet.ArtifactID(up.JobID, s.k.NewID("a")), JobID: up.JobID, ProductID: up.ProductID,
		Name: up.Name, Kind: kind, ContentType: ctype, Size: staged.Size(), SHA256: staged.Key().SHA256,
	}
	actor, actorID := fleet.ActorOperator, up.ActorID
	if up.FactoryID != "" {
		a.RunID = fleet.RunID(up.JobID, epoch)
		actor, actorID = fleet.ActorFactory, up.FactoryID
	}
	// The job's write is where the upload is decided: the fence holds at
	// that instant, and it records the event (internal/kernel/events.go).
	j, err = s.k.MutateJob(ctx, up.ProductID, up.JobID, func(j *fleet.Job) error {
		if err := fence(j); err != nil {
			return err
		}
		j.UpdatedAt = s.k.Now()
		return s.k.RecordEvent(ctx, j, fleet.Event{Type: fleet.EventArtifactAdded, Actor: actor, ActorID: actorID,
			Message: fleet.ArtifactMessage("added", a), Data: artifactData(a)})
	})
	if err != nil {
		return nil, err
	}
	// Decided: the rest must not be cut short by the client going away.
	ctx = context.WithoutCancel(ctx)
	a.CreatedAt = j.UpdatedAt
	doc, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encode artifact: %w", err)
	}
	if _, err := s.k.Store.Create(ctx, store.Artifacts, a.JobID, a.ID, doc); err != nil {
		s.uploadUndone(ctx, a, err)
		return nil, fmt.Errorf("create artifact %s: %w", a.ID, err)
	}
	// The pointer exists: only now may the bytes be committed (see above).
	info, err := staged.Commit(ctx)
	if err != nil {
		s.dropPointer(ctx, a)
		s.uploadUndone(ctx, a, err)
		return nil, fmt.Errorf("commit artifact %s: %w", a.ID, err)
	}
	// An operator may have deleted the pointer between its creation and
	// the commit; its release could not see bytes not yet committed, so
	// release them here.
	if _, err := s.k.Store.Read(ctx, store.Artifacts, a.JobID, a.ID); errors.Is(err, store.ErrNotFound) {
		s.releaseBlob(ctx, staged.Key(), info.Version)
	}
	return a, nil
}

// uploadUndone records that an upload decided (its artifact_added event is
// committed) then failed, so the job's history does not list an artifact
// that was never kept. A process that dies in between leaves the added
// event alone: its artifact id then reads as not found.
func (s *Service) uploadUndone(ctx context.Context, a *fleet.Artifact, cause error) {
	_, err := s.k.MutateJob(ctx, a.ProductID, a.JobID, func(j *fleet.Job) error {
		j.UpdatedAt = s.k.Now()
		return s.k.RecordEvent(ctx, j, fleet.Event{Type: fleet.EventArtifactDeleted, Actor: fleet.ActorSystem,
			Message: fleet.ArtifactMessage("not kept (the upload failed after it was accepted)", a), Data: artifactData(a)})
	})
	if err != nil {
		s.k.Log.ErrorContext(ctx, "failed upload not recorded", "artifact", a.ID, "cause", cause, "err", err)
		return
	}
}

// dropPointer removes the pointer of an upload that failed after creating
// it, and the bytes if nothing else references them.
func (s *Service) dropPointer(ctx context.Context, a *fleet.Artifact) {
	key := blob.Key{Namespace: a.ProductID, SHA256: a.SHA256}
	info, serr := s.blobs.Stat(ctx, key)
	if err := s.k.Store.Delete(ctx, store.Artifacts, a.JobID, a.ID, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.k.Log.ErrorContext(ctx, "artifact pointer of a failed upload not removed", "artifact", a.ID, "err", err)
		return
	}
	if serr == nil {
		s.releaseBlob(ctx, key, info.Version)
	}
}

// uploadReader remembers an error reading the client's bytes, so that a
// client that stopped sending is told so (400), not taken for a failing
// blob store.
type uploadReader struct {
	r   io.Reader
	err error
}

func (u *uploadReader) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if err != nil && err != io.EOF {
		u.err = err
	}
	return n, err
}

func tooLarge(limit int64) error {
	return &fleet.Error{Code: fleet.CodeTooLarge, Field: "body",
		Message: fmt.Sprintf("the artifact is larger than the limit of %d bytes (FLEET_ARTIFACT_MAX_BYTES)", limit)}
}

func artifactData(a *fleet.Artifact) json.RawMessage {
	b, _ := json.Marshal(struct {
		ArtifactID string             `json:"artifactId"`
		Name       string             `json:"name"`
		Kind       fleet.ArtifactKind `json:"kind"`
		Size       int64              `json:"size"`
		SHA256     string             `json:"sha256"`
	}{a.ID, a.Name, a.Kind, a.Size, a.SHA256})
	return b
}

// List lists a job's artifacts, oldest first.
func (s *Service) List(ctx context.Context, productID, jobID string) ([]fleet.Artifact, error) {
	if _, err := s.k.GetJob(ctx, productID, jobID); err != nil {
		return nil, err
	}
	items, err := s.k.QueryAll(ctx, store.Artifacts, store.Query{PartitionKey: jobID})
	if err != nil {
		return nil, err
	}
	out := make([]fleet.Artifact, 0, len(items))
	for _, it := range items {
		a, err := kernel.Decode[fleet.Artifact](it)
		if err != nil {
			s.k.Undecodable(ctx, store.Artifacts, it, err)
			continue
		}
		out = append(out, *a)
	}
	return out, nil
}

// Get reads an artifact's pointer. With productID set, an artifact
// of another product is not found.
func (s *Service) Get(ctx context.Context, productID, id string) (*fleet.Artifact, error) {
	jobID, ok := fleet.ArtifactJobID(id)
	if !ok {
		return nil, kernel.NotFound("artifact", id)
	}
	a, _, err := kernel.ReadDoc[fleet.Artifact](ctx, s.k.Store, store.Artifacts, jobID, id, "artifact")
	if err != nil {
		return nil, err
	}
	if productID != "" && a.ProductID != productID {
		return nil, kernel.NotFound("artifact", id)
	}
	return a, nil
}

// Open returns the artifact's bytes; the caller closes them.
func (s *Service) Open(ctx context.Context, a *fleet.Artifact) (io.ReadCloser, error) {
	if s.blobs == nil {
		return nil, errNoBlobs
	}
	r, _, err := s.blobs.Open(ctx, blob.Key{Namespace: a.ProductID, SHA256: a.SHA256})
	if errors.Is(err, blob.ErrNotFound) {
		// Only an upload that died between its pointer and its commit
		// leaves this; the pointer can be deleted.
		return nil, &fleet.Error{Code: fleet.CodeNotFound, Err: err,
			Message: fmt.Sprintf("the bytes of artifact %s are missing (its upload did not finish); delete it and upload again", a.ID)}
	}
	if err != nil {
		return nil, fmt.Errorf("open artifact %s: %w", a.ID, err)
	}
	return r, nil
}

// Delete removes an artifact's pointer, and its bytes when no other pointer
// of the product references them.
func (s *Service) Delete(ctx context.Context, operatorID string, a *fleet.Artifact) error {
	if s.blobs == nil {
		return errNoBlobs
	}
	key := blob.Key{Namespace: a.ProductID, SHA256: a.SHA256}
	// The version is read before the pointer goes (releaseBlob).
	info, serr := s.blobs.Stat(ctx, key)
	if serr != nil && !errors.Is(serr, blob.ErrNotFound) {
		return fmt.Errorf("stat artifact %s: %w", a.ID, serr)
	}
	if err := s.k.Store.Delete(ctx, store.Artifacts, a.JobID, a.ID, ""); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return kernel.NotFound("artifact", a.ID)
		}
		return fmt.Errorf("delete artifact %s: %w", a.ID, err)
	}
	ctx = context.WithoutCancel(ctx)
	if serr == nil {
		s.releaseBlob(ctx, key, info.Version)
	}
	_, err := s.k.MutateJob(ctx, a.ProductID, a.JobID, func(j *fleet.Job) error {
		j.UpdatedAt = s.k.Now()
		return s.k.RecordEvent(ctx, j, fleet.Event{Type: fleet.EventArtifactDeleted, Actor: fleet.ActorOperator, ActorID: operatorID,
			Message: fleet.ArtifactMessage("deleted", a), Data: artifactData(a)})
	})
	if err != nil {
		s.k.Log.ErrorContext(ctx, "artifact deleted, event not recorded", "artifact", a.ID, "err", err)
		return nil
	}
	return nil
}

// releaseBlob deletes the blob of key at version unless a pointer still
// references it. version must have been read before the query below runs
// (see the top of this file). A failure leaves the bytes (an orphan costs
// storage, never correctness) and is logged.
func (s *Service) releaseBlob(ctx context.Context, key blob.Key, version string) {
	q := store.Query{Where: []store.Cond{store.Eq("productId", key.Namespace), store.Eq("sha256", key.SHA256)}, Limit: 1}
	for {
		// A cross-partition page may be empty and still go on.
		page, err := s.k.Store.Query(ctx, store.Artifacts, q)
		if err != nil {
			s.k.Log.ErrorContext(ctx, "artifact bytes kept: references not counted", "blob", key.String(), "err", err)
			return
		}
		if len(page.Items) > 0 {
			return
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	err := s.blobs.Delete(ctx, key, version)
	switch {
	case errors.Is(err, blob.ErrVersion):
		// An upload of the same bytes committed meanwhile: they stay.
	case err != nil:
		s.k.Log.ErrorContext(ctx, "artifact bytes not deleted", "blob", key.String(), "err", err)
	}
}
