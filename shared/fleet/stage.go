package fleet

import (
	"fmt"
	"slices"
	"strings"
)

// Stage is where a job is in its life.
type Stage string

// Stages of the overview seed §4, plus cancelled.
const (
	StageQueued     Stage = "queued"
	StageBlocked    Stage = "blocked"
	StageAssigned   Stage = "assigned"
	StageBuilding   Stage = "building"
	StageReview     Stage = "review"
	StageTesting    Stage = "testing"
	StageShipped    Stage = "shipped"
	StageFailed     Stage = "failed"
	StageDeadLetter Stage = "dead_letter"
	StageCancelled  Stage = "cancelled"
)

// Stages lists every stage in lifecycle order.
var Stages = []Stage{StageQueued, StageBlocked, StageAssigned, StageBuilding, StageReview,
	StageTesting, StageShipped, StageFailed, StageDeadLetter, StageCancelled}

// ParseStage validates a stage name coming from a client.
func ParseStage(field, s string) (Stage, error) {
	if st := Stage(s); slices.Contains(Stages, st) {
		return st, nil
	}
	names := make([]string, len(Stages))
	for i, st := range Stages {
		names[i] = string(st)
	}
	return "", Invalid(field, "unknown stage %q (want one of %s)", s, strings.Join(names, ", "))
}

// Terminal reports whether nothing further happens to a job in this stage
// without an operator.
func (s Stage) Terminal() bool {
	return s == StageShipped || s == StageDeadLetter || s == StageCancelled || s == StageFailed
}

// Leased reports whether a job in this stage is held by a factory under a lease.
func (s Stage) Leased() bool { return s == StageAssigned || s == StageBuilding }

// Actor is who asks for a transition.
type Actor string

// Actors.
const (
	// ActorFactory is the factory that holds (or, for a claim, takes) the lease.
	ActorFactory  Actor = "factory"
	ActorOperator Actor = "operator"
	ActorSystem   Actor = "system"
)

// Actors lists every actor.
func Actors() []Actor { return []Actor{ActorFactory, ActorOperator, ActorSystem} }

// LeaseEffect is what a transition does to the job's lease.
type LeaseEffect int

// Lease effects. Revoke also bumps leaseEpoch, which fences the old holder.
const (
	LeaseNone    LeaseEffect = iota // no lease before or after
	LeaseAcquire                    // a factory takes the lease; leaseEpoch+1
	LeaseKeep                       // the holder keeps it
	LeaseRelease                    // the holder gives it up
	LeaseRevoke                     // taken away from the holder; leaseEpoch+1
)

func (e LeaseEffect) String() string {
	names := [...]string{"none", "acquire", "keep", "release", "revoke"}
	if e < 0 || int(e) >= len(names) {
		return fmt.Sprintf("LeaseEffect(%d)", int(e))
	}
	return names[e]
}

// Rule is one legal transition.
type Rule struct {
	From, To Stage
	Actor    Actor
	Lease    LeaseEffect
	// Why names the transition in events and docs.
	Why string
}

