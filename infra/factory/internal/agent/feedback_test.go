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

// TestIterationFeedback: a job the forge sent back for another iteration
// gives its engine the feedback of that iteration three ways: in the
// prompt file, in $FLEET_JOB_FEEDBACK_FILE (@feedback-file) and with
// $FLEET_JOB_ITERATION; feedback of earlier iterations is not repeated,
// and a first iteration's feedback file is empty.
func TestIterationFeedback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		iteration int
		feedback  []fleet.Feedback
		want      string
	}{
		{"first iteration", 0, nil, ""},
		{"a review and a check", 3, []fleet.Feedback{
			{Iteration: 2, Source: fleet.FeedbackReview, Author: "alice", Body: "old, for iteration 2"},
			{Iteration: 3, Source: fleet.FeedbackReview, Author: "alice", Body: "Add a test for the redirect."},
			{Iteration: 3, Source: fleet.FeedbackCheck, Name: "ci", Body: "--- FAIL: TestRedirect"},
		}, "review by alice:\nAdd a test for the redirect.\n\ncheck ci:\n--- FAIL: TestRedirect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			repo := newGitRepo(t, root)
			out := filepath.Join(root, "seen")
			require.NoError(t, os.Mkdir(out, 0o755))
			coord := newFakeCoord("j1", "app")
			coord.job.Iteration, coord.job.Feedback = tc.iteration, tc.feedback
			a := newGitAgent(t, root, repo, coord, `sh -c 'cp "$1" `+out+`/feedback; cp "$2" `+out+`/prompt; echo "$FLEET_JOB_ITERATION" > `+out+`/iteration; echo done > done.txt' sh @feedback-file @prompt-file`)
			r := a.handle(context.Background(), transport.Delivery{ID: "claim", Claimed: coord.claim()})
			require.Equal(t, OutcomeDone, waitRun(t, r, "the run"), "fails: %q", coord.fails)
			a.jobs.Wait()

			read := func(name string) string {
				b, err := os.ReadFile(filepath.Join(out, name))
				require.NoError(t, err)
				return string(b)
			}
			require.Equal(t, tc.want, read("feedback"))
			prompt := read("prompt")
			require.Contains(t, prompt, "do it")
			if tc.want == "" {
				require.Equal(t, "do it", prompt)
				require.Equal(t, "1\n", read("iteration"))
				return
			}
			require.Contains(t, prompt, "## Feedback on your pull request (iteration 3)")
			require.Contains(t, prompt, tc.want)
			require.NotContains(t, prompt, "old, for iteration 2")
			require.Equal(t, "3\n", read("iteration"))
		})
	}
}
