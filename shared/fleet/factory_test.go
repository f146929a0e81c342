package fleet_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

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

// TestMergeCooldowns: a failure's cooldowns are added to the stored set:
// the later until wins per engine, what is over goes, and the set stays
// bounded by dropping the ones ending soonest.
func TestMergeCooldowns(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return now.Add(time.Duration(m) * time.Minute) }
	many := func(n, from int) map[string]time.Time {
		out := map[string]time.Time{}
		for i := range n {
			out[fmt.Sprintf("engine:e%02d", i)] = at(from + i)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		stored, in map[string]time.Time
		want       map[string]time.Time
	}{
		{name: "nothing", want: nil},
		{name: "added to none", in: map[string]time.Time{"engine:claude": at(5)}, want: map[string]time.Time{"engine:claude": at(5)}},
		{name: "the later until wins", stored: map[string]time.Time{"engine:claude": at(10), "engine:codex": at(1)},
			in:   map[string]time.Time{"engine:claude": at(5), "engine:codex": at(7)},
			want: map[string]time.Time{"engine:claude": at(10), "engine:codex": at(7)}},
		{name: "over ones dropped", stored: map[string]time.Time{"engine:claude": at(0)}, in: map[string]time.Time{"engine:codex": at(-1)}, want: nil},
		{name: "bounded, soonest dropped", stored: many(fleet.MaxCooldowns, 10), in: map[string]time.Time{"engine:late": at(100)},
			want: func() map[string]time.Time {
				m := many(fleet.MaxCooldowns, 10)
				delete(m, "engine:e00")
				m["engine:late"] = at(100)
				return m
			}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stored := maps.Clone(tc.stored)
			require.Equal(t, tc.want, fleet.MergeCooldowns(tc.stored, tc.in, now))
			require.Equal(t, stored, tc.stored, "the stored set is not changed in place")
		})
	}
}

// TestForgeReviewerLogins: a forge login is looked up as the forge compares
// logins, without regard to case; an unmapped login votes as itself unless
// it is a name the reviewers map another login to.
func TestForgeReviewerLogins(t *testing.T) {
	t.Parallel()
	f := &fleet.ForgeConfig{Reviewers: map[string]string{"Alice-GH": "alice"}}
	for _, login := range []string{"Alice-GH", "alice-gh", "ALICE-GH"} {
		require.True(t, f.Names(login), login)
		name, ok := f.ReviewerOf(login)
		require.True(t, ok, login)
		require.Equal(t, "alice", name, login)
	}
	require.False(t, f.Names("bob"))
	name, ok := f.ReviewerOf("bob")
	require.True(t, ok)
	require.Equal(t, "bob", name, "an unnamed login votes as itself")
	for _, login := range []string{"alice", "Alice"} {
		_, ok = f.ReviewerOf(login)
		require.False(t, ok, "%s would vote as the reviewer alice, whose login is Alice-GH", login)
	}
}
