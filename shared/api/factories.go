package api

import (
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// EnrollRequest is POST /fleet/factories/enroll.
type EnrollRequest struct {
	FactoryID      string            `json:"factoryId"`
	Kind           fleet.FactoryKind `json:"kind,omitempty"`
	Products       []string          `json:"products,omitempty"`
	Capabilities   []string          `json:"capabilities,omitempty"`
	SeatLimit      int               `json:"seatLimit,omitempty"`
	CostPerHourUSD float64           `json:"costPerHourUsd,omitempty"`
}

// EnrollResponse carries the factory's token: the only time it is shown.
type EnrollResponse struct {
	FactoryID string         `json:"factoryId"`
	Token     string         `json:"token"`
	Factory   *fleet.Factory `json:"factory"`
}

// HeartbeatRequest is a factory's full report of itself (POST
// /fleet/factories/heartbeat): capabilities and repos replace what was
// stored, so both are required (send empty lists, not nil, for none).
type HeartbeatRequest struct {
	Capabilities []string     `json:"capabilities"`
	Repos        []string     `json:"repos"`
	Load         int          `json:"load"`
	Health       fleet.Health `json:"health"`
	SeatLimit    int          `json:"seatLimit"`
	// Cooldowns are the engines this factory's accounts may not use until
	// the time given ("engine:claude" -> until), after a rate limit; the
	// whole set, replacing what was stored.
	Cooldowns map[string]time.Time `json:"cooldowns,omitempty"`
}

// TokenResponse is a rotated factory token.
type TokenResponse struct {
	FactoryID string `json:"factoryId"`
	Token     string `json:"token"`
}

// Health is GET /healthz.
type Health struct {
	Status string `json:"status"`
}
