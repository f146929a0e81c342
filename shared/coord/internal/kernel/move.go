package kernel

import "github.com/gigafactory/fleet/shared/fleet"

// Move is a stage move (or, with MayStay, a recorded change of other
// fields) that a use case outside coord asks the lifecycle to apply in one
// compare-and-swap with its event (coord's transition).
type Move struct {
	ProductID, JobID string
	// To is the target stage; Decide, when set, picks it instead from the
	// job as read on each CAS attempt.
	To      fleet.Stage
	Decide  func(j *fleet.Job) fleet.Stage
	Actor   fleet.Actor
	ActorID string
	// Event is the event's type; Message its text (the rule's own
	// explanation when empty).
	Event   fleet.EventType
	Message string
	// Guard may refuse the move; Effect changes more fields once the
	// stage machine applied it.
	Guard  func(j *fleet.Job) error
	Effect func(j *fleet.Job)
	// MayStay lets a job already in To stay: the move is then a recorded
	// change of other fields.
	MayStay bool
	// EventActor, when set, is the actor the event names instead of Actor
	// (an operator's vote that the system's rule applies).
	EventActor fleet.Actor
	// MessageOf, when set, makes the message once the move is written
	// (from what Guard saw).
	MessageOf func() string
}
