package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	review := &fleet.Review{Quorum: 1, Head: "aq/job/j1@abc"}
	pr := &fleet.PullRequest{Repo: "demo/demo", Number: 1, HeadSHA: "abc", State: fleet.PROpen}
	for _, tt := range []struct {
		name string
		t    tracked
		job  fleet.Job
		want action
	}{
		{"gated job in review is approved", tracked{role: roleReviewed}, fleet.Job{Stage: fleet.StageReview, Review: review}, actApprove},
		{"a head approved once is not approved again", tracked{role: roleReviewed, approved: review.Head}, fleet.Job{Stage: fleet.StageReview, Review: review}, actNone},
		{"a new head is approved", tracked{role: roleReviewed, approved: "aq/job/j1@old"}, fleet.Job{Stage: fleet.StageReview, Review: review}, actApprove},
		{"no head yet, no vote", tracked{role: roleReviewed}, fleet.Job{Stage: fleet.StageReview, Review: &fleet.Review{Quorum: 1}}, actNone},
		{"approved job in testing is shipped", tracked{role: roleReviewed}, fleet.Job{Stage: fleet.StageTesting}, actShip},
		{"a plain job in testing is left alone", tracked{role: rolePlain}, fleet.Job{Stage: fleet.StageTesting}, actNone},
		{"flaky job failed is requeued", tracked{role: roleFlaky}, fleet.Job{Stage: fleet.StageFailed}, actRequeue},
		{"flaky job requeued once only", tracked{role: roleFlaky, requeued: true}, fleet.Job{Stage: fleet.StageFailed}, actNone},
		{"a plain failure is left alone", tracked{role: rolePlain}, fleet.Job{Stage: fleet.StageFailed}, actNone},
		// The pull request job: changes once, then an approval of a later
		// iteration's head, never before its pull request is synced.
		{"no pull request yet", tracked{role: rolePR}, fleet.Job{Stage: fleet.StageReview, Review: review}, actNone},
		{"a sync still due", tracked{role: rolePR}, fleet.Job{Stage: fleet.StageReview, Review: review, PullRequest: pr, ForgeDue: true}, actNone},
		{"changes asked for once", tracked{role: rolePR}, fleet.Job{Stage: fleet.StageReview, Review: review, PullRequest: pr}, actAskChanges},
		{"then nothing on iteration 1", tracked{role: rolePR, asked: true}, fleet.Job{Stage: fleet.StageReview, Review: review, PullRequest: pr}, actNone},
		{"iteration 2 approved", tracked{role: rolePR, asked: true}, fleet.Job{Stage: fleet.StageReview, Review: review, PullRequest: pr, Iteration: 2}, actApprovePR},
		{"its head approved once", tracked{role: rolePR, asked: true, approved: pr.HeadSHA}, fleet.Job{Stage: fleet.StageReview, Review: review, PullRequest: pr, Iteration: 2}, actNone},
		{"shipped (merged) from testing", tracked{role: rolePR, asked: true}, fleet.Job{Stage: fleet.StageTesting, PullRequest: pr, Iteration: 2}, actShip},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, decide(&tt.t, tt.job))
		})
	}
}

func TestSettled(t *testing.T) {
	t.Parallel()
	all := func(mut func(map[string]*tracked)) map[string]*tracked {
		m := map[string]*tracked{}
		for i := range expectedJobs {
			m[string(rune('a'+i))] = &tracked{role: rolePlain, stage: fleet.StageShipped}
		}
		m["a"].role, m["a"].requeued = roleFlaky, true
		if mut != nil {
			mut(m)
		}
		return m
	}
	require.True(t, settled(all(nil)))
	require.False(t, settled(all(func(m map[string]*tracked) { delete(m, "b") })), "the children are not there yet")
	require.False(t, settled(all(func(m map[string]*tracked) { m["b"].stage = fleet.StageReview })))
	require.False(t, settled(all(func(m map[string]*tracked) { m["a"].stage, m["a"].requeued = fleet.StageFailed, false })),
		"the flaky job's planned failure is not its end")
}

// TestManifestsParse: every demo manifest is one the coordinator accepts.
func TestManifestsParse(t *testing.T) {
	t.Parallel()
	for _, j := range demoJobs {
		m, err := fleet.ParseManifest([]byte(j.manifest()))
		require.NoError(t, err, j.Title)
		require.Equal(t, j.Title, m.Title)
		require.Equal(t, j.Role == roleReviewed || j.Role == rolePR, m.Review != nil, j.Title)
	}
}
