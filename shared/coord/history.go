package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/live"
	"github.com/gigafactory/fleet/shared/fleet"
)

// A job's history and the live streams live in coord/live; these are
// their façade.

// Events lists a job's events after seq after, oldest first (with any the
// job holds that the events container lacks yet, written now too).
func (c *Coordinator) Events(ctx context.Context, productID, jobID string, after int64, limit int) ([]fleet.Event, error) {
	return c.live.Events(ctx, productID, jobID, after, limit)
}

// Runs lists a job's runs, the one in progress (if any) last.
func (c *Coordinator) Runs(ctx context.Context, productID, jobID string) ([]fleet.Run, error) {
	return c.live.Runs(ctx, productID, jobID)
}

// Subscribe follows a job or a product from now on.
func (c *Coordinator) Subscribe(ctx context.Context, w live.Watch) (*live.Subscription, error) {
	return c.live.Subscribe(ctx, w)
}

// Replay reads the product's changes after from up to the feeds' current
// ends, calling emit per page, and returns the position reached.
func (c *Coordinator) Replay(ctx context.Context, from live.Position, productID string, emit func([]live.Change, live.Position) error) (live.Position, error) {
	return c.live.Replay(ctx, from, productID, emit)
}
