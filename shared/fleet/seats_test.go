package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestSeatArithmetic: a capped product gives seats up to maxRunning and no
// more; a seat is keyed by job and epoch, so a second take of one job, or
// a free of another epoch, changes nothing; uncapped products never hold.
func TestSeatArithmetic(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seats := func(ids ...string) map[string]fleet.Seat {
		m := map[string]fleet.Seat{}
		for _, id := range ids {
			m[id] = fleet.Seat{LeaseEpoch: 1, At: now}
		}
		return m
	}
	for _, tc := range []struct {
		name        string
		max         int
		seats       map[string]fleet.Seat
		take        string
		wantHold    bool
		wantRunning int
	}{
		{name: "uncapped holds nothing", max: 0, seats: nil, take: "", wantHold: false, wantRunning: 0},
		{name: "room", max: 2, seats: seats("a"), take: "b", wantRunning: 2},
		{name: "full", max: 2, seats: seats("a", "b"), take: "c", wantHold: true, wantRunning: 2},
		{name: "over after a lowered cap", max: 1, seats: seats("a", "b"), take: "c", wantHold: true, wantRunning: 2},
		{name: "first seat", max: 1, seats: nil, take: "a", wantRunning: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &fleet.Product{ID: "p", MaxRunning: tc.max, Seats: tc.seats}
			require.Equal(t, tc.wantHold, p.SeatHold() != nil)
			if tc.take == "" {
				return
			}
			h := p.TakeSeat(tc.take, 1, now)
			require.Equal(t, tc.wantHold, h != nil)
			if h != nil {
				require.Equal(t, fleet.HoldSeatCap, h.Kind)
				require.Equal(t, tc.wantRunning, h.Running)
				require.Equal(t, tc.max, h.MaxRunning)
				require.Contains(t, h.Message, "maxRunning")
			}
			require.Equal(t, tc.wantRunning, p.Running())
		})
	}
}

func TestFreeSeatIsKeyedByEpoch(t *testing.T) {
	t.Parallel()
	p := &fleet.Product{ID: "p", MaxRunning: 1}
	require.Nil(t, p.TakeSeat("a", 3, time.Time{}))
	require.NotNil(t, p.SeatHold())
	require.False(t, p.FreeSeat("a", 2), "another run's seat")
	require.False(t, p.FreeSeat("b", 3), "another job's")
	require.True(t, p.FreeSeat("a", 3))
	require.False(t, p.FreeSeat("a", 3), "freeing twice frees once")
	require.Nil(t, p.SeatHold())
	require.Zero(t, p.Running())
}

func TestValidateMaxRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, true}, {1, true}, {fleet.MaxMaxRunning, true}, {-1, false}, {fleet.MaxMaxRunning + 1, false}} {
		err := fleet.ValidateMaxRunning("maxRunning", tc.n)
		if tc.ok {
			require.NoError(t, err, tc.n)
			continue
		}
		var fe *fleet.Error
		require.ErrorAs(t, err, &fe, tc.n)
		require.Equal(t, fleet.CodeInvalid, fe.Code)
		require.Equal(t, "maxRunning", fe.Field)
	}
}
