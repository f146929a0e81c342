package api

import (
	"encoding/json"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// ProductRequest declares a product (PUT /fleet/products/{productId}).
// Repos replaces the owned list, so it is required: an omitted list would
// disown every repo.
type ProductRequest struct {
	Name  string   `json:"name,omitempty"`
	Repos []string `json:"repos"`
	// MoveRepos takes repos other products own (unscoped operators only).
	MoveRepos bool `json:"moveRepos,omitempty"`
	// Tracker sets the echo target (a TrackerRequest); null removes it;
	// absent keeps it. Raw, because null and absent differ here.
	Tracker json.RawMessage `json:"tracker,omitempty"`
	// MaxRunning is the product's seat cap; absent or 0: uncapped.
	MaxRunning int `json:"maxRunning,omitempty"`
}

// TrackerRequest is a product's tracker target as PUT sends it; the
// secret may be left out to keep the one set.
type TrackerRequest struct {
	WebhookURL string `json:"webhookUrl"`
	Secret     string `json:"secret,omitempty"`
}

// RepoInfo is one repo known to the fleet (GET /fleet/repos).
type RepoInfo struct {
	Repo      string   `json:"repo"`
	Products  []string `json:"products"`  // products that own it
	Factories []string `json:"factories"` // factories that have it checked out
}

// ProfileRequest is the JSON form of a profile (PUT
// /fleet/profiles/{name}): the Markdown document as a string. It may also
// be sent raw as text/markdown.
type ProfileRequest struct {
	Profile *string `json:"profile"`
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

// BudgetRequest is an operator's PUT of a product's budget.
type BudgetRequest struct {
	CeilingUSD    *float64           `json:"ceilingUsd"`
	Period        fleet.BudgetPeriod `json:"period,omitempty"`
	AlertAt       *float64           `json:"alertAt,omitempty"`
	AutoPause     *bool              `json:"autoPause,omitempty"`
	DefaultJobUSD *float64           `json:"defaultJobUsd,omitempty"`
}

// PauseRequest pauses a product; the reason is for people.
type PauseRequest struct {
	Reason string `json:"reason,omitempty"`
}

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

// IngestRequest is POST /fleet/tracker/ingest with the manifest as one
// Markdown string. The route also takes the manifest's front-matter
// fields (and body) in its place, which this type does not spell out.
type IngestRequest struct {
	Source   string `json:"source"`
	ItemID   string `json:"itemId"`
	Revision int64  `json:"revision"`
	Manifest string `json:"manifest,omitempty"`
}

// HeaderIngestOutcome tells an ingest's 200 apart: the job was updated to
// the new revision, or returned unchanged.
const HeaderIngestOutcome = "X-Fleet-Ingest"

// ResendRequest names the job whose events are sent again (POST
// /fleet/tracker/echo).
type ResendRequest struct {
	JobID string `json:"jobId"`
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
