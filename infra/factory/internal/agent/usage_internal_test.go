package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/shared/clock"
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

// TestCurrentUsage: a structured engine's usage is its CLI's figures,
// which the usage file (the engine's to write) may raise field by field
// but never lower, so it cannot defeat budget.usd or under-report what
// the run cost; a template engine's is the file's.
func TestCurrentUsage(t *testing.T) {
	t.Parallel()
	const result = `{"type":"result","subtype":"success","is_error":false,"total_cost_usd":12.5,"num_turns":3,"session_id":"s1",` +
		`"usage":{"input_tokens":1000,"output_tokens":900}}`
	for _, tc := range []struct {
		name   string
		stream bool
		file   string
		want   fleet.Usage
		ok     bool
	}{
		{name: "stream", stream: true, want: fleet.Usage{USD: 12.5, InputTokens: 1000, OutputTokens: 900}, ok: true},
		{name: "a lower file", stream: true, file: `{"usd":0.01,"inputTokens":1,"outputTokens":1}`,
			want: fleet.Usage{USD: 12.5, InputTokens: 1000, OutputTokens: 900}, ok: true},
		{name: "a file that adds", stream: true, file: `{"usd":13,"inputTokens":1,"outputTokens":5000}`,
			want: fleet.Usage{USD: 13, InputTokens: 1000, OutputTokens: 5000}, ok: true},
		{name: "template engine", file: `{"usd":0.01,"inputTokens":1,"outputTokens":1}`,
			want: fleet.Usage{USD: 0.01, InputTokens: 1, OutputTokens: 1}, ok: true},
		{name: "nothing yet", stream: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			jb := &job{dir: t.TempDir(), log: slog.New(slog.DiscardHandler), ctx: context.Background()}
			if tc.stream {
				jb.out = stream.NewReader(engine.PresetClaude.Parser(stream.Price{}, stream.Usage{}), clock.System{})
				_, err := jb.out.Write([]byte(result + "\n"))
				require.NoError(t, err)
			}
			if tc.file != "" {
				require.NoError(t, os.WriteFile(jb.usagePath(), []byte(tc.file), 0o600))
			}
			u, _, ok := jb.current(context.Background())
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, u)
		})
	}
}
