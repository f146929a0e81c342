package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/runlogs"
	"github.com/gigafactory/fleet/shared/runlog"
)

// A run's live output lives in coord/runlogs; these are its façade.

// AppendLog stores a chunk of the holder's run log (fenced, idempotent by
// offset; a gap is a conflict naming offset).
func (c *Coordinator) AppendLog(ctx context.Context, a runlogs.Append) (runlog.Info, error) {
	return c.runlogs.Append(ctx, a)
}

// LogRun picks the run a read of a job's log means (runlogs.Service.Resolve).
func (c *Coordinator) LogRun(ctx context.Context, productID, jobID string, epoch *int64) (runlogs.Run, error) {
	return c.runlogs.Resolve(ctx, productID, jobID, epoch)
}

// LogRunEnded reports whether the run of key is over (a point read of the job).
func (c *Coordinator) LogRunEnded(ctx context.Context, key runlog.Key) (bool, error) {
	return c.runlogs.Ended(ctx, key)
}

// StatLog is where a run's log stands.
func (c *Coordinator) StatLog(ctx context.Context, key runlog.Key) (runlog.Info, error) {
	return c.runlogs.Stat(ctx, key)
}

// ReadLog reads a run's log from off.
func (c *Coordinator) ReadLog(ctx context.Context, key runlog.Key, off int64, limit int) ([]byte, int64, runlog.Info, error) {
	return c.runlogs.Read(ctx, key, off, limit)
}

// LogWoken is closed by the next append this process stores for key; the
// waiter calls release once it stops waiting on it.
func (c *Coordinator) LogWoken(key runlog.Key) (woken <-chan struct{}, release func()) {
	return c.runlogs.Woken(key)
}
