package config

import (
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/webhook"
)

// TestDurationDefaultsAreTheCoordinators: the documented defaults are
// written from coord's constants and read back to the same durations.
func TestDurationDefaultsAreTheCoordinators(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want time.Duration
		text string
	}{
		{LeaseTTL, coord.DefaultLeaseTTL, "5m"},
		{StaleAfter, coord.DefaultStaleAfter, "90s"},
		{DownAfter, coord.DefaultDownAfter, "10m"},
		{PruneAfter, coord.DefaultPruneAfter, "168h"},
		{RedispatchAfter, coord.DefaultRedispatchAfter, "2m"},
		{EchoBreakerCool, echo.DefaultBreakerCooldown, "30s"},
		{EchoDialTimeout, webhook.DefaultDialTimeout, "3s"},
		{EchoTLSTimeout, webhook.DefaultTLSTimeout, "3s"},
		{EchoHeaderTimeout, webhook.DefaultHeaderTimeout, "5s"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.text, Default(tt.name), tt.name)
		got, err := Lookup{Values: map[string]string{}}.Duration(tt.name)
		require.NoError(t, err)
		require.Equal(t, tt.want, got, tt.name)
	}
}

// TestCount: whole-number settings read their defaults and refuse
// anything but a positive number, naming the setting.
func TestCount(t *testing.T) {
	t.Parallel()
	n, err := Lookup{}.Count(EchoParallel)
	require.NoError(t, err)
	require.Equal(t, echo.DefaultParallel, n)
	n, err = Lookup{}.Count(EchoBreakerFails)
	require.NoError(t, err)
	require.Equal(t, echo.DefaultBreakerFailures, n)
	for _, bad := range []string{"0", "-1", "four", "1.5"} {
		_, err := Lookup{Values: map[string]string{EchoParallel: bad}}.Count(EchoParallel)
		require.ErrorContains(t, err, EchoParallel, bad)
	}
}

// TestSweepSchedulesTickInDifferentSeconds: over an hour (the longest
// period among them), no two of the default timer schedules fire in the
// same second, so the sweeps' looks never land on an instance at once.
func TestSweepSchedulesTickInDifferentSeconds(t *testing.T) {
	t.Parallel()
	parser := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).Add(-time.Second)
	end := start.Add(time.Hour + time.Second)
	fired := map[time.Time]string{}
	for _, name := range []string{ReaperSchedule, RedispatchSched, GCSchedule, PruneSchedule, EchoSchedule, ForgeSchedule} {
		sched, err := parser.Parse(Default(name))
		require.NoError(t, err, name)
		n := 0
		for at := sched.Next(start); at.Before(end); at = sched.Next(at) {
			require.NotContains(t, fired, at, "%s and %s both fire at %s", name, fired[at], at.Format(time.TimeOnly))
			fired[at] = name
			n++
		}
		require.Positive(t, n, "%s fires within the hour", name)
	}
}
