package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
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

// TestExplainSaysUnroutableOnce: the scheduler's reason and the
// dispatcher's record carry the same "unroutable: " text; explain prints
// the word once, and the dispatcher's record only when it differs.
func TestExplainSaysUnroutableOnce(t *testing.T) {
	t.Parallel()
	const why = "unroutable: no factory has capability gpu:h100"
	for _, c := range []struct {
		name       string
		dispatcher string
		want       [][2]string
	}{
		{"same", why, [][2]string{{"unroutable", "no factory has capability gpu:h100"}}},
		{"differs", "no eligible factory: 1 is at its seat limit", [][2]string{{"unroutable", "no factory has capability gpu:h100"},
			{"dispatcher", "1 is at its seat limit (no eligible factory, when it last routed)"}}},
	} {
		e := &api.Explanation{JobID: "j1", Stage: fleet.StageQueued, Dispatch: fleet.Dispatch{Unroutable: c.dispatcher},
			Schedule: api.ScheduleExplanation{Reason: why}}
		var out strings.Builder
		a := &app{env: Env{Stdout: &out}}
		kv := explainFields(e)
		require.NoError(t, a.fields(kv))
		require.Equal(t, 1, strings.Count(out.String(), "unroutable"), "%s:\n%s", c.name, out.String())
		require.Equal(t, c.want, kv[4:], c.name)
	}
}
