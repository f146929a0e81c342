package app

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/coord"
)

// TestPruneSettings: FLEET_PRUNE_AFTER reaches the coordinator (7 days
// unset), and a value that is not a positive Go duration stops start-up
// naming the setting.
func TestPruneSettings(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for value, want := range map[string]time.Duration{"": coord.DefaultPruneAfter, "36h": 36 * time.Hour} {
		a, err := Open(t.Context(), testLookup(t, map[string]string{config.PruneAfter: value}), log)
		require.NoError(t, err)
		require.Equal(t, want, a.Coord.Config().PruneAfter, "%q", value)
		require.NoError(t, a.Close())
	}
	for _, bad := range []string{"0s", "-1h", "7d", "soon"} {
		_, err := Open(t.Context(), testLookup(t, map[string]string{config.PruneAfter: bad}), log)
		require.ErrorContains(t, err, config.PruneAfter, bad)
		require.ErrorContains(t, err, "positive Go duration", bad)
	}
}
