package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestRunUploadsArtifacts: every run uploads the engine's output and its
// diff under its lease epoch before it hands the job on — a delivered run
// and a failed one alike.
func TestRunUploadsArtifacts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, engine string
		stage        fleet.Stage
		log, diff    string
	}{
		{"delivered", `sh -c 'echo hello from the engine; echo made > made.txt'`, fleet.StageShipped, "hello from the engine", "+made"},
		{"failed", `sh -c 'echo half > half.txt; echo the model gave up; exit 3'`, fleet.StageFailed, "the model gave up", "+half"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			repo := newGitRepo(t, root)
			coord := newFakeCoord("j1", "app")
			a := newGitAgent(t, root, repo, coord, tc.engine)
			r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
			waitRun(t, r, "the run")
			a.jobs.Wait()

			job, _ := coord.GetJob(context.Background(), "p", "j1")
			require.Equal(t, tc.stage, job.Stage)
			ups := coord.uploaded()
			require.Len(t, ups, 2, "%+v", ups)
			byName := map[string]upload{}
			for _, u := range ups {
				require.EqualValues(t, 1, u.epoch)
				byName[u.name] = u
			}
			require.Equal(t, fleet.ArtifactLog, byName[artifactLog].kind)
			require.Contains(t, byName[artifactLog].body, tc.log)
			require.Equal(t, fleet.ArtifactDiff, byName[artifactDiff].kind)
			require.Contains(t, byName[artifactDiff].body, tc.diff)
		})
	}
}