// Transitions is the stage machine: the only legal moves, who may make them,
// and what each does to the lease. Anything not listed is rejected.
//
// Terminal stages (shipped, failed, dead_letter, cancelled) are left only by
// an operator's requeue. A retryable failure with attempts left goes straight
// back to queued and one with none left straight to dead_letter, so a job in
// failed is there for an operator to look at and nothing moves it on its own.
var Transitions = []Rule{
	{StageQueued, StageBlocked, ActorSystem, LeaseNone, "unmet dependencies"},
	{StageBlocked, StageQueued, ActorSystem, LeaseNone, "dependencies satisfied"},
	// Nothing waits forever: a dependency that ended unshipped fails the
	// jobs that can no longer start.
	{StageBlocked, StageFailed, ActorSystem, LeaseNone, "dependency_failed"},
	// A job given children waits for them in blocked. A holder that posts
	// children gives its seat back: the job needs no factory until they
	// have shipped.
	{StageQueued, StageBlocked, ActorOperator, LeaseNone, "waiting on its children"},
	{StageAssigned, StageBlocked, ActorFactory, LeaseRelease, "children posted: waiting on them without a seat"},
	{StageBuilding, StageBlocked, ActorFactory, LeaseRelease, "children posted: waiting on them without a seat"},
	// A composite job has no step of its own: it ships with its children.
	{StageBlocked, StageShipped, ActorSystem, LeaseNone, "composite: every child shipped"},
	{StageQueued, StageAssigned, ActorFactory, LeaseAcquire, "claimed"},
	{StageAssigned, StageBuilding, ActorFactory, LeaseKeep, "build started"},
	// Handing the work to a gate ends the factory's part: the lease goes, so a
	// factory that exits after delivering is not reaped back into the queue.
	{StageBuilding, StageReview, ActorFactory, LeaseRelease, "delivered for review"},
	{StageBuilding, StageTesting, ActorFactory, LeaseRelease, "delivered for testing"},
	{StageBuilding, StageFailed, ActorFactory, LeaseRelease, "failed"},
	{StageAssigned, StageFailed, ActorFactory, LeaseRelease, "failed"},
	// A job with no gate may be shipped by the factory that built it.
	{StageBuilding, StageShipped, ActorFactory, LeaseRelease, "shipped by the factory"},
	{StageBuilding, StageQueued, ActorFactory, LeaseRelease, "released by the holder"},
	{StageAssigned, StageQueued, ActorFactory, LeaseRelease, "released by the holder"},
	{StageBuilding, StageDeadLetter, ActorFactory, LeaseRelease, "failed, retries exhausted"},
	{StageAssigned, StageDeadLetter, ActorFactory, LeaseRelease, "failed, retries exhausted"},
	{StageAssigned, StageQueued, ActorSystem, LeaseRevoke, "lease expired, or preemption forced"},
	{StageBuilding, StageQueued, ActorSystem, LeaseRevoke, "lease expired, or preemption forced"},
	// A job whose runs keep dying (its holder crashes or hangs every time)
	// stops being retried once its attempts run out.
	{StageAssigned, StageDeadLetter, ActorSystem, LeaseRevoke, "lease expired, attempts exhausted"},
	{StageBuilding, StageDeadLetter, ActorSystem, LeaseRevoke, "lease expired, attempts exhausted"},
	{StageBuilding, StageFailed, ActorSystem, LeaseRevoke, "budget exceeded"},
	{StageReview, StageTesting, ActorSystem, LeaseNone, "review quorum reached"},
	{StageReview, StageTesting, ActorOperator, LeaseNone, "approved"},
	// A reviewer's rejection: back to the queue with the comment as
	// feedback (no attempt spent), or failed when the gate says onReject: fail.
	{StageReview, StageQueued, ActorSystem, LeaseNone, "rejected in review: back to the queue with the feedback"},
	{StageReview, StageFailed, ActorSystem, LeaseNone, "rejected in review"},
	{StageReview, StageFailed, ActorOperator, LeaseNone, "rejected"},
	{StageTesting, StageFailed, ActorOperator, LeaseNone, "rejected"},
	{StageTesting, StageShipped, ActorOperator, LeaseNone, "shipped"},
	{StageReview, StageShipped, ActorOperator, LeaseNone, "shipped past review"},
	{StageFailed, StageQueued, ActorOperator, LeaseNone, "requeued"},
	{StageDeadLetter, StageQueued, ActorOperator, LeaseNone, "requeued"},
	{StageCancelled, StageQueued, ActorOperator, LeaseNone, "requeued"},
	// A requeued job whose dependencies have not shipped waits for them.
	{StageFailed, StageBlocked, ActorOperator, LeaseNone, "requeued, waiting on dependencies"},
	{StageDeadLetter, StageBlocked, ActorOperator, LeaseNone, "requeued, waiting on dependencies"},
	{StageCancelled, StageBlocked, ActorOperator, LeaseNone, "requeued, waiting on dependencies"},
	{StageQueued, StageCancelled, ActorOperator, LeaseNone, "cancelled"},
	{StageBlocked, StageCancelled, ActorOperator, LeaseNone, "cancelled"},
	// A leased job is not cancelled by the operator's request itself: the
	// holder is asked (cancelRequested), stops its engine, checkpoints and
	// acknowledges by releasing; without an acknowledgement within the
	// cancel grace the system revokes the lease and cancels the job anyway.
	{StageAssigned, StageCancelled, ActorFactory, LeaseRelease, "cancel acknowledged"},
	{StageBuilding, StageCancelled, ActorFactory, LeaseRelease, "cancel acknowledged"},
	{StageAssigned, StageCancelled, ActorSystem, LeaseRevoke, "cancel forced: not acknowledged within the grace"},
	{StageBuilding, StageCancelled, ActorSystem, LeaseRevoke, "cancel forced: not acknowledged within the grace"},
	{StageReview, StageCancelled, ActorOperator, LeaseNone, "cancelled"},
	{StageTesting, StageCancelled, ActorOperator, LeaseNone, "cancelled"},
	// A delivered job's pull request (API.md "Pull requests"): a review
	// asking for changes or a failing check sends it back for another
	// iteration (review -> queued is the gate's own rejection above);
	// closed unmerged it is cancelled; merged by anyone it is shipped.
	{StageTesting, StageQueued, ActorSystem, LeaseNone, "the forge's feedback: another iteration"},
	{StageReview, StageCancelled, ActorSystem, LeaseNone, "its pull request was closed"},
	{StageTesting, StageCancelled, ActorSystem, LeaseNone, "its pull request was closed"},
	{StageReview, StageShipped, ActorSystem, LeaseNone, "its pull request was merged"},
	{StageTesting, StageShipped, ActorSystem, LeaseNone, "its pull request was merged"},
	// Merged or closed while the job waits for its next iteration: the
	// iteration is cancelled (a running one's holder is asked to stop and
	// acknowledges as for an operator's cancel).
	{StageQueued, StageCancelled, ActorSystem, LeaseNone, "its pull request was merged or closed during an iteration"},
	{StageBlocked, StageCancelled, ActorSystem, LeaseNone, "its pull request was merged or closed during an iteration"},
}

