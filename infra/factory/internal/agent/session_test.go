package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/engine"
)

// TestMoveClaudeSessionFollowsNoPlantedLink: the engine's user owns the
// Claude config directory and can plant links in it for the factory, as
// root, to follow when it moves a session to a retry's worktree. None is
// followed out of projects/: a directory outside (standing for
// /usr/local/bin) keeps its owner and gets nothing renamed into it or out
// of it, and the move fails, so the retry starts a fresh session.
func TestMoveClaudeSessionFollowsNoPlantedLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the config directory to an engine user")
	}
	t.Parallel()
	const from, to = "/work/worktrees/app/j1-e1", "/work/worktrees/app/j1-e2"
	user := &engine.User{Name: "engine", UID: 4242, GID: 4242}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, projects, outside string) // as the engine would
	}{
		{"the new worktree's folder", func(t *testing.T, projects, outside string) {
			require.NoError(t, os.Symlink(outside, filepath.Join(projects, projectNames[0](to))))
		}},
		{"the old worktree's folder", func(t *testing.T, projects, outside string) {
			src := filepath.Join(projects, projectNames[0](from))
			require.NoError(t, os.RemoveAll(src))
			require.NoError(t, os.Symlink(outside, src))
		}},
		{"projects", func(t *testing.T, projects, outside string) {
			require.NoError(t, os.MkdirAll(filepath.Join(outside, projectNames[0](from)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(outside, projectNames[0](from), fixtureSession+".jsonl"), nil, 0o644))
			require.NoError(t, os.RemoveAll(projects))
			require.NoError(t, os.Symlink(outside, projects))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			config := filepath.Join(base, "home", ".claude")
			projects := filepath.Join(config, "projects")
			src := filepath.Join(projects, projectNames[0](from))
			require.NoError(t, os.MkdirAll(src, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(src, fixtureSession+".jsonl"), []byte("{}\n"), 0o600))
			require.NoError(t, os.Mkdir(filepath.Join(src, fixtureSession), 0o700))
			require.NoError(t, os.Chown(projects, 4242, 4242))
			outside := filepath.Join(base, "outside")
			require.NoError(t, os.Mkdir(outside, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(outside, fixtureSession+".jsonl"), nil, 0o644))
			tc.plant(t, projects, outside)
			before := listDir(t, outside)

			require.Error(t, moveClaudeSession(config, fixtureSession, from, to, user))
			fi, err := os.Stat(outside)
			require.NoError(t, err)
			require.Equal(t, uint32(0), fi.Sys().(*syscall.Stat_t).Uid, "the directory outside keeps its owner")
			require.Equal(t, before, listDir(t, outside), "nothing is moved into or out of the directory outside")
		})
	}
	t.Run("no link", func(t *testing.T) {
		t.Parallel()
		config := filepath.Join(t.TempDir(), ".claude")
		src := filepath.Join(config, "projects", projectNames[0](from))
		require.NoError(t, os.MkdirAll(src, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(src, fixtureSession+".jsonl"), []byte("{}\n"), 0o600))
		require.NoError(t, os.Chown(filepath.Join(config, "projects"), 4242, 4242))

		require.NoError(t, moveClaudeSession(config, fixtureSession, from, to, user))
		dst := filepath.Join(config, "projects", projectNames[0](to))
		require.FileExists(t, filepath.Join(dst, fixtureSession+".jsonl"))
		fi, err := os.Stat(dst)
		require.NoError(t, err)
		require.Equal(t, uint32(4242), fi.Sys().(*syscall.Stat_t).Uid, "the new folder is the engine's")
	})
}

// listDir is the names in dir.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}
