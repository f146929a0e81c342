// Package gcsweep is the `gcsweep` timer function: it sends each factory the
// terminal jobs of the repos it holds, so the factory deletes their merged
// `aq/job/*` and their `aq/wip/*` branches and prunes their worktrees.
package gcsweep

import (
	"context"
	"log/slog"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "gcsweep"

// Sweeper is what the function needs of the coordinator.
type Sweeper interface {
	GCSweep(ctx context.Context) (int, error)
}

// Func runs one sweep.
func Func(s Sweeper, log *slog.Logger) funchost.Func {
	return funchost.TimerFunc("timer", "gc_requests", log, s.GCSweep)
}
