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

// waitWalkLimit bounds the unfinished jobs checkNoWaitCycle reads: a whole
// tree and the dependencies of one job.
const waitWalkLimit = fleet.MaxTreeJobs + fleet.MaxDeps

// checkNoWaitCycle refuses a new child's dependency that waits on the
// child's parent: the parent itself, an ancestor (it waits for its
// descendants), or a job that reaches one through the deps and children it
// waits for. The parent waits for the child, so neither would ever move.
// Siblings created by the same request (pending) are new: nothing waits on
// them yet, and their own deps are checked as theirs.
func (s *Service) checkNoWaitCycle(ctx context.Context, parent *fleet.Job, specs []childSpec, existing []*fleet.Job, pending map[string]bool) error {
	ancestors := map[string]bool{parent.ID: true}
	for a := parent; a.ParentID != "" && !ancestors[a.ParentID]; {
		ancestors[a.ParentID] = true
		next, err := s.k.GetJob(ctx, a.ProductID, a.ParentID)
		if errors.Is(err, fleet.ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		a = next
	}
	// Shared by every dependency of the request: a job read without
	// reaching an ancestor reaches none from anywhere else either.
	seen := map[string]bool{}
	for i, spec := range specs {
		if existing[i] != nil {
			continue
		}
		for d, dep := range spec.m.Deps {
			field := fmt.Sprintf("%s.deps[%d]", spec.field, d)
			switch {
			case pending[dep]:
				continue
			case dep == parent.ID:
				return fleet.Invalid(field, "is the parent %s, which waits for its children: the two would wait for each other for ever", dep)
			case ancestors[dep]:
				return fleet.Invalid(field, "is %s, an ancestor of the parent, which waits for its descendants: the two would wait for each other for ever", dep)
			}
			if err := s.walkWaits(ctx, parent.ProductID, field, dep, ancestors, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// walkWaits refuses (naming field) a dependency from which the deps and
// children unfinished jobs wait for lead to one of ancestors. A finished
// job waits for nothing; a walk past waitWalkLimit jobs is refused too,
// as one that cannot be told safe.
func (s *Service) walkWaits(ctx context.Context, productID, field, from string, ancestors, seen map[string]bool) error {
	stack := []string{from}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[id] {
			continue
		}
		if seen[id] = true; len(seen) > waitWalkLimit {
			return fleet.Invalid(field, "job %s waits, through its deps and children, on more than %d unfinished jobs: too many to check that none waits for this child's parent", from, waitWalkLimit)
		}
		j, err := s.k.GetJob(ctx, productID, id)
		if errors.Is(err, fleet.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if j.Stage.Terminal() {
			continue
		}
		for _, next := range slices.Concat(j.Deps, j.Children) {
			if ancestors[next] {
				return fleet.Invalid(field, "job %s waits, through its deps and children, on %s, which waits for this child: they would wait for each other for ever", from, next)
			}
			stack = append(stack, next)
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
