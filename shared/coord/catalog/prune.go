package catalog

import (
	"context"
	"errors"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Prune deregisters every static factory silent for longer than PruneAfter
// as DELETE /fleet/factories/{id} does (Deregister: its record leaves the
// fleet, its tokens are revoked), logs it and counts it, and returns how
// many it pruned. Without it a dead host's record lingers in the fleet map
// and its token stays valid for good.
//
// Never pruned: an elastic pool (scaled to zero it sends nothing, which is
// not death), and a factory holding a lease (its job is the reaper's to
// take back; the factory is looked at again a LeaseTTL later). A heartbeat
// between the scan and the delete spares the factory: the delete is
// conditional on the revision judged.
//
// Idle, a tick costs one point read: the scan leaves a quiet mark that
// holds until the earliest time a factory could fall due (kernel/ledger.go
// argues why no counter is needed), so heartbeats pay nothing for it.
func (c *Service) Prune(ctx context.Context) (int, error) {
	// Read before the ledger: a factory the scan misses was enrolled or
	// heard from after this, so it falls due after readAt+PruneAfter.
	readAt := c.k.Now()
	skip, quiet := c.k.Quiet(ctx, kernel.SweepPrune)
	if skip {
		return 0, nil
	}
	all, err := c.readFactories(ctx)
	if err != nil {
		return 0, err
	}
	now := c.k.Now()
	until := readAt.Add(c.cfg.PruneAfter)
	n := 0
	var errs []error
	for _, f := range all {
		due, ok := c.pruneDue(f)
		switch {
		case !ok:
			continue
		case now.Before(due):
			until = earliest(until, due)
			continue
		}
		held, err := c.life.HoldsLease(ctx, f.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if held {
			until = earliest(until, now.Add(c.cfg.LeaseTTL))
			continue
		}
		pruned, err := c.prune(ctx, f)
		if pruned {
			n++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return n, errors.Join(errs...)
	}
	c.k.MarkQuietUntil(ctx, quiet, until)
	return n, nil
}

// prune deregisters f unless, read again for the delete, it is no longer
// the silent static factory the scan judged (a heartbeat, a new enrolment).
func (c *Service) prune(ctx context.Context, f *fleet.Factory) (bool, error) {
	gone, err := c.deregister(ctx, f.ID, func(cur *fleet.Factory) bool {
		due, ok := c.pruneDue(cur)
		return !ok || c.k.Now().Before(due) || cur.Enrollment != f.Enrollment
	})
	if errors.Is(err, errKept) || errors.Is(err, fleet.ErrNotFound) {
		return false, nil
	}
	if gone == nil {
		return false, err
	}
	c.k.Counters.FactoriesPruned.Add(1)
	c.k.Log.InfoContext(ctx, "pruned a silent static factory", "factory", gone.ID,
		"lastSeen", lastSeen(gone), "silentFor", c.k.Now().Sub(lastSeen(gone)).Round(time.Second).String())
	return true, err
}

// pruneDue is when f falls due for pruning; ok is false for a factory that
// never does (an elastic pool).
func (c *Service) pruneDue(f *fleet.Factory) (due time.Time, ok bool) {
	if f.Kind == fleet.KindElastic {
		return time.Time{}, false
	}
	return lastSeen(f).Add(c.cfg.PruneAfter), true
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
