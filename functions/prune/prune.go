// Package prune is the `prune` timer function: it deregisters static
// factories silent for longer than FLEET_PRUNE_AFTER and holding no lease,
// as DELETE /fleet/factories/{id} would, so a dead host's record leaves the
// fleet map and its token stops working. Elastic pools are never pruned.
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
	return funchost.TimerFunc("timer", "factories_pruned", log, p.Prune)
}
