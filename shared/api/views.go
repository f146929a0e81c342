package api

import (
	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Explanation is GET /fleet/jobs/{id}/explain: why a job is where it is,
// its dispatch state and how every factory scores for it now.
type Explanation struct {
	JobID           string         `json:"jobId"`
	Stage           fleet.Stage    `json:"stage"`
	TargetFactoryID string         `json:"targetFactoryId,omitempty"`
	DispatchEpoch   int64          `json:"dispatchEpoch"`
	Dispatch        fleet.Dispatch `json:"dispatch"`
	// Profile names the persona version the job runs under and the
	// capabilities it added to the manifest's; nil without a persona.
	Profile *ProfileExplanation `json:"profile,omitempty"`
	// Review is the job's review gate.
	Review *fleet.Review `json:"review,omitempty"`
	// Waiting, for a blocked job, is what it waits for.
	Waiting *WaitExplanation `json:"waiting,omitempty"`
	// Budget and SeatCap, for a queued job, say why admission holds it
	// back now; nil when they do not.
	Budget   *fleet.Hold         `json:"budget,omitempty"`
	SeatCap  *fleet.Hold         `json:"seatCap,omitempty"`
	Schedule ScheduleExplanation `json:"schedule"`
}

// ScheduleExplanation is the scheduler's routing decision for one job
// (the server's is shared/schedule.Explanation; a test holds the two to
// the same JSON fields).
type ScheduleExplanation struct {
	JobID      string      `json:"jobId"`
	Routable   bool        `json:"routable"`
	Reason     string      `json:"reason,omitempty"`
	Best       string      `json:"best,omitempty"`
	Required   []string    `json:"required"`
	Candidates []Candidate `json:"candidates"`
}

// Candidate is one factory as the scheduler saw it for one job.
type Candidate struct {
	FactoryID  string  `json:"factoryId"`
	Eligible   bool    `json:"eligible"`
	Reason     string  `json:"reason,omitempty"`
	Load       int     `json:"load"`
	Leases     int     `json:"leases"`
	Reported   int     `json:"reported"`
	Dispatched int     `json:"dispatched,omitempty"`
	Terms      Terms   `json:"terms,omitzero"`
	Total      float64 `json:"total,omitempty"`
}

// Terms are the raw, unweighted score terms of one job on one factory.
type Terms struct {
	CapabilityFit float64 `json:"capabilityFit"`
	Affinity      float64 `json:"affinity"`
	Load          float64 `json:"load"`
	CostFit       float64 `json:"costFit"`
	Health        float64 `json:"health"`
	Starvation    float64 `json:"starvation"`
}

// The answers the coordinator's use cases build are defined with them in
// shared/api/view (types only, so the use cases link no HTTP); the
// contract names them here.
type (
	Budget             = view.Budget
	Burndown           = view.Burndown
	DAG                = view.DAG
	DAGNode            = view.DAGNode
	DAGEdge            = view.DAGEdge
	RepoInfo           = view.RepoInfo
	ProfileSummary     = view.ProfileSummary
	WaitExplanation    = view.WaitExplanation
	WaitItem           = view.WaitItem
	ProfileExplanation = view.ProfileExplanation
	Metrics            = view.Metrics
	CoordinatorStats   = view.CoordinatorStats
	FactoryMetrics     = view.FactoryMetrics
	StarvingJob        = view.StarvingJob
	EchoState          = view.EchoState
)

// DAGEdge kinds.
const (
	EdgeChild = view.EdgeChild
	EdgeDep   = view.EdgeDep
)
