package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
)

// TestCheckEngines: each engine's version command runs and its answer is
// printed; a missing program fails the check and says so.
func TestCheckEngines(t *testing.T) {
	bin, err := filepath.Abs("internal/engine/stream/testdata/bin")
	require.NoError(t, err)
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	cfg, err := config.Parse([]string{"--check-engines", "--engine", "claude", "--engine", "codex"}, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.True(t, checkEngines(context.Background(), cfg, &out), out.String())
	require.Equal(t, "engine claude (preset claude): "+bin+"/claude: 2.1.197 (Claude Code; fake)\n"+
		"engine codex (preset codex): "+bin+"/codex: codex-cli 0.171.0 (fake)\n", out.String())

	cfg, err = config.Parse([]string{"--check-engines", "--engine", "claude", "--engine", "aider=aider-not-installed --message @prompt"}, nil)
	require.NoError(t, err)
	out.Reset()
	require.False(t, checkEngines(context.Background(), cfg, &out))
	require.Contains(t, out.String(), "engine aider (template): MISSING: aider-not-installed is not on PATH\n")
	require.Contains(t, out.String(), "engine claude (preset claude): "+bin+"/claude: 2.1.197")
}
