package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

func TestFactoryServes(t *testing.T) {
	t.Parallel()
	require.True(t, (&fleet.Factory{}).Serves("p1"), "no products listed: serves every product")
	f := &fleet.Factory{Products: []string{"p1", "p2"}}
	require.True(t, f.Serves("p1"))
	require.True(t, f.Serves("p2"))
	require.False(t, f.Serves("p3"))
	require.False(t, f.Serves("P1"))
	require.False(t, f.Serves(""))
}

func TestEffectiveCapabilities(t *testing.T) {
	t.Parallel()
	caps := make([]string, 2, 8) // spare capacity: an append in place would show
	copy(caps, []string{"os:linux", "has:git"})
	f := &fleet.Factory{Capabilities: caps, Repos: []string{"notes", "web"}}
	require.Equal(t, []string{"os:linux", "has:git", "repo:notes", "repo:web"}, f.EffectiveCapabilities())
	require.Equal(t, []string{"os:linux", "has:git"}, f.Capabilities, "declared capabilities untouched")
	require.Equal(t, []string{"", ""}, caps[2:4], "nothing appended into the declared list's spare room")
	require.Empty(t, (&fleet.Factory{}).EffectiveCapabilities())
}

func TestFreeSeats(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ limit, load, want int }{
		{2, 0, 2}, {2, 1, 1}, {2, 2, 0}, {2, 5, 0}, {0, 0, 0}, {0, 3, 0},
	} {
		require.Equal(t, tt.want, (&fleet.Factory{SeatLimit: tt.limit, Load: tt.load}).FreeSeats(), "%+v", tt)
	}
}

func TestParseHealth(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]fleet.Health{"": fleet.HealthOK, "ok": fleet.HealthOK,
		"degraded": fleet.HealthDegraded, "down": fleet.HealthDown} {
		got, err := fleet.ParseHealth("health", in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	// stale is derived from silence; a factory may not report it.
	for _, in := range []string{"stale", "OK", "healthy", " ok"} {
		_, err := fleet.ParseHealth("heartbeat.health", in)
		requireInvalid(t, err, "heartbeat.health")
	}
}

func TestProductOwns(t *testing.T) {
	t.Parallel()
	p := &fleet.Product{ID: "p1", Repos: []string{"notes", "web"}}
	require.True(t, p.Owns("notes"))
	require.False(t, p.Owns("Notes"))
	require.False(t, p.Owns("api"))
	require.False(t, (&fleet.Product{}).Owns("notes"))
}
