package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

var b0 = time.Date(2026, 5, 10, 9, 0, 0, 0, time.UTC)

func newBudget(ceiling float64) *fleet.ProductBudget {
	return &fleet.ProductBudget{ID: "p1", ProductID: "p1", CeilingUSD: ceiling, Period: fleet.PeriodMonth,
		PeriodStart: fleet.PeriodStartAt(fleet.PeriodMonth, b0, b0), AlertAt: 0.8, AutoPause: true, CreatedAt: b0}
}

// TestBudgetAdmitArithmetic: spent + reserved + estimate <= ceiling, in
// exact cents: three 0.1 reservations fill a 0.3 ceiling, a fourth does not.
func TestBudgetAdmitArithmetic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		spent    float64
		reserved []float64
		estimate float64
		admit    bool
	}{
		{"empty budget, job at the ceiling", 0, nil, 0.3, true},
		{"float sums that are not exact in binary", 0.1, []float64{0.1}, 0.1, true},
		{"one cent over", 0.1, []float64{0.1}, 0.11, false},
		{"reservations count like spend", 0, []float64{0.1, 0.1, 0.1}, 0.01, false},
		{"zero estimate fits a full budget", 0.3, nil, 0, true},
		{"zero estimate does not fit an overspent one", 0.31, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBudget(0.3)
			b.SpentUSD = tc.spent
			for i, r := range tc.reserved {
				require.Nil(t, b.Reserve(string(rune('a'+i)), 1, r, b0))
			}
			h := b.Admit(tc.estimate)
			require.Equal(t, tc.admit, h == nil, "hold: %v", h)
			if h != nil {
				require.Equal(t, fleet.HoldCeiling, h.Kind)
			}
		})
	}
}

// TestBudgetReserveSettle: a reservation holds its estimate until it
// settles with the real usage; settling twice, or a run it was not made
// for, counts nothing.
func TestBudgetReserveSettle(t *testing.T) {
	t.Parallel()
	b := newBudget(1)
	b.DefaultJobUSD = 0.25
	require.InDelta(t, 0.25, b.Estimate(fleet.Budget{}), 1e-9)
	require.InDelta(t, 0.4, b.Estimate(fleet.Budget{USD: 0.4}), 1e-9)

	require.Nil(t, b.Reserve("j1", 1, 0.4, b0))
	require.Nil(t, b.Reserve("j2", 1, 0.4, b0))
	require.InDelta(t, 0.8, b.ReservedUSD(), 1e-9)
	require.InDelta(t, 0.2, b.RemainingUSD(), 1e-9)
	require.NotNil(t, b.Reserve("j3", 1, 0.4, b0), "0.8 reserved + 0.4 > 1")

	require.False(t, b.Settle("j1", 2, 0.1, b0), "another run of j1")
	require.True(t, b.Settle("j1", 1, 0.1, b0.Add(time.Minute)))
	require.False(t, b.Settle("j1", 1, 0.1, b0.Add(time.Minute)), "settled twice")
	require.InDelta(t, 0.1, b.SpentUSD, 1e-9)
	require.InDelta(t, 0.4, b.ReservedUSD(), 1e-9)
	require.Equal(t, []fleet.BurnPoint{{At: b0.Add(time.Minute), SpentUSD: 0.1}}, b.Points)
	require.Nil(t, b.Reserve("j3", 1, 0.4, b0), "room again once j1 spent less than it reserved")
	require.False(t, b.Paused)
}

// TestBudgetAutoPause: spend reaching the ceiling pauses the product (with
// autoPause), which holds every job, even one estimated at zero.
func TestBudgetAutoPause(t *testing.T) {
	t.Parallel()
	for _, auto := range []bool{true, false} {
		b := newBudget(1)
		b.AutoPause = auto
		require.Nil(t, b.Reserve("j1", 1, 0.5, b0))
		require.True(t, b.Settle("j1", 1, 1.2, b0))
		require.Equal(t, auto, b.Paused)
		h := b.Admit(0)
		require.NotNil(t, h)
		if auto {
			require.Equal(t, fleet.HoldPaused, h.Kind)
			require.Equal(t, fleet.PausedBudgetExhausted, *b.PausedReason)
			require.Equal(t, b0, b.PausedAt)
		} else {
			require.Equal(t, fleet.HoldCeiling, h.Kind)
		}
	}
}

