package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEngineFactsMerge: reports of a run may arrive out of order, so turns
// and last activity never go back, and the rest is taken when set.
func TestEngineFactsMerge(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)
	cur := EngineFacts{Session: "s1", Turns: 5, Model: "m1", LastActivityAt: at}
	cur.Merge(EngineFacts{Turns: 3, LastActivityAt: at.Add(-time.Minute)})
	require.Equal(t, EngineFacts{Session: "s1", Turns: 5, Model: "m1", LastActivityAt: at}, cur, "an older report lowers nothing")
	cur.Merge(EngineFacts{Session: "s2", Turns: 7, LastActivityAt: at.Add(time.Minute), Exit: &RunExit{Code: 0, Reason: ExitGrace}})
	require.Equal(t, EngineFacts{Session: "s2", Turns: 7, Model: "m1", LastActivityAt: at.Add(time.Minute),
		Exit: &RunExit{Code: 0, Reason: ExitGrace}}, cur)
	require.True(t, cur.Equal(cur))
	other := cur
	other.Exit = &RunExit{Code: 1, Reason: ExitGrace}
	require.False(t, cur.Equal(other), "exits compare by value")
}

func TestEngineFactsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		facts EngineFacts
		field string // "" for valid
	}{
		{"empty", EngineFacts{}, ""},
		{"a claude run", EngineFacts{Session: "0b7a1c52-5bd4-4f43-9d0e-6b8a3c1d2e4f", Turns: 4, Model: "claude-sonnet-4-5-20250929",
			Exit: &RunExit{Code: 0, Reason: ExitExited}}, ""},
		{"a model with a provider", EngineFacts{Model: "openai/gpt-5-codex"}, ""},
		{"killed by a signal", EngineFacts{Exit: &RunExit{Code: -1, Signal: "SIGKILL", Reason: ExitSignal}}, ""},
		{"a session that is a flag", EngineFacts{Session: "--fork-session"}, "engineSession"},
		{"a session with a space", EngineFacts{Session: "a b"}, "engineSession"},
		{"a session too long", EngineFacts{Session: string(make([]byte, 129))}, "engineSession"},
		{"a model with a quote", EngineFacts{Model: `m"`}, "model"},
		{"negative turns", EngineFacts{Turns: -1}, "turns"},
		{"an exit status past 255", EngineFacts{Exit: &RunExit{Code: 256, Reason: ExitExited}}, "exit.code"},
		{"an unknown exit reason", EngineFacts{Exit: &RunExit{Reason: "bored"}}, "exit.reason"},
		{"a signal that is not a name", EngineFacts{Exit: &RunExit{Code: -1, Signal: "9 9", Reason: ExitSignal}}, "exit.signal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.facts.Validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field)
		})
	}
}

// TestFailureKindAttempts: only a rate limit is free of an attempt.
func TestFailureKindAttempts(t *testing.T) {
	t.Parallel()
	for _, k := range FailureKinds() {
		require.Equal(t, k != FailRateLimited, k.SpendsAttempt(), k)
		got, err := ParseFailureKind("kind", string(k))
		require.NoError(t, err)
		require.Equal(t, k, got)
	}
	_, err := ParseFailureKind("kind", "sleepy")
	require.ErrorContains(t, err, "unknown failure kind \"sleepy\"")
}

// TestUsageMaxCache: the cache figures merge by maximum like the others.
func TestUsageMaxCache(t *testing.T) {
	t.Parallel()
	a := Usage{USD: 1, CacheReadTokens: 10, CacheWriteTokens: 2}
	b := Usage{USD: 0.5, CacheReadTokens: 4, CacheWriteTokens: 9}
	require.Equal(t, Usage{USD: 1, CacheReadTokens: 10, CacheWriteTokens: 9}, a.Max(b))
	require.ErrorContains(t, Usage{CacheWriteTokens: -1}.Validate("usage"), "usage.cacheWriteTokens")
}

// TestJobForgeMemory: a job remembers the deliveries it applied (the
// newest MaxForgeDeliveries) and keeps the newest MaxFeedback items with
// bounded bodies.
func TestJobForgeMemory(t *testing.T) {
	t.Parallel()
	j := &Job{}
	require.False(t, j.SeenDelivery("d1", "sha-a"))
	require.True(t, j.SeenDelivery("d2", "sha-a"), "the same body under another delivery id is a replay")
	require.True(t, j.SeenDelivery("d1"), "a redelivery keeps its id")
	for i := range MaxForgeDeliveries {
		j.SeenDelivery(time.Duration(i).String())
	}
	require.Len(t, j.ForgeDeliveries, MaxForgeDeliveries)
	require.False(t, j.SeenDelivery("d1"), "the oldest are forgotten")

	for i := range MaxFeedback + 3 {
		j.AddFeedback(Feedback{Iteration: i, Body: string(make([]byte, MaxFeedbackBody+10))})
	}
	require.Len(t, j.Feedback, MaxFeedback)
	require.Equal(t, 3, j.Feedback[0].Iteration, "the newest are kept")
	require.LessOrEqual(t, len(j.Feedback[0].Body), MaxFeedbackBody)
	require.Equal(t, 1, (&Job{}).CurrentIteration())
}
