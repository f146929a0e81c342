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
	// EventsRepaired counts events this process moved from a job's ring
	// of recent events to the events container; EventsDeferred the moves
	// that failed (the job keeps those events and tries again).
	EventsDeferred int64 `json:"eventsDeferred"`
	EventsRepaired int64 `json:"eventsRepaired"`
	// QuietSkips counts sweep ticks skipped on the ledger's word (one point
	// read each, no query).
	QuietSkips int64 `json:"quietSkips"`
	// BumpsSkipped counts ledger bumps a change-feed batch did not write
	// because no sweep had armed the counter (one refused conditional
	// write each instead of an increment).
	BumpsSkipped int64 `json:"ledgerBumpsSkipped"`
	// FactoriesPruned counts static factories this process's prune timer
	// deregistered for silence past FLEET_PRUNE_AFTER.
	FactoriesPruned int64 `json:"factoriesPruned"`
	// SeatFeedDecoded counts the job versions this process's factory-list
	// refreshes decoded from the jobs change feed, for the seats they
	// count (another process's writes, this process's creates, versions
	// written before their note); SeatFeedNoted those taken instead from
	// the note this process made as it wrote them.
	SeatFeedDecoded int64 `json:"seatFeedDecoded"`
	SeatFeedNoted   int64 `json:"seatFeedNoted"`
	// UndecodableDocs counts documents (jobs, echo states) this process's
	// sweeps, claims and listings passed over because they do not decode
	// (each is logged with its container and id); absent while there were
	// none.
	UndecodableDocs int64 `json:"undecodableDocuments,omitempty"`
	// Mean lags in milliseconds.
	DispatchLagMs float64 `json:"dispatchLagMs"`
	AcceptLagMs   float64 `json:"acceptLagMs"`
	// ChangeFeedLagMs is the mean time from a job's write to the dispatch
	// function seeing it in the change feed.
	ChangeFeedLagMs float64 `json:"changeFeedLagMs"`
	// The dispatch path by stage (issue 25): samples, p50 and p99 in
	// milliseconds of each since the process started, from a histogram
	// whose percentiles are bucket upper bounds (at most 19% high).
	// Submit: the store write creating a queued job. Wake: the job's
	// creation (its createdAt, before that write) to its first dispatch
	// starting (the write, the change feed and the host), whichever
	// process created it. Schedule: choosing the target.
	// Stamp: the job's CAS recording it. Publish: the broker taking the
	// message. Absent until a stage has a sample.
	StageSubmitN       int64   `json:"stageSubmitCount,omitempty"`
	StageSubmitP50Ms   float64 `json:"stageSubmitP50Ms,omitempty"`
	StageSubmitP99Ms   float64 `json:"stageSubmitP99Ms,omitempty"`
	StageWakeN         int64   `json:"stageWakeCount,omitempty"`
	StageWakeP50Ms     float64 `json:"stageWakeP50Ms,omitempty"`
	StageWakeP99Ms     float64 `json:"stageWakeP99Ms,omitempty"`
	StageScheduleN     int64   `json:"stageScheduleCount,omitempty"`
	StageScheduleP50Ms float64 `json:"stageScheduleP50Ms,omitempty"`
	StageScheduleP99Ms float64 `json:"stageScheduleP99Ms,omitempty"`
	StageStampN        int64   `json:"stageStampCount,omitempty"`
	StageStampP50Ms    float64 `json:"stageStampP50Ms,omitempty"`
	StageStampP99Ms    float64 `json:"stageStampP99Ms,omitempty"`
	StagePublishN      int64   `json:"stagePublishCount,omitempty"`
	StagePublishP50Ms  float64 `json:"stagePublishP50Ms,omitempty"`
	StagePublishP99Ms  float64 `json:"stagePublishP99Ms,omitempty"`
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

// The kinds a scheduling reason (Schedule.Reason) starts with: nothing
// could run the job as the fleet stands, or factories could but none can
// now (shared/schedule makes them; clients split on them).
const (
	UnroutablePrefix = "unroutable: "
	NoEligiblePrefix = "no eligible factory: "
)

