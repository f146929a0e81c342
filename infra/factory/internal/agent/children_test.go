package agent

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestEngineProposesChildren: manifests the engine writes to
// $FLEET_JOB_CHILDREN_DIR are posted (in name order, under the lease) in
// place of a delivery, after the work so far is checkpointed; the job is
// not delivered and the seat is free.
func TestEngineProposesChildren(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	engine := `sh -c 'echo plan > plan.txt
printf -- "---\nrepo: app\n---\nsecond\n" > "$FLEET_JOB_CHILDREN_DIR/b.md"
printf -- "---\nrepo: app\n---\nfirst\n" > "$FLEET_JOB_CHILDREN_DIR/a.md"
echo ignored > "$FLEET_JOB_CHILDREN_DIR/notes.txt"'`
	coord := newFakeCoord("j1", "app")
	a := newGitAgent(t, root, repo, coord, engine)
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.Equal(t, OutcomeDone, waitRun(t, r, "the run"))
	a.jobs.Wait()

	coord.mu.Lock()
	defer coord.mu.Unlock()
	require.Equal(t, []string{"---\nrepo: app\n---\nfirst\n", "---\nrepo: app\n---\nsecond\n"}, coord.children)
	require.Equal(t, fleet.StageBlocked, coord.job.Stage)
	require.Equal(t, "aq/wip/j1", coord.job.Checkpoint, "the plan is checkpointed for the job's next step")
	require.Equal(t, "plan", repo.show("aq/wip/j1", "plan.txt"))
	require.Empty(t, repo.ref("aq/job/j1"), "nothing is delivered")
	require.Empty(t, coord.fails)
	require.Zero(t, a.load())
}

// TestReviewFeedbackReachesEngine: the feedback of the rejection that
// sent the job back is the file $FLEET_JOB_REVIEW_FEEDBACK_FILE; the run
// resumes from the reviewed branch (the checkpoint is branch@sha) and is
// delivered for review again as branch@<new head>.
func TestReviewFeedbackReachesEngine(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	engine := `sh -c 'cp "$FLEET_JOB_REVIEW_FEEDBACK_FILE" feedback.txt; echo again >> work.txt'`
	coord := newFakeCoord("j1", "app")
	coord.job.Review = &fleet.Review{Quorum: 1, Feedback: "rename the flag"}
	a := newGitAgent(t, root, repo, coord, engine)
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.Equal(t, OutcomeDone, waitRun(t, r, "the first run"))
	head := repo.ref("aq/job/j1")
	coord.mu.Lock()
	require.Equal(t, fleet.StageReview, coord.job.Stage)
	require.Equal(t, "aq/job/j1@"+head, coord.job.Checkpoint, "delivered for review at its head")
	coord.job.Stage = fleet.StageQueued
	coord.mu.Unlock()
	require.Equal(t, "rename the flag", repo.show("aq/job/j1", "feedback.txt"))

	r = a.handle(context.Background(), transport.Delivery{ID: "claim:j1:2", Claimed: coord.claim()})
	require.Equal(t, OutcomeDone, waitRun(t, r, "the second run"))
	a.jobs.Wait()
	require.Equal(t, "again\nagain", repo.show("aq/job/j1", "work.txt"), "the second run resumed from the reviewed branch")
}

// endedCtxCoord is fakeCoord whose uploads and children posts fail once
// their context has ended, as the real client's do.
type endedCtxCoord struct{ *fakeCoord }

func (c endedCtxCoord) UploadArtifact(ctx context.Context, p, id string, a api.ArtifactUpload) (*fleet.Artifact, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.fakeCoord.UploadArtifact(ctx, p, id, a)
}

func (c endedCtxCoord) PostChildren(ctx context.Context, p, id string, r api.ChildrenRequest) ([]*fleet.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.fakeCoord.PostChildren(ctx, p, id, r)
}

// TestChildrenArtifactsNotLostWhenTheRunStops: a run whose context ends
// (here an operator's cancel) as it posts its children cannot upload its
// artifacts then; they are uploaded by the step that ends the run (the
// acknowledgement), each once. Before, the failed uploads counted as
// done: the acknowledgement uploaded nothing and the run's log and diff
// were lost without a word.
func TestChildrenArtifactsNotLostWhenTheRunStops(t *testing.T) {
	t.Parallel()
	jb, coord, _ := heldJob(t)
	jb.a.api = endedCtxCoord{coord}
	require.NoError(t, os.WriteFile(jb.logPath, []byte("the engine planned\n"), 0o600))
	jb.write(t, "plan.txt", "plan")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errCancelRequested)
	jb.ctx = ctx

	require.Equal(t, OutcomeStopped, jb.postChildren([]string{"---\nrepo: app\n---\nchild\n"}))
	var names []string
	for _, u := range coord.uploaded() {
		names = append(names, u.name)
	}
	require.ElementsMatch(t, []string{artifactLog, artifactDiff}, names, "the run's artifacts are uploaded, each once")
	require.Contains(t, coord.artifact(artifactLog), "the engine planned")
	require.Contains(t, coord.artifact(artifactDiff), "+plan")
	coord.mu.Lock()
	defer coord.mu.Unlock()
	require.Empty(t, coord.children)
	require.Len(t, coord.acks, 1, "the cancel is acknowledged")
}
