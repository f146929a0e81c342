package api

import (
	"github.com/gigafactory/fleet/shared/api/view"
)

// The answers the coordinator's use cases build are defined with them in
// shared/api/view (types only, so the use cases link no HTTP); the
// contract names them here.
type (
	Explanation         = view.Explanation
	ScheduleExplanation = view.Schedule
	Candidate           = view.Candidate
	Terms               = view.Terms
	Budget              = view.Budget
	Burndown            = view.Burndown
	DAG                 = view.DAG
	DAGNode             = view.DAGNode
	DAGEdge             = view.DAGEdge
	RepoInfo            = view.RepoInfo
	ProfileSummary      = view.ProfileSummary
	WaitExplanation     = view.WaitExplanation
	WaitItem            = view.WaitItem
	ProfileExplanation  = view.ProfileExplanation
	Metrics             = view.Metrics
	CoordinatorStats    = view.CoordinatorStats
	FactoryMetrics      = view.FactoryMetrics
	StarvingJob         = view.StarvingJob
	EchoState           = view.EchoState
)

// DAGEdge kinds.
const (
	EdgeChild = view.EdgeChild
	EdgeDep   = view.EdgeDep
)
