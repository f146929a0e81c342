// Package prune is the `prune` timer function: static factories silent past
// FLEET_STALE_AFTER turn stale, past FLEET_DOWN_AFTER down. Elastic pools are
// never judged by silence, since a pool scaled to zero sends nothing.
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
