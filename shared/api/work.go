package api

import (
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// The worker routes' bodies: claim, accept, fail and the lease.

// ClaimRequest is the optional body of POST /fleet/claim.
type ClaimRequest struct {
	// RequestID makes the claim safe to retry: the same id again answers
	// the lease the first try took (API.md names no field; this one, or
	// the Idempotency-Key header, is the project's choice).
	RequestID string `json:"requestId,omitempty"`
}

// HeaderIdempotencyKey carries a claim's request id as a header instead.
const HeaderIdempotencyKey = "Idempotency-Key"

// Claimed (the answer of claim and accept) and Renewal (of a lease
// renewal) are defined with the worker protocol, which the coordinator
// speaks without linking this package's HTTP client; the contract names
// them here.
type (
	Claimed = protocol.Claimed
	Renewal = protocol.Renewal
)

// AcceptRequest is POST /fleet/accept: the dispatch message's job and
// epoch, and its product (which saves a lookup).
type AcceptRequest struct {
	JobID         string `json:"jobId"`
	DispatchEpoch *int64 `json:"dispatchEpoch"`
	ProductID     string `json:"productId,omitempty"`
}

// FailRequest is POST /fleet/fail.
type FailRequest struct {
	JobID      string  `json:"jobId"`
	LeaseEpoch *int64  `json:"leaseEpoch"`
	Reason     *string `json:"reason"`
	Retryable  *bool   `json:"retryable"`
	ProductID  string  `json:"productId,omitempty"`
	// Usage is the run's final usage, when the holder knows it.
	Usage *fleet.Usage `json:"usage,omitempty"`
	// Kind classifies the failure (optional); rate_limited spends no attempt.
	Kind fleet.FailureKind `json:"kind,omitempty"`
	// EngineFacts are what a structured engine said of the run.
	fleet.EngineFacts
	// Cooldowns ("engine:<name>" -> until) are added to the failing
	// factory's, as a heartbeat's would be, before the job is given back:
	// how an elastic pool's execution, which sends no heartbeat, reports
	// the rate limit that ended its run.
	Cooldowns map[string]time.Time `json:"cooldowns,omitempty"`
}

// LeaseRequest is POST /fleet/jobs/{id}/lease/renew.
type LeaseRequest struct {
	LeaseEpoch *int64 `json:"leaseEpoch"`
}

// ReleaseRequest is POST /fleet/jobs/{id}/lease/release: plain, or
// acknowledging a cancel or a preemption with the checkpoint the holder
// pushed on the way out.
type ReleaseRequest struct {
	LeaseEpoch *int64                `json:"leaseEpoch"`
	Outcome    *fleet.ReleaseOutcome `json:"outcome,omitempty"`
	Checkpoint *string               `json:"checkpoint,omitempty"`
}
