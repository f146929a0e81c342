package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/echo"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// The tracker bridge's use cases live in coord/echo; these are its façade.

// Ingest turns a tracker item into a job (created, updated while not
// started, or unchanged).
func (c *Coordinator) Ingest(ctx context.Context, req echo.IngestRequest) (*fleet.Job, echo.IngestOutcome, error) {
	return c.echo.Ingest(ctx, req)
}

// SubmitManifest is the submit path for a parsed manifest (echo.Lifecycle).
func (l lifecycle) SubmitManifest(ctx context.Context, productID string, m *fleet.Manifest, mark func(j *fleet.Job) error) (*fleet.Job, bool, error) {
	return l.c.submitManifest(ctx, productID, m, mark)
}

// EchoChanged hands the tracked jobs among changed job documents (a
// change-feed batch) to their products' delivery lanes; with echo.Await it
// waits for their deliveries too.
func (c *Coordinator) EchoChanged(ctx context.Context, items []store.Item, mode echo.Mode) (echo.Run, error) {
	return c.echo.Changed(ctx, items, mode)
}

// EchoSweep re-drives delivery for every open tracked job that is due and
// returns how many events were delivered.
func (c *Coordinator) EchoSweep(ctx context.Context) (int, error) { return c.echo.Sweep(ctx) }

// Echo is a job's delivery state (GET /fleet/jobs/{id}/echo).
func (c *Coordinator) Echo(ctx context.Context, productID, jobID string) (*echo.View, error) {
	return c.echo.Get(ctx, productID, jobID)
}

// ResendEcho re-sends a job's events from the first (an operator's resend).
func (c *Coordinator) ResendEcho(ctx context.Context, productID, jobID, operator string) (*echo.View, error) {
	return c.echo.Resend(ctx, productID, jobID, operator)
}
