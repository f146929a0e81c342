package coord_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/schedule"
)

// TestNewRejectsInvalidConfig: a configuration that cannot work fails at
// construction with an invalid error naming the field, instead of a
// coordinator that misbehaves later.
func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	st, _ := openStore(t)
	nanWeights := schedule.DefaultWeights
	nanWeights.Load = math.NaN()
	negWeights := schedule.DefaultWeights
	negWeights.Starvation = -1
	tests := []struct {
		name  string
		cfg   coord.Config
		field string
	}{
		{"negative lease", coord.Config{LeaseTTL: -time.Second}, "config.leaseTTL"},
		{"negative stale", coord.Config{StaleAfter: -time.Second}, "config.staleAfter"},
		{"negative down", coord.Config{DownAfter: -1}, "config.downAfter"},
		{"negative backoff", coord.Config{RetryBackoff: -1}, "config.retryBackoff"},
		{"negative max backoff", coord.Config{MaxRetryBackoff: -1}, "config.maxRetryBackoff"},
		{"negative redispatch", coord.Config{RedispatchAfter: -1}, "config.redispatchAfter"},
		{"negative factory cache", coord.Config{FactoryCacheTTL: -1}, "config.factoryCacheTTL"},
		{"negative token cache", coord.Config{TokenCacheTTL: -1}, "config.tokenCacheTTL"},
		{"negative cancel grace", coord.Config{CancelGrace: -time.Second}, "config.cancelGrace"},
		{"stale after down", coord.Config{StaleAfter: time.Hour, DownAfter: time.Minute}, "config.staleAfter"},
		{"stale equals down", coord.Config{StaleAfter: time.Minute, DownAfter: time.Minute}, "config.staleAfter"},
		{"stale past the default down", coord.Config{StaleAfter: coord.DefaultDownAfter + time.Second}, "config.staleAfter"},
		{"negative prune", coord.Config{PruneAfter: -time.Hour}, "config.pruneAfter"},
		{"pruned before down", coord.Config{PruneAfter: coord.DefaultDownAfter}, "config.pruneAfter"},
		{"backoff cap below first", coord.Config{RetryBackoff: time.Hour, MaxRetryBackoff: time.Minute}, "config.maxRetryBackoff"},
		{"NaN weight", coord.Config{Weights: nanWeights}, "weights.load"},
		{"negative weight", coord.Config{Weights: negWeights}, "weights.starvation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := coord.New(tt.cfg, coord.Deps{Store: st, Clock: newFakeClock()})
			require.Nil(t, c)
			var fe *fleet.Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, fleet.CodeInvalid, fe.Code)
			require.Equal(t, tt.field, fe.Field)
		})
	}
}

// TestNewDefaults: zero fields take the defaults; a missing store or clock
// is refused.
func TestNewDefaults(t *testing.T) {
	t.Parallel()
	st, _ := openStore(t)
	c, err := coord.New(coord.Config{StaleAfter: time.Minute}, coord.Deps{Store: st, Clock: newFakeClock()})
	require.NoError(t, err)
	got := c.Config()
	require.Equal(t, time.Minute, got.StaleAfter, "a set field is kept")
	require.Equal(t, coord.DefaultLeaseTTL, got.LeaseTTL)
	require.Equal(t, coord.DefaultDownAfter, got.DownAfter)
	require.Equal(t, 7*24*time.Hour, got.PruneAfter)
	require.Equal(t, coord.DefaultMaxRetryBackoff, got.MaxRetryBackoff)
	require.Equal(t, coord.DefaultCancelGrace, got.CancelGrace)
	require.False(t, got.NoPreemption, "preemption is on by default")
	require.Equal(t, schedule.DefaultWeights, got.Weights)

	_, err = coord.New(coord.Config{}, coord.Deps{Clock: newFakeClock()})
	require.ErrorContains(t, err, "Store")
	_, err = coord.New(coord.Config{}, coord.Deps{Store: st})
	require.ErrorContains(t, err, "Clock")
}
