package api

import (
	"encoding/json"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Page is one page of a listing: {items, cursor}; Cursor is "" on the
// last page.
type Page[T any] struct {
	Items  []T    `json:"items"`
	Cursor string `json:"cursor"`
}

// List is a listing answered whole: {items}.
type List[T any] struct {
	Items []T `json:"items"`
}

// JobPage is one page of GET /fleet/jobs.
type JobPage = Page[*fleet.Job]

// SubmitRequest is the JSON form of a submission (POST /fleet/jobs); the
// manifest may also be sent raw as text/markdown.
type SubmitRequest struct {
	Manifest *string `json:"manifest"`
}

// Submitted is the answer to a submission (POST /fleet/jobs): the job,
// and what the coordinator saw that will keep it from running (a
// capability or repo no enrolled factory offers), said at once so the
// person submitting sees it. The job is stored all the same: the fleet may
// change.
type Submitted struct {
	fleet.Job
	Warnings []string `json:"warnings,omitempty"`
}

// PatchRequest is a holder's fenced update (PATCH /fleet/jobs/{id}). Stage
// is left out when only the checkpoint changes.
type PatchRequest struct {
	Stage      *fleet.Stage `json:"stage,omitempty"`
	LeaseEpoch *int64       `json:"leaseEpoch,omitempty"`
	Checkpoint *string      `json:"checkpoint,omitempty"`
	// Usage, Head and Diff report on the run; the delivering patch carries
	// its final usage, the head it pushed and the diff stat.
	Usage *fleet.Usage    `json:"usage,omitempty"`
	Head  *string         `json:"head,omitempty"`
	Diff  *fleet.DiffStat `json:"diff,omitempty"`
	// EngineFacts are what a structured engine said of the run.
	fleet.EngineFacts
}

// ActionRequest is the optional body of POST
// /fleet/jobs/{id}/actions/{action}.
type ActionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ChildrenRequest is POST /fleet/jobs/{id}/children: each child is a
// manifest string or {"manifest": "..."} (ChildManifest makes either).
type ChildrenRequest struct {
	LeaseEpoch *int64            `json:"leaseEpoch,omitempty"`
	Children   []json.RawMessage `json:"children"`
}

// ChildManifests is the children entries of manifests sent as strings.
func ChildManifests(manifests []string) []json.RawMessage {
	out := make([]json.RawMessage, len(manifests))
	for i, m := range manifests {
		out[i], _ = json.Marshal(m) // a string always encodes
	}
	return out
}

// ReviewRequest is POST /fleet/jobs/{id}/review/request.
type ReviewRequest struct {
	LeaseEpoch *int64   `json:"leaseEpoch,omitempty"`
	Reviewers  []string `json:"reviewers,omitempty"`
	Quorum     *int     `json:"quorum,omitempty"`
	Head       *string  `json:"head,omitempty"`
}

// VoteRequest is an operator's POST /fleet/jobs/{id}/review.
type VoteRequest struct {
	Approve *bool   `json:"approve"`
	Comment string  `json:"comment,omitempty"`
	Head    *string `json:"head"`
}

// UsageRequest is a holder's cumulative usage report of its run (POST
// /fleet/jobs/{id}/usage).
type UsageRequest struct {
	LeaseEpoch   *int64   `json:"leaseEpoch"`
	USD          *float64 `json:"usd"`
	InputTokens  *int64   `json:"inputTokens,omitempty"`
	OutputTokens *int64   `json:"outputTokens,omitempty"`
	// CacheReadTokens and CacheWriteTokens: a structured engine's prompt
	// cache figures (optional).
	CacheReadTokens  *int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens *int64 `json:"cacheWriteTokens,omitempty"`
	// Engine names the engine running the job (optional).
	Engine string `json:"engine,omitempty"`
	// EngineFacts are what a structured engine said of the run so far.
	fleet.EngineFacts
}

// ProductChange is one change in the answer of GET /fleet/events: what
// the product stream would send as id, event and data.
type ProductChange struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// ProductChanges is GET /fleet/events: the changes after `after`, and the
// position to pass as the next `after` (also when there were none).
type ProductChanges struct {
	Items    []ProductChange `json:"items"`
	Position string          `json:"position"`
}
