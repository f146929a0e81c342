// Package echosweep is the `echosweep` timer function: it re-drives tracker
// echo deliveries that are due — a retry whose backoff passed, an event
// that was missing, a job whose change-feed batch was lost. A change-feed
// trigger runs only when documents change, so a webhook that comes back
// while its jobs are idle would otherwise wait for their next change.
package echosweep

import (
	"context"
	"log/slog"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "echosweep"

// Sweeper is what the function needs of the coordinator.
type Sweeper interface {
	EchoSweep(ctx context.Context) (int, error)
}

// Func runs one sweep.
func Func(s Sweeper, log *slog.Logger) funchost.Func {
	return funchost.TimerFunc("timer", "delivered", log, s.EchoSweep)
}
