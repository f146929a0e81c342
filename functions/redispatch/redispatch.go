// Package redispatch is the `redispatch` timer function: it routes queued
// jobs whose dispatch is missing (a failed change-feed batch, a job that was
// unroutable or backing off) or went nowhere (target gone, stale or down, or
// not accepted within FLEET_REDISPATCH_AFTER), with a new dispatchEpoch.
package redispatch

import (
	"context"
	"log/slog"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "redispatch"

// Redispatcher is what the function needs of the coordinator.
type Redispatcher interface {
	Redispatch(ctx context.Context) (int, error)
}

// Func runs one sweep.
func Func(r Redispatcher, log *slog.Logger) funchost.Func {
	return funchost.TimerFunc("timer", "redispatched", log, r.Redispatch)
}
