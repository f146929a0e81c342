// Package view holds the answers of the /fleet API that the coordinator's
// use cases build: budgets, burndowns, DAGs, repos, profile summaries, the
// parts of an explanation, metrics roll-ups and echo delivery state. They
// are part of the wire contract, written once here: the use cases (coord
// and its packages) fill them in, and shared/api names them for clients.
// The package is types only, on the domain types, so the use cases link no
// HTTP by using it.
package view

import (
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Budget is a product's budget as GET /fleet/budgets/{productId} answers
// it.
type Budget struct {
	ProductID     string             `json:"productId"`
	CeilingUSD    float64            `json:"ceilingUsd"`
	Period        fleet.BudgetPeriod `json:"period"`
	PeriodStart   time.Time          `json:"periodStart"`
	SpentUSD      float64            `json:"spentUsd"`
	ReservedUSD   float64            `json:"reservedUsd"`
	RemainingUSD  float64            `json:"remainingUsd"`
	Paused        bool               `json:"paused"`
	PausedReason  *fleet.PauseReason `json:"pausedReason"`
	PauseMessage  string             `json:"pauseMessage,omitempty"`
	AlertAt       float64            `json:"alertAt"`
	AutoPause     bool               `json:"autoPause"`
	DefaultJobUSD float64            `json:"defaultJobUsd"`
	UpdatedAt     time.Time          `json:"updatedAt"`
}

// Burndown is the period's spend over time and where it is heading.
type Burndown struct {
	ProductID           string            `json:"productId"`
	CeilingUSD          float64           `json:"ceilingUsd"`
	PeriodStart         time.Time         `json:"periodStart"`
	Points              []fleet.BurnPoint `json:"points"`
	ForecastExhaustedAt *time.Time        `json:"forecastExhaustedAt"`
}

// DAG is the tree of children a job belongs to, with the dependencies
// among (and out of) it.
type DAG struct {
	RootID string              `json:"rootId"`
	Nodes  []DAGNode           `json:"nodes"`
	Edges  []DAGEdge           `json:"edges"`
	Counts map[fleet.Stage]int `json:"counts"`
}

// DAGNode is one job of a DAG.
type DAGNode struct {
	ID       string         `json:"id"`
	Title    string         `json:"title"`
	Stage    fleet.Stage    `json:"stage"`
	Kind     fleet.JobKind  `json:"kind,omitempty"`
	ParentID string         `json:"parentId,omitempty"`
	Deps     []string       `json:"deps"`
	DepsMode fleet.DepsMode `json:"depsMode"`
}

// DAGEdge kinds.
const (
	EdgeChild = "child" // from the parent to the child
	EdgeDep   = "dep"   // from the dependency to the job waiting on it
)

// DAGEdge is one edge of a DAG.
type DAGEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
	Kind string `json:"kind"`
}

// RepoInfo is one repo known to the fleet.
type RepoInfo struct {
	Repo      string   `json:"repo"`
	Products  []string `json:"products"`  // products that own it
	Factories []string `json:"factories"` // factories that have it checked out
}

// ProfileSummary is a profile version without its instructions, as lists
// show it.
type ProfileSummary struct {
	Name         string       `json:"name"`
	ProductID    string       `json:"productId"`
	Version      int64        `json:"version"`
	Capabilities []string     `json:"capabilities"`
	Engine       string       `json:"engine,omitempty"`
	Budget       fleet.Budget `json:"budget"`
	BodyBytes    int          `json:"bodyBytes"`
	CreatedBy    string       `json:"createdBy,omitempty"`
	CreatedAt    time.Time    `json:"createdAt"`
}

// WaitExplanation is what a blocked job waits for.
type WaitExplanation struct {
	DepsMode fleet.DepsMode `json:"depsMode"`
	Deps     []WaitItem     `json:"deps"`
	Children []WaitItem     `json:"children"`
}

// WaitItem is one job waited for and its stage now.
type WaitItem struct {
	ID    string      `json:"id"`
	Stage fleet.Stage `json:"stage"`
}

// ProfileExplanation is the part of a job's requirements its profile made.
type ProfileExplanation struct {
	Name         string   `json:"name"`
	Version      int64    `json:"version"`
	Capabilities []string `json:"capabilities"`
}

// Metrics is GET /fleet/metrics: the fleet at a glance.
type Metrics struct {
	At        time.Time      `json:"at"`
	Factories FactoryMetrics `json:"factories"`
	Jobs      map[string]int `json:"jobs"` // active jobs by stage
	Starving  []StarvingJob  `json:"starving"`
	Alerts    []fleet.Alert  `json:"alerts"`
	// Coord and Adapters cover every product; nil for a product-scoped
	// reader.
	Coord *CoordinatorStats `json:"coordinator,omitempty"`
	// Adapters holds what the store and the dispatch transport report
	// (operation counts, request charges, subscription depths), by name.
	Adapters map[string]any `json:"adapters,omitempty"`
}

// CoordinatorStats are one coordinator process's counters at a point in
// time.
type CoordinatorStats struct {
	CASConflicts     int64   `json:"casConflicts"`
	Claims           int64   `json:"claims"`
	ClaimConflicts   int64   `json:"claimConflicts"`
	ClaimConflictPct float64 `json:"claimConflictRate"`
	Dispatched       int64   `json:"dispatched"`
	PublishFailed    int64   `json:"publishFailed"`
	DeadLettered     int64   `json:"deadLettered"`
	// EventsDeferred counts events whose write right after their job's
	// change failed: the job holds them until a repair writes them
	// (EventsRepaired counts those writes, by any repair of this process).
	EventsDeferred int64 `json:"eventsDeferred"`
	EventsRepaired int64 `json:"eventsRepaired"`
	// QuietSkips counts sweep ticks skipped on the ledger's word (one point
	// read each, no query).
	QuietSkips int64 `json:"quietSkips"`
	// Mean lags in milliseconds.
	DispatchLagMs float64 `json:"dispatchLagMs"`
	AcceptLagMs   float64 `json:"acceptLagMs"`
	// ChangeFeedLagMs is the mean time from a job's write to the dispatch
	// function seeing it in the change feed.
	ChangeFeedLagMs float64 `json:"changeFeedLagMs"`
}

// FactoryMetrics rolls up factory health and seats.
type FactoryMetrics struct {
	Total       int            `json:"total"`
	ByHealth    map[string]int `json:"byHealth"`
	Seats       int            `json:"seats"`
	Load        int            `json:"load"`
	Utilization float64        `json:"utilization"`
}

// StarvingJob is a queued job waiting past the starvation window.
type StarvingJob struct {
	JobID      string `json:"jobId"`
	ProductID  string `json:"productId"`
	WaitingFor string `json:"waitingFor"`
	Reason     string `json:"reason,omitempty"`
}

// EchoState is a job's delivery state as GET /fleet/jobs/{id}/echo shows
// it.
type EchoState struct {
	JobID        string `json:"jobId"`
	DeliveredSeq int64  `json:"deliveredSeq"`
	// PendingSeq is the next seq to deliver; nil when every event so far
	// was delivered.
	PendingSeq *int64 `json:"pendingSeq"`
	// LatestSeq is the job's latest event.
	LatestSeq     int64      `json:"latestSeq"`
	Attempts      int        `json:"attempts"`
	LastError     *string    `json:"lastError"`
	NextAttemptAt *time.Time `json:"nextAttemptAt"`
}
