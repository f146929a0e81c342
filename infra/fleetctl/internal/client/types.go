package client

import (
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Wire shapes the API answers that are not domain types: the coordinator's
// views (explain, metrics, repos, profile summaries), mirrored here so the
// CLI depends on the contract, not on the coordinator package.

// Page is a listing: {items, cursor}.
type Page[T any] struct {
	Items  []T    `json:"items"`
	Cursor string `json:"cursor,omitempty"`
}

// Terms are one factory's score terms for a job.
type Terms struct {
	CapabilityFit float64 `json:"capabilityFit"`
	Affinity      float64 `json:"affinity"`
	Load          float64 `json:"load"`
	CostFit       float64 `json:"costFit"`
	Health        float64 `json:"health"`
	Starvation    float64 `json:"starvation"`
}

// Candidate is one factory's verdict in an explanation.
type Candidate struct {
	FactoryID string  `json:"factoryId"`
	Eligible  bool    `json:"eligible"`
	Reason    string  `json:"reason,omitempty"`
	Load      int     `json:"load"`
	Terms     Terms   `json:"terms"`
	Total     float64 `json:"total"`
}

// Explanation is GET /fleet/jobs/{id}/explain.
type Explanation struct {
	JobID           string         `json:"jobId"`
	Stage           fleet.Stage    `json:"stage"`
	TargetFactoryID string         `json:"targetFactoryId,omitempty"`
	DispatchEpoch   int64          `json:"dispatchEpoch"`
	Dispatch        fleet.Dispatch `json:"dispatch"`
	Profile         *struct {
		Name         string   `json:"name"`
		Version      int64    `json:"version"`
		Capabilities []string `json:"capabilities"`
	} `json:"profile,omitempty"`
	// Budget and SeatCap say why admission holds a queued job back.
	Budget   *fleet.Hold `json:"budget,omitempty"`
	SeatCap  *fleet.Hold `json:"seatCap,omitempty"`
	Schedule struct {
		Routable   bool        `json:"routable"`
		Reason     string      `json:"reason,omitempty"`
		Best       string      `json:"best,omitempty"`
		Required   []string    `json:"required"`
		Candidates []Candidate `json:"candidates"`
	} `json:"schedule"`
}

// Metrics is GET /fleet/metrics (the parts the CLI shows).
type Metrics struct {
	At        time.Time `json:"at"`
	Factories struct {
		Total       int            `json:"total"`
		ByHealth    map[string]int `json:"byHealth"`
		Seats       int            `json:"seats"`
		Load        int            `json:"load"`
		Utilization float64        `json:"utilization"`
	} `json:"factories"`
	Jobs   map[string]int `json:"jobs"`
	Alerts []fleet.Alert  `json:"alerts"`
}

// RepoInfo is one entry of GET /fleet/repos.
type RepoInfo struct {
	Repo      string   `json:"repo"`
	Products  []string `json:"products"`
	Factories []string `json:"factories"`
}

// ProfileSummary is one entry of GET /fleet/profiles.
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

// Enrolled is POST /fleet/factories/enroll's answer.
type Enrolled struct {
	FactoryID string         `json:"factoryId"`
	Token     string         `json:"token"`
	Factory   *fleet.Factory `json:"factory"`
}

// IssuedToken is a rotated factory token.
type IssuedToken struct {
	FactoryID string `json:"factoryId"`
	Token     string `json:"token"`
}

// DAG is GET /fleet/jobs/{id}/dag.
type DAG struct {
	RootID string    `json:"rootId"`
	Nodes  []DAGNode `json:"nodes"`
	Edges  []struct {
		From string `json:"from"`
		To   string `json:"to"`
		Kind string `json:"kind"`
	} `json:"edges"`
	Counts map[string]int `json:"counts"`
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

// Budget is GET /fleet/budgets/{productId}.
type Budget struct {
	ProductID     string    `json:"productId"`
	CeilingUSD    float64   `json:"ceilingUsd"`
	Period        string    `json:"period"`
	PeriodStart   time.Time `json:"periodStart"`
	SpentUSD      float64   `json:"spentUsd"`
	ReservedUSD   float64   `json:"reservedUsd"`
	RemainingUSD  float64   `json:"remainingUsd"`
	Paused        bool      `json:"paused"`
	PausedReason  *string   `json:"pausedReason"`
	PauseMessage  string    `json:"pauseMessage,omitempty"`
	AlertAt       float64   `json:"alertAt"`
	AutoPause     bool      `json:"autoPause"`
	DefaultJobUSD float64   `json:"defaultJobUsd"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// Burndown is GET /fleet/budgets/{productId}/burndown.
type Burndown struct {
	ProductID   string    `json:"productId"`
	CeilingUSD  float64   `json:"ceilingUsd"`
	PeriodStart time.Time `json:"periodStart"`
	Points      []struct {
		At       time.Time `json:"at"`
		SpentUSD float64   `json:"spentUsd"`
	} `json:"points"`
	ForecastExhaustedAt *time.Time `json:"forecastExhaustedAt"`
}
