// Package protocol is the wire contract between the coordinator and its
// factories: the JSON shapes a factory receives on its subscription and
// from a claim. The coordinator (shared/coord), the bus adapters and the
// factory agent all speak it; it depends on the domain types only, so a
// factory links neither the use cases nor the scheduler.
package protocol

import (
	"strconv"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// DispatchMessage is what a factory receives: small routing facts, never the
// job body, which the factory reads from the coordinator after accepting.
type DispatchMessage struct {
	JobID           string         `json:"jobId"`
	ProductID       string         `json:"productId"`
	Repo            string         `json:"repo"`
	Capabilities    []string       `json:"capabilities"`
	Priority        fleet.Priority `json:"priority"`
	TargetFactoryID string         `json:"targetFactoryId"`
	DispatchEpoch   int64          `json:"dispatchEpoch"`
}

// MessageID is the broker's duplicate-detection key: jobId:dispatchEpoch.
// Keyed on the job alone, a re-dispatch inside the detection window would
// be dropped as a duplicate and the job would strand.
func (m DispatchMessage) MessageID() string {
	return m.JobID + ":" + strconv.FormatInt(m.DispatchEpoch, 10)
}

// GCRequest asks one factory to clean up git state of finished jobs: local
// worktrees and branches of these jobs, and on the origin the `aq/wip/<id>`
// branches and the `aq/job/<id>` branches already merged into the default
// branch. A factory never deletes unmerged work or an in-flight worktree,
// whatever the request says.
type GCRequest struct {
	FactoryID string              `json:"factoryId"`
	Repos     map[string][]string `json:"repos"` // repo -> terminal job ids
}

// Claimed is a job handed to a factory with its lease (the answer of claim
// and accept).
type Claimed struct {
	Job            *fleet.Job `json:"job"`
	LeaseEpoch     int64      `json:"leaseEpoch"`
	LeaseExpiresAt time.Time  `json:"leaseExpiresAt"`
}

// Renewal is the answer to a lease renewal: the new expiry, and whether
// the holder has been asked to stop. A factory that has not heard of a
// cancel or a preemption through a control message (a poll factory, or
// one whose message was lost) learns of it here.
type Renewal struct {
	LeaseExpiresAt   time.Time `json:"leaseExpiresAt"`
	CancelRequested  bool      `json:"cancelRequested"`
	PreemptRequested bool      `json:"preemptRequested"`
}

// ControlAction is what a control message asks of the holder.
type ControlAction string

// Control actions.
const (
	// ControlCancel: stop the engine, checkpoint, release with outcome
	// cancelled.
	ControlCancel ControlAction = "cancel"
	// ControlPreempt: stop the engine, checkpoint, release with outcome
	// preempted; the job is queued again.
	ControlPreempt ControlAction = "preempt"
)

// ControlMessage is a command to the factory holding one lease of one job,
// sent on that factory's subscription so it acts at once instead of at its
// next renewal. It names the lease epoch: a factory holding a newer lease
// of the job (or none) ignores it, and the release it answers with is
// fenced like every holder's write.
type ControlMessage struct {
	Action          ControlAction `json:"action"`
	JobID           string        `json:"jobId"`
	ProductID       string        `json:"productId"`
	TargetFactoryID string        `json:"targetFactoryId"`
	LeaseEpoch      int64         `json:"leaseEpoch"`
}

// MessageID is the broker's duplicate-detection key:
// control:<action>:jobId:leaseEpoch, one command per lease.
func (m ControlMessage) MessageID() string {
	return "control:" + string(m.Action) + ":" + m.JobID + ":" + strconv.FormatInt(m.LeaseEpoch, 10)
}