type transitionKey struct {
	from, to Stage
	actor    Actor
}

// gateSkipping are the moves into testing or shipped that a job with a
// review gate may not make: only the gate's quorum (the system's
// review -> testing) lets it past. An operator's approval is one vote, not
// the quorum, and shipping out of review skips the gate outright.
var gateSkipping = map[transitionKey]bool{
	{StageBuilding, StageTesting, ActorFactory}: true,
	{StageBuilding, StageShipped, ActorFactory}: true,
	{StageReview, StageTesting, ActorOperator}:  true,
	{StageReview, StageShipped, ActorOperator}:  true,
	// Composite jobs carry no gate (the manifest refuses one); should one
	// be given a gate anyway, shipping it with its children would skip it.
	{StageBlocked, StageShipped, ActorSystem}: true,
}

var transitionIndex = func() map[transitionKey]Rule {
	m := make(map[transitionKey]Rule, len(Transitions))
	for _, r := range Transitions {
		k := transitionKey{r.From, r.To, r.Actor}
		if _, dup := m[k]; dup {
			panic(fmt.Sprintf("fleet: duplicate transition %s -> %s by %s", r.From, r.To, r.Actor))
		}
		m[k] = r
	}
	for k := range gateSkipping {
		if _, ok := m[k]; !ok {
			panic(fmt.Sprintf("fleet: gate-skipping move %s -> %s by %s is not a transition", k.from, k.to, k.actor))
		}
	}
	return m
}()

// IllegalTransitionError says a transition is not in the table.
type IllegalTransitionError struct {
	From, To Stage
	Actor    Actor
}

func (e *IllegalTransitionError) Error() string {
	return fmt.Sprintf("illegal transition %s -> %s by %s", e.From, e.To, e.Actor)
}

// Is makes errors.Is(err, ErrConflict) true: the API answers 409 conflict.
func (e *IllegalTransitionError) Is(target error) bool { return target == ErrConflict }

// CheckJobTransition is CheckTransition for job j: on top of the table, a
// job with a review gate may not make a move that skips the gate.
func CheckJobTransition(j *Job, to Stage, actor Actor) (Rule, error) {
	r, err := CheckTransition(j.Stage, to, actor)
	if err != nil {
		return Rule{}, err
	}
	if j.Review != nil && gateSkipping[transitionKey{r.From, r.To, r.Actor}] {
		return Rule{}, Errorf(CodeConflict, "job %s has a review gate: it reaches %s only through the gate's quorum, not by %s -> %s (deliver it for review)",
			j.ID, to, j.Stage, to)
	}
	return r, nil
}

// CheckTransition returns the rule for from -> to by actor, or an
// *IllegalTransitionError.
func CheckTransition(from, to Stage, actor Actor) (Rule, error) {
	r, ok := transitionIndex[transitionKey{from, to, actor}]
	if !ok {
		return Rule{}, &IllegalTransitionError{From: from, To: to, Actor: actor}
	}
	return r, nil
}
