package clocktest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
)

var _ clock.Clock = (*clocktest.Clock)(nil)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := clocktest.New(t0)
	require.Equal(t, t0, c.Now())
	c.Advance(time.Minute)
	require.Equal(t, t0.Add(time.Minute), c.Now())
	c.Set(t0)
	require.Equal(t, t0, c.Now())
}
