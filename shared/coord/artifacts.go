package coord

import (
	"context"
	"io"

	"github.com/gigafactory/fleet/shared/coord/artifacts"
	"github.com/gigafactory/fleet/shared/fleet"
)

// A job's artifacts live in coord/artifacts; these are their façade.

// UploadArtifact stores an artifact: the bytes streamed to the blob store
// (never held whole in memory), then its pointer. A fenced holder, a bad
// name or kind, or bytes over Config.ArtifactMaxBytes store nothing.
func (c *Coordinator) UploadArtifact(ctx context.Context, up artifacts.Upload) (*fleet.Artifact, error) {
	return c.artifacts.Upload(ctx, up)
}

// Artifacts lists a job's artifacts, oldest first.
func (c *Coordinator) Artifacts(ctx context.Context, productID, jobID string) ([]fleet.Artifact, error) {
	return c.artifacts.List(ctx, productID, jobID)
}

// GetArtifact reads an artifact's pointer. With productID set, an artifact
// of another product is not found.
func (c *Coordinator) GetArtifact(ctx context.Context, productID, id string) (*fleet.Artifact, error) {
	return c.artifacts.Get(ctx, productID, id)
}

// OpenArtifact returns the artifact's bytes; the caller closes them.
func (c *Coordinator) OpenArtifact(ctx context.Context, a *fleet.Artifact) (io.ReadCloser, error) {
	return c.artifacts.Open(ctx, a)
}

// DeleteArtifact removes an artifact's pointer, and its bytes when no other
// pointer of the product references them.
func (c *Coordinator) DeleteArtifact(ctx context.Context, operatorID string, a *fleet.Artifact) error {
	return c.artifacts.Delete(ctx, operatorID, a)
}
