// Package prune is the `prune` timer function. Static factories silent past
// FLEET_STALE_AFTER are stale, past FLEET_DOWN_AFTER down, but that is now
// derived on every read of a factory (coord.Prune explains), so the tick
// has nothing to persist and costs no store operation; it stays so that
// deployed schedules keep working.
package prune

import (
	"context"
	"log/slog"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "prune"

// Pruner is what the function needs of the coordinator.
type Pruner interface {
	Prune(ctx context.Context) (int, error)
}

// Func runs one prune pass.
func Func(p Pruner, log *slog.Logger) funchost.Func {
	return funchost.TimerFunc("timer", "health_changed", log, p.Prune)
}