// Explanation is why a job is where it is: its dispatch state and how every
// factory scores for it now.
type Explanation struct {
	JobID           string         `json:"jobId"`
	Stage           fleet.Stage    `json:"stage"`
	TargetFactoryID string         `json:"targetFactoryId,omitempty"`
	DispatchEpoch   int64          `json:"dispatchEpoch"`
	Dispatch        fleet.Dispatch `json:"dispatch"`
	// Profile names the persona version the job runs under and the
	// capabilities it added to the manifest's; nil without a persona.
	Profile *ProfileExplanation `json:"profile,omitempty"`
	// Review is the job's review gate: the head under review, the votes
	// (who voted how), the approvals so far and the reviewers awaited.
	Review *fleet.Review `json:"review,omitempty"`
	// Waiting, for a blocked job, is what it waits for: each dependency
	// and child with its stage.
	Waiting *WaitExplanation `json:"waiting,omitempty"`
	// Budget, for a queued job, is why its product's budget holds it back
	// now (paused, or no room under the ceiling); nil when it does not.
	Budget *fleet.Hold `json:"budget,omitempty"`
	// SeatCap, for a queued job, is its product's seat cap holding it back
	// (kind seat_cap, with running and maxRunning); nil when it does not.
	SeatCap  *fleet.Hold `json:"seatCap,omitempty"`
	Schedule Schedule    `json:"schedule"`
}

// Schedule is the full routing decision for one job: what /explain shows (schedule.Explanation)
// and what the dispatcher records when a job is unroutable.
type Schedule struct {
	JobID    string `json:"jobId"`
	Routable bool   `json:"routable"`
	// Reason says why no factory is eligible; empty when Routable.
	Reason string `json:"reason,omitempty"`
	// Best is the factory BestFactory would pick; empty when not Routable.
	Best string `json:"best,omitempty"`
	// Required is the capability set the hard filter checked, sorted,
	// including the implicit repo:<repo>.
	Required []string `json:"required"`
	// Candidates are the eligible factories best first, then the ineligible
	// ones by ID.
	Candidates []Candidate `json:"candidates"`
}

// Candidate is one factory as schedule.Explain saw it for one job.
type Candidate struct {
	FactoryID string `json:"factoryId"`
	Eligible  bool   `json:"eligible"`
	// Reason is why the factory failed the hard filter; empty when eligible.
	Reason string `json:"reason,omitempty"`
	// Load is the seats the scheduler counts taken (fleet.Factory.Occupied),
	// shown because it breaks ties between equal totals.
	Load int `json:"load"`
	// Leases is the live leases the coordinator holds for the factory and
	// Reported the load the factory last heartbeated; Load is the larger of
	// Leases+Dispatched and Reported.
	Leases   int `json:"leases"`
	Reported int `json:"reported"`
	// Dispatched is the dispatches sent to the factory it has not taken yet.
	Dispatched int `json:"dispatched,omitempty"`
	// Terms and Total are set only for eligible factories: an ineligible one
	// is not scored.
	Terms Terms   `json:"terms,omitzero"`
	Total float64 `json:"total,omitempty"`
}

// Terms are the raw, unweighted score terms of one job on one factory.
type Terms struct {
	// CapabilityFit is (|required|+1)/(|offered|+1), capped at 1, in (0, 1]:
	// 1 when the factory offers exactly what the job needs. Preferring the
	// tightest fit keeps factories with rare capabilities free for the jobs
	// that cannot run anywhere else.
	CapabilityFit float64 `json:"capabilityFit"`
	// Affinity is 1 when the job names a persona the factory advertises as
	// persona:<name>, else 0.
	Affinity float64 `json:"affinity"`
	// Load is 1/(1+load), in (0, 1]: spreads work across idle factories.
	Load float64 `json:"load"`
	// CostFit is 1 when the job's expected cost (cost per hour × wall budget)
	// fits its USD budget or either is unknown, else budget/expected, in (0, 1].
	CostFit float64 `json:"costFit"`
	// Health is 1 for ok, 0.5 for degraded, 0.25 for stale and 0 for a value
	// this package does not know; down factories never reach scoring.
	Health float64 `json:"health"`
	// Starvation is the job's aging penalty, in [-1, 0]: -1 when just queued,
	// rising linearly to 0 at StarvationWindow. It is the same for every
	// factory, so it never changes which factory a job goes to; it orders jobs
	// of equal priority for a polling factory (RankJobs) and makes the totals
	// shown by Explain comparable over time.
	Starvation float64 `json:"starvation"`
}
