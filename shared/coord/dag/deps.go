package dag

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// A job's dependencies (its manifest's deps, judged by its depsMode) are
// jobs of its product it waits for in blocked. A dependency that ends
// settles its dependants from its own ending transition (settleOnEnd);
// UnblockReady, run by the redispatch sweep, catches what a crash in
// between left.

// CheckDeps checks that every dependency of job id exists (or is in
// pending, created first by the same request) and is not the job itself.
func (s *Service) CheckDeps(ctx context.Context, productID, id string, deps []string, pending map[string]bool) error {
	for i, dep := range deps {
		if dep == id {
			return fleet.Invalid(fmt.Sprintf("deps[%d]", i), "a job cannot depend on itself")
		}
		if pending[dep] {
			continue
		}
		if _, err := s.k.GetJob(ctx, productID, dep); err != nil {
			if errors.Is(err, fleet.ErrNotFound) {
				return fleet.Invalid(fmt.Sprintf("deps[%d]", i), "job %s not found in product %s", dep, productID)
			}
			return err
		}
	}
	return nil
}

// RegisterDependant marks each unshipped dependency as having dependants (so
// shipping it looks for them) and reports whether the deps are satisfied.
// CheckDeps has found every one: a rejected submit changes nothing, not even
// the jobs it named.
func (s *Service) RegisterDependant(ctx context.Context, productID, id string, deps []string, mode fleet.DepsMode) (bool, error) {
	if len(deps) == 0 {
		return true, nil
	}
	shipped := 0
	for i, dep := range deps {
		var depStage fleet.Stage
		_, err := s.k.MutateJob(ctx, productID, dep, func(d *fleet.Job) error {
			depStage = d.Stage
			if d.Stage == fleet.StageShipped || d.HasDependants {
				return kernel.ErrNoChange
			}
			d.HasDependants = true
			return nil
		})
		if errors.Is(err, fleet.ErrNotFound) {
			return false, fleet.Invalid(fmt.Sprintf("deps[%d]", i), "job %s not found in product %s", dep, productID)
		}
		if err != nil {
			return false, err
		}
		if depStage == fleet.StageShipped {
			shipped++
		}
	}
	return depsMet(mode, shipped, len(deps)), nil
}

func depsMet(mode fleet.DepsMode, shipped, total int) bool {
	return depsVerdictOf(mode, shipped, 0, total) == Ready
}

// ReasonDependencyFailed is the failure reason of a job whose dependencies
// can no longer be satisfied; its event has the same name.
const ReasonDependencyFailed = string(fleet.EventDependencyFailed)

// Verdict is where what a job waits on stands (its dependencies, its
// children).
type Verdict int

const (
	Waiting Verdict = iota // not met yet, but may still be
	Ready                  // met: the job may be queued
	Broken                 // can never be met: fail the job
)

// depsVerdictOf decides from how many of total dependencies shipped and
// how many ended unshipped (failed, dead_letter, cancelled).
func depsVerdictOf(mode fleet.DepsMode, shipped, ended, total int) Verdict {
	if mode == fleet.DepsAny {
		switch {
		case shipped > 0:
			return Ready
		case ended == total:
			return Broken
		}
		return Waiting
	}
	switch {
	case shipped == total:
		return Ready
	case ended > 0:
		return Broken
	}
	return Waiting
}

// endedUnshipped reports a stage a dependency never ships from without an
// operator's requeue.
func endedUnshipped(s fleet.Stage) bool { return s.Terminal() && s != fleet.StageShipped }

// Lookup reads the stage of one job another waits on (coord's Metrics
// memoises it per scrape).
type Lookup func(ctx context.Context, productID, id string) (fleet.Stage, error)

// Stage reads the stage of job id, one a job waits on.
func (s *Service) Stage(ctx context.Context, productID, id string) (fleet.Stage, error) {
	d, err := s.k.GetJob(ctx, productID, id)
	if err != nil {
		return "", err
	}
	return d.Stage, nil
}

// depsState reads j's dependencies now. With the verdict Broken, why
// names a dependency that ended unshipped.
func (s *Service) depsState(ctx context.Context, j *fleet.Job, lookup Lookup) (v Verdict, why string, err error) {
	return awaitVerdict(ctx, j.ProductID, j.Deps, j.DepsMode, "dependency", lookup)
}

// awaitVerdict reads the stages of the jobs ids names (a job's
// dependencies or its children) and judges them by mode; why names the
// first that ended unshipped, as "<noun> <id> ended <stage>".
func awaitVerdict(ctx context.Context, productID string, ids []string, mode fleet.DepsMode, noun string, lookup Lookup) (Verdict, string, error) {
	shipped, ended, why := 0, 0, ""
	for _, id := range ids {
		st, err := lookup(ctx, productID, id)
		if err != nil {
			return Waiting, "", err
		}
		switch {
		case st == fleet.StageShipped:
			shipped++
		case endedUnshipped(st):
			ended++
			if why == "" {
				why = fmt.Sprintf("%s %s ended %s", noun, id, st)
			}
		}
	}
	return depsVerdictOf(mode, shipped, ended, len(ids)), why, nil
}

