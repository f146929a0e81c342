// Package reaper is the `reaper` timer function: jobs whose lease expired go
// back to the queue with leaseEpoch+1, fencing the silent holder, and keep
// their checkpoint so the next factory resumes rather than restarts.
package reaper

import (
	"context"
	"log/slog"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "reaper"

// Reaper is what the function needs of the coordinator.
type Reaper interface {
	Reap(ctx context.Context) (int, error)
}

// Func runs one reaper pass.
func Func(r Reaper, log *slog.Logger) funchost.Func {
	return funchost.TimerFunc("timer", "reaped", log, r.Reap)
}
