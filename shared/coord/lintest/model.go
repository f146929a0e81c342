// Package lintest checks that the coordinator's job operations are
// linearizable: a history of concurrent client operations (claim, patch,
// renew, release, fail, reap and the operator's actions) recorded against
// the real coordinator is checked with Porcupine against a sequential model
// of one job, built on the stage machine (fleet.Transitions), lease epochs
// and fencing. Histories are partitioned by job, which keeps checking fast.
package lintest

import (
	"fmt"

	"github.com/anishathalye/porcupine"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Kind is a client operation on one job.
type Kind string

// Operations. Factory ones carry the factory and, when fenced, the epoch.
const (
	OpClaim   Kind = "claim"   // poll claim by a factory whose token serves only the job's product
	OpPatch   Kind = "patch"   // holder moves the job to Stage
	OpRenew   Kind = "renew"   // holder extends its lease
	OpRelease Kind = "release" // holder gives the job back
	OpFail    Kind = "fail"    // holder reports a failure (Retryable or not)
	OpReap    Kind = "reap"    // the reaper revoked an expired lease (observed write)
	OpAct     Kind = "act"     // operator action towards Stage (cancel, requeue, ship, reject)
)

// Input is one invocation.
type Input struct {
	Job       int
	Kind      Kind
	Factory   string
	Epoch     int64
	Stage     fleet.Stage // OpPatch, OpAct: the stage asked for
	Retryable bool        // OpFail
}

// Outcome is how an operation ended.
type Outcome string

// Outcomes. Contended (a CAS that kept losing, coord.ConflictError) changes
// nothing and says nothing about the state, so it is always legal.
const (
	OK        Outcome = "ok"
	None      Outcome = "none" // a claim that found nothing to take
	Fenced    Outcome = "fenced"
	Illegal   Outcome = "illegal" // the stage machine refused the move (409 conflict)
	Contended Outcome = "contended"
)

// Output is one response: for OK, the job as the operation left it.
type Output struct {
	Outcome Outcome
	Job     State
}

// State is the part of one job the model follows.
type State struct {
	Stage  fleet.Stage
	Epoch  int64
	Holder string
	// MayBackOff: the job was queued by a retryable failure, whose backoff
	// (NotBefore) may not have passed, so a claim may find it not ready.
	MayBackOff bool
	// CancelRequested: an operator cancelled the leased job; it ends
	// cancelled when the holder releases (or the reaper forces it).
	CancelRequested bool
}

func (s State) String() string {
	h := s.Holder
	if h == "" {
		h = "-"
	}
	if s.CancelRequested {
		h += " cancel-requested"
	}
	return fmt.Sprintf("%s e%d %s", s.Stage, s.Epoch, h)
}

// initial is a job just submitted.
var initial = State{Stage: fleet.StageQueued}

// Model is the sequential specification of one job.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byJob := map[int][]porcupine.Operation{}
		var order []int
		for _, op := range history {
			j := op.Input.(Input).Job
			if _, ok := byJob[j]; !ok {
				order = append(order, j)
			}
			byJob[j] = append(byJob[j], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, j := range order {
			out = append(out, byJob[j])
		}
		return out
	},
	Init: func() any { return initial },
	Step: func(state, input, output any) (bool, any) {
		return Step(state.(State), input.(Input), output.(Output))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		s := fmt.Sprintf("%s j%d", in.Kind, in.Job)
		if in.Factory != "" {
			s += fmt.Sprintf(" %s@e%d", in.Factory, in.Epoch)
		}
		if in.Stage != "" {
			s += " ->" + string(in.Stage)
		}
		if out.Outcome == OK {
			return s + " = " + out.Job.String()
		}
		return s + " = " + string(out.Outcome)
	},
	DescribeState: func(state any) string { return state.(State).String() },
}

// Step is the model: whether out is a legal answer to in on a job in state
// s, and the state after it.
func Step(s State, in Input, out Output) (bool, State) {
	if out.Outcome == Contended {
		return true, s
	}
	switch in.Kind {
	case OpClaim:
		switch out.Outcome {
		case None:
			return s.Stage != fleet.StageQueued || s.MayBackOff, s
		case OK:
			return moved(s, s.Stage == fleet.StageQueued, fleet.ActorFactory, in.Factory, out.Job)
		}
	case OpRenew:
		switch out.Outcome {
		case OK:
			return fenceHolds(s, in), s
		case Fenced:
			return !fenceHolds(s, in), s
		}
	case OpPatch, OpRelease, OpFail:
		switch out.Outcome {
		case Fenced:
			return !fenceHolds(s, in), s
		case Illegal:
			return fenceHolds(s, in) && !anyRule(s.Stage, factoryTargets(s, in), fleet.ActorFactory), s
		case OK:
			ok, next := moved(s, fenceHolds(s, in), fleet.ActorFactory, in.Factory, out.Job)
			if !ok || !contains(factoryTargets(s, in), out.Job.Stage) {
				return false, s
			}
			next.MayBackOff = in.Kind == OpFail && in.Retryable && next.Stage == fleet.StageQueued
			return true, next
		}
	case OpReap:
		if out.Outcome != OK {
			return false, s
		}
		ok, next := moved(s, s.Stage.Leased(), fleet.ActorSystem, "", out.Job)
		if !ok || rule(s.Stage, out.Job.Stage, fleet.ActorSystem).Lease != fleet.LeaseRevoke {
			return false, s
		}
		// A pending cancel is forced, never requeued.
		return (out.Job.Stage == fleet.StageCancelled) == s.CancelRequested, next
	case OpAct:
		// The jobs have no dependencies, so a requeue goes to queued,
		// never to blocked.
		targets := []fleet.Stage{in.Stage}
		if in.Stage == fleet.StageCancelled && s.Stage.Leased() {
			// Cancel of a leased job is a request: the holder keeps it.
			want := s
			want.CancelRequested = true
			return out.Outcome == OK && out.Job == want, want
		}
		switch out.Outcome {
		case Illegal:
			return !anyRule(s.Stage, targets, fleet.ActorOperator), s
		case OK:
			ok, next := moved(s, contains(targets, out.Job.Stage), fleet.ActorOperator, "", out.Job)
			return ok, next
		}
	}
	return false, s
}

// factoryTargets are the stages a holder's operation may move the job in
// state s to.
func factoryTargets(s State, in Input) []fleet.Stage {
	switch in.Kind {
	case OpPatch:
		return []fleet.Stage{in.Stage}
	case OpRelease:
		if s.CancelRequested {
			// The release acknowledges the pending cancel.
			return []fleet.Stage{fleet.StageCancelled}
		}
		return []fleet.Stage{fleet.StageQueued}
	case OpFail:
		if in.Retryable {
			return []fleet.Stage{fleet.StageQueued, fleet.StageDeadLetter}
		}
		return []fleet.Stage{fleet.StageFailed}
	}
	return nil
}

// fenceHolds is fleet.Job.CheckFence on the model's state.
func fenceHolds(s State, in Input) bool {
	return s.Stage.Leased() && s.Holder != "" && s.Holder == in.Factory && s.Epoch == in.Epoch
}

// moved checks that out follows from s by one rule of the stage machine
// made by actor (the factory actorID for a factory move), given that the
// operation's own precondition pre held, and returns out as the new state.
func moved(s State, pre bool, actor fleet.Actor, actorID string, out State) (bool, State) {
	if !pre {
		return false, s
	}
	r, err := fleet.CheckTransition(s.Stage, out.Stage, actor)
	if err != nil {
		return false, s
	}
	want := State{Stage: out.Stage, Epoch: s.Epoch, Holder: s.Holder, CancelRequested: s.CancelRequested}
	switch r.Lease {
	case fleet.LeaseAcquire:
		want.Epoch, want.Holder = s.Epoch+1, actorID
	case fleet.LeaseRevoke:
		want.Epoch, want.Holder, want.CancelRequested = s.Epoch+1, "", false
	case fleet.LeaseRelease:
		want.Holder, want.CancelRequested = "", false
	}
	if out != want {
		return false, s
	}
	return true, want
}

func rule(from, to fleet.Stage, actor fleet.Actor) fleet.Rule {
	r, _ := fleet.CheckTransition(from, to, actor)
	return r
}

func anyRule(from fleet.Stage, to []fleet.Stage, actor fleet.Actor) bool {
	for _, t := range to {
		if _, err := fleet.CheckTransition(from, t, actor); err == nil {
			return true
		}
	}
	return false
}

func contains(ss []fleet.Stage, s fleet.Stage) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
