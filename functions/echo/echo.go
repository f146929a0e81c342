// Package echo is the `echo` function: a Cosmos DB change-feed trigger on
// the jobs container with its own lease prefix (its checkpoints never mix
// with dispatch's), which sends the new events of tracked jobs to their
// product's tracker webhook. It hands the batch's tracked jobs to their
// products' delivery lanes (coord, echolanes.go) and returns at once: the
// next batch, whatever products it holds, never waits on any webhook. A
// delivery that fails is recorded on the job's echo state with its backoff;
// the echosweep timer re-drives what is due.
package echo

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/functions/dispatch"
	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "echo"

// untrackedBatch is the log of a batch that names no tracker.
const untrackedBatch = "batch without a tracked job"

// Echoer is what the function needs of the coordinator.
type Echoer interface {
	EchoChanged(ctx context.Context, items []store.Item, mode echo.Mode) (echo.Run, error)
}

// Func handles one batch of changed jobs.
func Func(e Echoer, log *slog.Logger) funchost.Func {
	return func(ctx context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		raw, ok := inv.Data[dispatch.DocumentsBinding]
		if !ok {
			return nil, fmt.Errorf("%w: no %q in Data", funchost.ErrBadPayload, dispatch.DocumentsBinding)
		}
		if echo.Untracked(raw) {
			// Nothing to hand over, and the batch is not split: at steady
			// load nearly every batch is such (a version of a job no
			// tracker follows), and dispatch splits the same batch.
			return &funchost.Result{Outputs: map[string]any{}, Logs: []string{untrackedBatch}, ReturnValue: 0}, nil
		}
		// The same documents as dispatch's: changed jobs.
		items, err := dispatch.Items(raw)
		if err != nil {
			return nil, err
		}
		run, err := e.EchoChanged(ctx, items, echo.HandOff)
		if err != nil {
			// A document that does not decode: the host checkpoints past
			// the batch, and the sweep finds the jobs by their open echo
			// state.
			log.ErrorContext(ctx, "echo batch failed", "documents", len(items), "err", err)
			return nil, fmt.Errorf("echo batch of %d: %w", len(items), err)
		}
		return &funchost.Result{
			Outputs:     map[string]any{},
			Logs:        []string{fmt.Sprintf("batch of %d, %d tracked jobs handed to their delivery lanes", len(items), run.Jobs)},
			ReturnValue: run.Jobs,
		}, nil
	}
}
