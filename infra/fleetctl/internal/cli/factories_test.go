package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestHealthText: draining and each engine cooldown still running show in
// the health column; a cooldown that is over does not.
func TestHealthText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	f := &fleet.Factory{Health: fleet.HealthOK, Draining: true, Cooldowns: map[string]time.Time{
		"engine:codex": now.Add(90 * time.Second), "engine:claude": now.Add(10 * time.Minute), "engine:devin": now,
	}}
	require.Equal(t, "ok,draining,cooling:claude(10m0s),cooling:codex(1m30s)", healthText(f, now))
	require.Equal(t, "ok", healthText(&fleet.Factory{Health: fleet.HealthOK}, now))
}

// TestPullRequestFields: jobs show names a job's pull request, a failing
// sync, its iteration and each feedback's first line.
func TestPullRequestFields(t *testing.T) {
	t.Parallel()
	j := &fleet.Job{Iteration: 2, PullRequest: &fleet.PullRequest{Repo: "acme/app", Number: 7, URL: "https://github.com/acme/app/pull/7", State: fleet.PROpen},
		PRSync: &fleet.PRSync{Attempts: 2, LastError: "forge: transient (HTTP 502)\nmore"},
		Feedback: []fleet.Feedback{{Iteration: 2, Source: fleet.FeedbackReview, Author: "alice", Body: "Add a test.\nAnd docs."},
			{Iteration: 2, Source: fleet.FeedbackCheck, Name: "ci", Body: "1 test failed"}}}
	require.Equal(t, [][2]string{
		{"pullRequest", "acme/app#7 open https://github.com/acme/app/pull/7"},
		{"pullRequestSync", "failed 2 times: forge: transient (HTTP 502) …"},
		{"iteration", "2"},
		{"feedback (iteration 2)", "review by alice: Add a test. …"},
		{"feedback (iteration 2)", "check ci: 1 test failed"},
	}, pullRequestFields(j))
	require.Empty(t, pullRequestFields(&fleet.Job{}), "nothing for a job without a forge")
}

// TestWhereItRuns: explain says where a running job runs and where an
// ended or delivered one ran, and nothing for one still in the queue.
func TestWhereItRuns(t *testing.T) {
	t.Parallel()
	runs := []fleet.Run{{FactoryID: "f1", LeaseEpoch: 1, Result: fleet.RunFailed}, {FactoryID: "f2", LeaseEpoch: 2, Result: fleet.RunSucceeded}}
	for _, tc := range []struct {
		job  fleet.Job
		want [2]string
	}{
		{fleet.Job{Stage: fleet.StageBuilding, HolderFactoryID: "f3", LeaseEpoch: 3, Runs: runs}, [2]string{"runs on", "f3 (lease epoch 3)"}},
		{fleet.Job{Stage: fleet.StageShipped, Runs: runs}, [2]string{"ran on", "f2 (run 2, succeeded); now shipped"}},
		{fleet.Job{Stage: fleet.StageReview, Runs: runs[:1]}, [2]string{"ran on", "f1 (run 1, failed); now review"}},
		{fleet.Job{Stage: fleet.StageQueued, Runs: runs}, [2]string{}},
		{fleet.Job{Stage: fleet.StageShipped}, [2]string{}},
	} {
		require.Equal(t, tc.want, whereItRuns(&tc.job), tc.job.Stage)
	}
}
