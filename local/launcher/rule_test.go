package launcher

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStarts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		strategy Strategy
		load     Load
		want     int64
	}{
		{"idle pool starts nothing", Accurate, Load{Depth: 0, PerExecution: 1, Max: 10}, 0},
		{"burst into an idle pool: one per message", Accurate, Load{Depth: 5, PerExecution: 1, Max: 10}, 5},
		{"burst capped at max", Accurate, Load{Depth: 15, PerExecution: 1, Max: 10}, 10},
		// Three executions busy with long runs and three new dispatches.
		// With complete-on-claim the depth is 3: default deducts the three
		// runs and starts none (accurate would start three).
		{"complete-on-claim: accurate is not held back", Accurate, Load{Depth: 3, PerExecution: 1, Running: 3, Max: 10}, 3},
		{"complete-on-claim: default is held back", Default, Load{Depth: 3, PerExecution: 1, Running: 3, Max: 10}, 0},
		// With the runs' messages held locked the depth is 6: default
		// starts exactly the three queued.
		{"held messages: default starts the queued ones", Default, Load{Depth: 6, PerExecution: 1, Running: 3, Max: 10}, 3},
		{"held messages: default fills up to max", Default, Load{Depth: 14, PerExecution: 1, Running: 7, Max: 10}, 3},
		{"held messages: an execution not yet holding its message is not started twice", Default, Load{Depth: 4, PerExecution: 1, Running: 4, Pending: 1, Max: 10}, 0},
		{"default: burst into an idle pool", Default, Load{Depth: 5, PerExecution: 1, Max: 10}, 5},
		// Started but not yet holding a message: its message is still in
		// the depth, so it must not be started for twice.
		{"pending executions cover their messages", Accurate, Load{Depth: 3, PerExecution: 1, Running: 5, Pending: 2, Max: 10}, 1},
		{"all pending: nothing more", Accurate, Load{Depth: 2, PerExecution: 1, Running: 2, Pending: 2, Max: 10}, 0},
		{"running plus wanted over max: fill up to max", Accurate, Load{Depth: 6, PerExecution: 1, Running: 7, Max: 10}, 3},
		{"at max: nothing", Accurate, Load{Depth: 6, PerExecution: 1, Running: 10, Max: 10}, 0},
		{"messages per execution round up", Accurate, Load{Depth: 5, PerExecution: 2, Max: 10}, 3},
		{"zero per execution means one", Accurate, Load{Depth: 2, Max: 10}, 2},
		{"more pending than wanted never goes negative", Accurate, Load{Depth: 1, PerExecution: 1, Running: 4, Pending: 4, Max: 10}, 0},
		{"no capacity", Accurate, Load{Depth: 3, PerExecution: 1, Max: 0}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Starts(tc.strategy, tc.load))
		})
	}
}

func TestParseStrategy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Strategy{"": Default, "accurate": Accurate, "default": Default} {
		got, err := ParseStrategy(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := ParseStrategy("custom")
	require.ErrorContains(t, err, `"custom"`)
}
