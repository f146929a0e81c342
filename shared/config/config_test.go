package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
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
		{RedispatchAfter, coord.DefaultRedispatchAfter, "2m"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.text, Default(tt.name), tt.name)
		got, err := Lookup{Values: map[string]string{}}.Duration(tt.name)
		require.NoError(t, err)
		require.Equal(t, tt.want, got, tt.name)
	}
}
