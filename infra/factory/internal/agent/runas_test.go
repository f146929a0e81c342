package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestEngineRunsAsAnotherUser: with FLEET_ENGINE_USER, a factory running
// as root runs its engine as that user (here the system's "nobody"). The
// engine works in its worktree, reads its prompt and uses git there, but
// cannot plant anything in the factory's mirror, read the factory's token
// file, or read the factory's environment; the factory commits and
// delivers its work as usual.
func TestEngineRunsAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("engines run as another user only when the factory runs as root")
	}
	t.Parallel()
	root := t.TempDir()
	// t.TempDir's directories are private; the engine's user must pass
	// through them to its worktree (the factory checks this at start).
	for p := root; p != filepath.Dir(p) && p != os.TempDir(); p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	repo := newGitRepo(t, root)
	tokenFile := filepath.Join(root, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("ft_secret\n"), 0o600))
	mirror := filepath.Join(root, "work", "mirrors", "app.git")
	engine := `sh -c 'id -u > uid.txt; printf %s "$HOME" > home.txt
cp "$FLEET_JOB_PROMPT_FILE" prompt-copy.txt
git status --porcelain > /dev/null 2> git-err.txt && echo ok > git-ok.txt
for f in ` + mirror + `/hooks/post-commit ` + mirror + `/config; do if echo x >> "$f"; then echo "$f" >> planted.txt; fi; done 2> /dev/null
cat ` + tokenFile + ` > stolen.txt 2> /dev/null || rm -f stolen.txt
cat /proc/$PPID/environ > parent-env.txt 2> /dev/null || rm -f parent-env.txt
echo done > result.txt'`
	coord := newFakeCoord("j1", "app")
	a := newGitAgent(t, root, repo, coord, engine)
	a.cfg.EngineUser = "nobody"
	u, err := a.engineUser()
	require.NoError(t, err)
	a.runAs = u

	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.Equal(t, OutcomeDone, waitRun(t, r, "the run"), "fails: %q", coord.fails)
	a.jobs.Wait()

	require.Equal(t, fleet.StageShipped, coord.job.Stage)
	require.Equal(t, "done", repo.show("aq/job/j1", "result.txt"))
	require.Equal(t, "65534", repo.show("aq/job/j1", "uid.txt"), "the engine ran as nobody")
	require.Equal(t, u.Home, repo.show("aq/job/j1", "home.txt"))
	require.Equal(t, "do it", repo.show("aq/job/j1", "prompt-copy.txt"), "the engine reads its prompt file")
	require.Equal(t, "ok", repo.show("aq/job/j1", "git-ok.txt"), "git works for the engine: %s", repo.show("aq/job/j1", "git-err.txt"))
	require.Empty(t, repo.show("aq/job/j1", "planted.txt"), "the engine wrote into the factory's mirror")
	require.Empty(t, repo.show("aq/job/j1", "stolen.txt"), "the engine read the token file")
	require.Empty(t, repo.show("aq/job/j1", "parent-env.txt"), "the engine read the factory's environment")
	cfg, err := os.ReadFile(filepath.Join(mirror, "config"))
	require.NoError(t, err)
	require.NotContains(t, string(cfg), "\nx\n")
}
