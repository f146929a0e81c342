package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/logcap"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
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

// stalledUploads is a coordinator that stalls every artifact upload (it
// reads no more of the body): an upload has no whole-request timeout, so
// only its context ends it. Its failure reports need a live context.
type stalledUploads struct {
	*fakeCoord
	entered chan struct{}
}

func (c *stalledUploads) UploadArtifact(ctx context.Context, _, _ string, _ api.ArtifactUpload) (*fleet.Artifact, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (c *stalledUploads) Fail(ctx context.Context, r api.FailRequest) (*fleet.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.fakeCoord.Fail(ctx, r)
}

// TestStalledUploadLeavesTheReportItsTime: artifacts are best effort, and
// the report after them is what frees the lease: uploads are given up
// once the upload budget is spent (on the factory's clock), and the
// failure is reported. Before, they shared the report's two minutes, so a
// stalled upload used them all and the failure was never reported: the
// job waited for its lease to expire and a crash came back as a retry.
func TestStalledUploadLeavesTheReportItsTime(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	coord := &stalledUploads{fakeCoord: newFakeCoord("j1", "app"), entered: make(chan struct{}, 1)}
	a := newGitAgent(t, root, repo, coord, `sh -c 'echo the model gave up; exit 3'`)
	clk := clocktest.New(time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC))
	a.clock = clk
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.NotNil(t, r)
	select {
	case <-coord.entered:
	case <-r.done:
		t.Fatal("the run ended without uploading")
	}
	clk.Advance(uploadBudget)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the failure was not reported while an upload stalled")
	}
	require.Equal(t, OutcomeFailed, r.outcome)
	a.jobs.Wait()
	coord.mu.Lock()
	defer coord.mu.Unlock()
	require.Len(t, coord.fails, 1)
	require.True(t, strings.HasPrefix(coord.fails[0], "crash: "), coord.fails[0])
	require.Empty(t, coord.uploads)
}

// TestDiffCapped: the run's diff is written to the factory's disk within
// FLEET_ENGINE_LOG_MAX_BYTES, as its output is: a change past the cap (a
// runaway engine writing a huge file) keeps the diff's first bytes, one
// line saying how many were left out and its last lines. The run is
// delivered and its branch holds the whole change. Before, change.diff
// was written whole, whatever its size.
func TestDiffCapped(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	coord := newFakeCoord("j1", "app")
	a := newGitAgent(t, root, repo, coord, `sh -c 'seq 1 100000 > big.txt'`)
	a.cfg.EngineLogMax = logcap.MinMax
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.Equal(t, OutcomeDone, waitRun(t, r, "the run"), "fails: %q", coord.fails)
	a.jobs.Wait()

	require.True(t, strings.HasSuffix(repo.show("aq/job/j1", "big.txt"), "\n99999\n100000"), "the branch holds the whole change")
	diff := coord.artifact(artifactDiff)
	require.LessOrEqual(t, len(diff), logcap.MinMax, "change.diff is within the cap")
	require.True(t, strings.HasPrefix(diff, "diff --git a/big.txt b/big.txt\n"), "the head is kept: %q", diff[:min(len(diff), 100)])
	require.Regexp(t, `\n\[\d+ bytes of output left out here: this diff keeps at most 65536 bytes \(FLEET_ENGINE_LOG_MAX_BYTES\), the first and the last\]\n`, diff)
	require.True(t, strings.HasSuffix(diff, "\n+99999\n+100000\n"), "the last lines are kept: %q", diff[max(0, len(diff)-100):])
}

// TestSlowShipHookLeavesTheUploadsTheirTime: the push and the ship hook
// (up to five minutes) may take longer than a local step's time; the
// steps after them (the artifact uploads, the worktree's removal) get
// their own. Before, the whole delivery shared one local step's time
// from its commit on, so a ship hook that ran past it left the delivered
// run without its artifacts.
func TestSlowShipHookLeavesTheUploadsTheirTime(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	coord := newFakeCoord("j1", "app")
	// A lease long enough for the hook's run: its guard (half a lease, on
	// the factory's clock) outlasts it.
	coord.ttl = 10 * time.Minute
	a := newGitAgent(t, root, repo, coord, `sh -c 'echo the engine made it; echo made > made.txt'`)
	gates := t.TempDir()
	entered, gate := fifo(t, gates, "entered"), fifo(t, gates, "gate")
	a.cfg.ShipHook = `sh -c 'echo up > ` + entered + `; cat ` + gate + ` > /dev/null'`
	clk := clocktest.New(time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC))
	a.clock = clk
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.NotNil(t, r)
	waitUp(t, entered)
	clk.Advance(localTimeout) // the hook runs long
	openGate(t, gate)
	require.Equal(t, OutcomeDone, waitRun(t, r, "the run"), "fails: %q", coord.fails)
	a.jobs.Wait()

	job, _ := coord.GetJob(context.Background(), "p", "j1")
	require.Equal(t, fleet.StageShipped, job.Stage)
	require.Contains(t, coord.artifact(artifactDiff), "+made", "the diff was uploaded after the slow hook")
	require.Contains(t, coord.artifact(artifactLog), "the engine made it", "the log was uploaded after the slow hook")
}