// TestBudgetPeriodRollover: a monthly budget starts from zero on the first
// of the next month (UTC), lifting a pause spend caused but not an
// operator's; reservations of running jobs carry over. A total budget
// never rolls.
func TestBudgetPeriodRollover(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), fleet.PeriodStartAt(fleet.PeriodMonth, b0, b0))
	require.Equal(t, b0, fleet.PeriodStartAt(fleet.PeriodTotal, b0, b0.AddDate(1, 0, 0)))

	for _, tc := range []struct {
		name       string
		period     fleet.BudgetPeriod
		pause      fleet.PauseReason
		at         time.Time
		rolled     bool
		stillPause bool
	}{
		{"same month", fleet.PeriodMonth, fleet.PausedBudgetExhausted, time.Date(2026, 5, 31, 23, 59, 59, 0, time.UTC), false, true},
		{"next month lifts spend's pause", fleet.PeriodMonth, fleet.PausedBudgetExhausted, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), true, false},
		{"next month keeps an operator's pause", fleet.PeriodMonth, fleet.PausedOperator, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), true, true},
		{"a year later", fleet.PeriodMonth, fleet.PausedBudgetExhausted, time.Date(2027, 5, 2, 0, 0, 0, 0, time.UTC), true, false},
		{"total never rolls", fleet.PeriodTotal, fleet.PausedBudgetExhausted, time.Date(2027, 5, 2, 0, 0, 0, 0, time.UTC), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBudget(1)
			b.Period = tc.period
			b.PeriodStart = fleet.PeriodStartAt(tc.period, b0, b0)
			require.Nil(t, b.Reserve("j1", 1, 0.5, b0))
			require.Nil(t, b.Reserve("j2", 1, 0.3, b0))
			require.True(t, b.Settle("j1", 1, 1, b0))
			if tc.pause == fleet.PausedOperator {
				b.Unpause()
				b.Pause(fleet.PausedOperator, "audit", b0)
			}
			require.Equal(t, tc.rolled, b.Roll(tc.at))
			require.Equal(t, tc.stillPause, b.Paused)
			require.InDelta(t, 0.3, b.ReservedUSD(), 1e-9, "the running job's reservation carries over")
			if tc.rolled {
				require.Zero(t, b.SpentUSD)
				require.Empty(t, b.Points)
				require.Equal(t, fleet.PeriodStartAt(fleet.PeriodMonth, b0, tc.at), b.PeriodStart)
				require.True(t, b.Settle("j2", 1, 0.2, tc.at), "a run spanning the roll settles into the new period")
				require.InDelta(t, 0.2, b.SpentUSD, 1e-9)
			} else {
				require.InDelta(t, 1, b.SpentUSD, 1e-9)
			}
		})
	}
}

// TestBudgetForecastAndAlert: the forecast extrapolates the period's spend
// linearly from its start; null when nothing was spent or the month ends
// first; the point that reached the ceiling once it did.
func TestBudgetForecastAndAlert(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	b := newBudget(10)
	require.Nil(t, b.ForecastExhaustedAt())
	on, _ := b.Alerting()
	require.False(t, on)

	// 2 USD in the first 2 days: 10 USD on day 10.
	require.Nil(t, b.Reserve("j1", 1, 0, start))
	require.True(t, b.Settle("j1", 1, 2, start.Add(48*time.Hour)))
	require.Equal(t, start.Add(240*time.Hour), *b.ForecastExhaustedAt())

	// 1 USD in 20 days: 200 days, past the month's end.
	slow := newBudget(10)
	require.Nil(t, slow.Reserve("j1", 1, 0, start))
	require.True(t, slow.Settle("j1", 1, 1, start.Add(20*24*time.Hour)))
	require.Nil(t, slow.ForecastExhaustedAt())
	slow.Period = fleet.PeriodTotal
	require.Equal(t, start.Add(200*24*time.Hour), *slow.ForecastExhaustedAt(), "a total budget has no period end")

	// 8 USD: alert (0.8) since that point; 10: exhausted at that point.
	require.Nil(t, b.Reserve("j2", 1, 0, start))
	require.True(t, b.Settle("j2", 1, 6, start.Add(72*time.Hour)))
	on, since := b.Alerting()
	require.True(t, on)
	require.Equal(t, start.Add(72*time.Hour), since)
	b.Paused = false
	require.Nil(t, b.Reserve("j3", 1, 0, start))
	require.True(t, b.Settle("j3", 1, 2, start.Add(96*time.Hour)))
	require.Equal(t, start.Add(96*time.Hour), *b.ForecastExhaustedAt())
}

// TestUsageMax: cumulative reports merge by maximum, field by field.
func TestUsageMax(t *testing.T) {
	t.Parallel()
	a := fleet.Usage{USD: 1.5, InputTokens: 10, OutputTokens: 5}
	require.Equal(t, fleet.Usage{USD: 1.5, InputTokens: 20, OutputTokens: 5}, a.Max(fleet.Usage{USD: 1, InputTokens: 20, OutputTokens: 1}))
	require.Equal(t, a, a.Max(a))
	require.Error(t, fleet.Usage{USD: -1}.Validate("usage"))
}

// TestSpendSaturates: a period's spend sums figures of up to MaxUSD each;
// past int64's range in millionths it would wrap negative and admit every
// later job. It saturates instead, and stays spent.
func TestSpendSaturates(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	b := &fleet.ProductBudget{CeilingUSD: 100, AutoPause: true}
	for range 10000 { // 1e13 dollars in all: past int64 in millionths
		b.AddSpend(fleet.MaxUSD, now)
	}
	require.Equal(t, 1000*fleet.MaxUSD, b.SpentUSD, "saturated at a thousand times MaxUSD")
	require.Zero(t, b.RemainingUSD())
	b.PauseIfSpent(now)
	require.True(t, b.Paused)
}
