package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestRunCells: a run's table cells stay on one line whatever its reason.
func TestRunCells(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", "-"},
		{"delivered for testing", "delivered for testing"},
		{"\n  exit status 1\npanic: boom\n", "exit status 1 …"},
		{strings.Repeat("x", 50), strings.Repeat("x", 39) + "…"},
	} {
		require.Equal(t, c.want, oneLine(c.in, 40), "%q", c.in)
	}
	require.Equal(t, "$4.25 9.0k/800 tok", usageCell(fleet.Usage{USD: 4.25, InputTokens: 9000, OutputTokens: 800}))
	require.Equal(t, "-", usageCell(fleet.Usage{}))
	require.Equal(t, "claude-sonnet-4 12t", engineCell(fleet.Run{EngineFacts: fleet.EngineFacts{Model: "claude-sonnet-4", Turns: 12}}))
	require.Equal(t, "shell", engineCell(fleet.Run{Engine: "shell"}))
}
