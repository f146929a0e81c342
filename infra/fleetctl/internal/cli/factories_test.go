package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestHealthText: draining and each engine cooldown still running show in
// the health column; a cooldown that is over does not.
func TestHealthText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	f := &fleet.Factory{Health: fleet.HealthOK, Draining: true, Cooldowns: map[string]time.Time{
		"engine:codex": now.Add(90 * time.Second), "engine:claude": now.Add(10 * time.Minute), "engine:devin": now,
	}}
	require.Equal(t, "ok,draining,cooling:claude(10m0s),cooling:codex(1m30s)", healthText(f, now))
	require.Equal(t, "ok", healthText(&fleet.Factory{Health: fleet.HealthOK}, now))
}