// settleDependants settles the blocked jobs waiting on ended, a job that
// just reached a terminal stage: queued when their dependencies are now
// met, failed when they can no longer be.
func (s *Service) settleDependants(ctx context.Context, ended *fleet.Job) {
	if !ended.HasDependants {
		return
	}
	blocked, _, err := s.k.ScanJobs(ctx, store.Query{PartitionKey: ended.ProductID, Where: []store.Cond{store.Eq("stage", string(fleet.StageBlocked))}})
	if err != nil {
		s.k.Log.ErrorContext(ctx, "settle dependants: list blocked jobs", "product", ended.ProductID, "err", err)
		return
	}
	// The ended job's stage is the one just written, and terminal: it is
	// not read back once per dependant.
	lookup := func(ctx context.Context, productID, id string) (fleet.Stage, error) {
		if id == ended.ID {
			return ended.Stage, nil
		}
		return s.Stage(ctx, productID, id)
	}
	for _, j := range blocked {
		if slices.Contains(j.Deps, ended.ID) {
			s.settleBlockedBy(ctx, j, lookup)
		}
	}
}

// UnblockReady settles every blocked job: queued when its dependencies are
// met, failed (dependency_failed) when they can no longer be. Reaching a
// terminal stage settles a job's dependants at once; this pass, run by the
// redispatch sweep, catches the ones that pass missed (the process died
// between the two, or the store failed then). It returns how many jobs it
// moved and how many were blocked, counting the documents it skipped as
// undecodable (kernel.JobPage): blocked, for all it knows.
func (s *Service) UnblockReady(ctx context.Context) (unblocked, blocked int, err error) {
	jobs, skipped, err := s.k.ScanJobs(ctx, store.Query{Where: []store.Cond{store.Eq("stage", string(fleet.StageBlocked))}})
	if err != nil {
		return 0, 0, err
	}
	for _, j := range jobs {
		if _, ok := s.SettleBlocked(ctx, j); ok {
			unblocked++
		}
	}
	return unblocked, len(jobs) + skipped, nil
}

// SettleBlocked queues j if its dependencies are met now and fails it if
// they can never be. It returns the job and true when it moved it.
func (s *Service) SettleBlocked(ctx context.Context, j *fleet.Job) (*fleet.Job, bool) {
	return s.settleBlockedBy(ctx, j, s.Stage)
}

// settleBlockedBy is SettleBlocked reading dependency stages through lookup.
func (s *Service) settleBlockedBy(ctx context.Context, j *fleet.Job, lookup Lookup) (*fleet.Job, bool) {
	v, why, err := s.WaitState(ctx, j, lookup)
	if err != nil {
		s.k.Log.ErrorContext(ctx, "settle blocked job: read dependencies", "job", j.ID, "err", err)
		return nil, false
	}
	var after *fleet.Job
	switch {
	case v == Ready && j.Kind == fleet.KindComposite && len(j.Children) > 0:
		after, err = s.lc.Move(ctx, Move{ProductID: j.ProductID, JobID: j.ID, To: fleet.StageShipped, Actor: fleet.ActorSystem, Event: fleet.EventUnblocked,
			Message: fmt.Sprintf("every one of its %d children shipped: the composite job ships", len(j.Children)),
			Guard:   sameChildren(j)})
	case v == Ready:
		after, err = s.lc.Move(ctx, Move{ProductID: j.ProductID, JobID: j.ID, To: fleet.StageQueued, Actor: fleet.ActorSystem, Event: fleet.EventUnblocked,
			Guard: sameChildren(j)})
	case v == Broken:
		after, err = s.lc.Move(ctx, Move{ProductID: j.ProductID, JobID: j.ID, To: fleet.StageFailed, Actor: fleet.ActorSystem,
			Event: fleet.EventDependencyFailed, Message: why,
			Effect: func(j *fleet.Job) {
				j.LastFailure = &fleet.Failure{Reason: ReasonDependencyFailed, At: j.UpdatedAt}
			}})
	default:
		return nil, false
	}
	if err != nil {
		// A conflict: the job left blocked meanwhile (another pass, an
		// operator), so there is nothing left to settle.
		if !errors.Is(err, fleet.ErrConflict) {
			s.k.Log.ErrorContext(ctx, "settle blocked job", "job", j.ID, "err", err)
		}
		return nil, false
	}
	return after, true
}
