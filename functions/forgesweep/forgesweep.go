// Package forgesweep is the `forgesweep` timer function: it retries the
// pull request syncs the forge failed once their backoff is over (a
// delivery kicks its own sync; this catches the ones that failed or were
// lost). Idle, a tick is one point read of the ledger.
package forgesweep

import (
	"context"
	"log/slog"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "forgesweep"

// Sweeper is what the function needs of the coordinator.
type Sweeper interface {
	ForgeSweep(ctx context.Context) (int, error)
}

// Func runs one sweep.
func Func(s Sweeper, log *slog.Logger) funchost.Func {
	return funchost.TimerFunc("timer", "pull_requests_synced", log, s.ForgeSweep)
}
