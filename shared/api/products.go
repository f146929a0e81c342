package api

import (
	"encoding/json"

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
	// Forge sets where delivered jobs become pull requests (a
	// fleet.ForgeConfig); null removes it; absent keeps it.
	Forge json.RawMessage `json:"forge,omitempty"`
}

// TrackerRequest is a product's tracker target as PUT sends it; the
// secret may be left out to keep the one set.
type TrackerRequest struct {
	WebhookURL string `json:"webhookUrl"`
	Secret     string `json:"secret,omitempty"`
}

// ProfileRequest is the JSON form of a profile (PUT
// /fleet/profiles/{name}): the Markdown document as a string. It may also
// be sent raw as text/markdown.
type ProfileRequest struct {
	Profile *string `json:"profile"`
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

// ForgeDelivery is the answer to a forge webhook delivery: what it did
// (applied, ignored or duplicate) and why.
type ForgeDelivery struct {
	Outcome string `json:"outcome"`
	Message string `json:"message"`
}
