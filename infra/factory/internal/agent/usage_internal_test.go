package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestUsageMeter: the usage file is read leniently (absent or empty is
// nothing yet, other fields are ignored) and cumulatively: a file that is
// half-written, rewritten lower or removed never lowers the figures.
func TestUsageMeter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "usage.json")
	var m usageMeter
	write := func(s string) {
		require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
	}
	_, ok, err := m.read(path)
	require.NoError(t, err)
	require.False(t, ok, "absent")
	write("")
	_, ok, err = m.read(path)
	require.NoError(t, err)
	require.False(t, ok, "empty")

	write(`{"usd": 0.25, "inputTokens": 1000, "outputTokens": 200, "model": "x", "num_turns": 3}`)
	u, ok, err := m.read(path)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, fleet.Usage{USD: 0.25, InputTokens: 1000, OutputTokens: 200}, u)

	write(`{"usd": 0.3, "inputTo`)
	u, _, err = m.read(path)
	require.Error(t, err, "half-written")
	require.Equal(t, 0.25, u.USD)
	write(`{"usd": 0.1, "inputTokens": 5000}`)
	u, _, err = m.read(path)
	require.NoError(t, err)
	require.Equal(t, fleet.Usage{USD: 0.25, InputTokens: 5000, OutputTokens: 200}, u)
	write(`{"usd": -1}`)
	_, _, err = m.read(path)
	require.Error(t, err)
	require.NoError(t, os.Remove(path))
	u, ok, err = m.read(path)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 0.25, u.USD)
}
