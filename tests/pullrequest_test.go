package tests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/forge/github/githubtest"
	"github.com/gigafactory/fleet/shared/forge/github/githubtest/octokit"
)

// TestPullRequestIterations: the local stack, a real factory and a bare git
// origin, with a GitHub double playing GitHub (its head SHAs read from the
// origin). A delivery opens the job's pull request with the marker; a
// signed review asking for changes sends it back, and iteration 2 runs on
// the same branch with the comment in the engine's prompt and feedback
// file, its push updating the same pull request; a failing check brings
// iteration 3 with the check's output; the named reviewer's approval is the
// quorum; the operator's ship merges with the product's method. A forged
// webhook is 401 and changes nothing.
func TestPullRequestIterations(t *testing.T) {
	t.Parallel()
	repo := newFacRepo(t, "app")
	double := githubtest.New(nil, githubtest.Repo{Owner: "acme", Name: "app", GitDir: repo.Origin})
	// Every request the coordinator sends GitHub and every answer it reads
	// is checked against GitHub's own description, as is every webhook.
	octokit.Need(t)
	rest, err := octokit.LoadREST()
	require.NoError(t, err)
	hooks, err := octokit.LoadWebhooks()
	require.NoError(t, err)
	gh := httptest.NewServer(rest.Middleware(double.Handler(), t.Errorf))
	t.Cleanup(gh.Close)
	dir := t.TempDir()
	secret := []byte("webhook-secret-of-this-test")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("ghp_test\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), secret, 0o600))
	s := startStack(t, "FLEET_GITHUB_API_URL="+gh.URL, "FLEET_GITHUB_TOKEN_FILE="+filepath.Join(dir, "token"),
		"FLEET_GITHUB_WEBHOOK_SECRET_FILE="+filepath.Join(dir, "secret"), "FLEET_PUBLIC_URL=https://fleet.example.com")
	r := s.Op(http.MethodPut, "/products/demo", "", map[string]any{"repos": []string{"app"},
		"forge": map[string]any{"repos": map[string]string{"app": "acme/app"}, "mergeMethod": "squash", "maxIterations": 3,
			"reviewers": map[string]string{"alice-gh": "alice"}}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// The engine records what it was given, in the worktree (committed).
	eng := facEngine(t, `it="$FLEET_JOB_ITERATION"
cp "$FLEET_JOB_FEEDBACK_FILE" "feedback-$it.txt"
grep -c 'Feedback on your pull request' "$FLEET_JOB_PROMPT_FILE" > "prompt-has-feedback-$it.txt" || true
echo "work of iteration $it" >> work.txt`)
	startFactory(t, s, "fa", "demo", 1, repo, eng)
	id := s.Submit("demo", "---\ntitle: Fix the redirect\nrepo: app\ncapabilities: [engine:fake]\nreview: {reviewers: [alice], quorum: 1}\n---\nFix it.\n")
	branch := "aq/job/" + id

	waitPR := func(iteration int) map[string]any {
		t.Helper()
		var job map[string]any
		Eventually(t, 60*time.Second, "iteration delivered with its pull request", func() bool {
			job = s.Job("demo", id)
			pr, _ := job["pullRequest"].(map[string]any)
			it, _ := job["iteration"].(float64)
			return job["stage"] == "review" && pr != nil && max(int(it), 1) == iteration && pr["headSha"] == repo.Ref(t, branch)
		})
		return job
	}
	job := waitPR(1)
	pr := job["pullRequest"].(map[string]any)
	require.EqualValues(t, 1, pr["number"])
	require.Equal(t, "acme/app", pr["repo"])
	pulls := double.Pulls()
	require.Len(t, pulls, 1)
	require.Equal(t, branch, pulls[0].Head)
	require.Equal(t, "main", pulls[0].Base)
	require.Contains(t, pulls[0].Body, "fleet-job: "+id)
	require.Contains(t, pulls[0].Body, "https://fleet.example.com/api/console/#/job/"+id)

	send := func(d githubtest.Delivery) {
		t.Helper()
		require.NoError(t, hooks.Validate(d.Webhook, d.Payload))
		status, err := githubtest.Send(context.Background(), s.URL+"/api/fleet/forge/github", secret, d)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}

	// A forged delivery: 401, nothing changes.
	forged := double.Review(1, "alice-gh", "approved", "")
	seq := s.Job("demo", id)["eventSeq"]
	status, err := githubtest.Send(context.Background(), s.URL+"/api/fleet/forge/github", []byte("not the secret"), forged)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, seq, s.Job("demo", id)["eventSeq"])

	send(double.Review(1, "alice-gh", "changes_requested", "Please add a test for the redirect."))
	waitPR(2)
	require.Equal(t, "review by alice-gh:\nPlease add a test for the redirect.", repo.Show(t, branch, "feedback-2.txt"))
	require.Equal(t, "1", repo.Show(t, branch, "prompt-has-feedback-2.txt"))
	require.Equal(t, "work of iteration 1\nwork of iteration 2", repo.Show(t, branch, "work.txt"), "iteration 2 built on iteration 1's branch")
	require.Len(t, double.Pulls(), 1, "the same pull request, updated")

	send(double.CheckRun(1, githubtest.Check{Name: "ci", Conclusion: "failure", Title: "1 test failed", Summary: "TestRedirect", Text: "--- FAIL: TestRedirect"}))
	waitPR(3)
	require.Equal(t, "check ci:\n1 test failed\n\nTestRedirect\n\n--- FAIL: TestRedirect", repo.Show(t, branch, "feedback-3.txt"))
	require.EqualValues(t, 0, s.Job("demo", id)["attempts"], "iterations spend no attempt")

	// The console's job page: the pull request, the iteration, and each
	// iteration's feedback beside it.
	ctx := browser(t)
	consoleSignIn(t, ctx, s, "demo")
	run(t, ctx, 20*time.Second, "the job page", chromedp.Navigate(s.URL+"/api/console/#/job/"+id))
	waitJS(t, ctx, 20*time.Second, "the job page shows its pull request and feedback",
		`document.querySelector('#pull-request')?.textContent === 'acme/app#1 open' &&
		 document.querySelectorAll('#feedback li').length === 2 &&
		 document.querySelector('#feedback li[data-iteration="2"]')?.textContent.includes('Please add a test for the redirect.') &&
		 document.querySelector('#feedback li[data-iteration="3"]')?.textContent.includes('check ci')`)
	require.Equal(t, "3", evalJS[string](t, ctx, `[...document.querySelectorAll('dl.kv dt')].find(d => d.textContent === 'Iteration').nextElementSibling.textContent`))

	// Past the cap (3): the job waits in review, and an alert asks a person.
	send(double.Review(1, "alice-gh", "changes_requested", "And the docs, please."))
	Eventually(t, 10*time.Second, "the iteration_cap alert", func() bool {
		r := s.Op(http.MethodGet, "/metrics", "demo", nil)
		return strings.Contains(string(r.Body), `"kind":"iteration_cap"`)
	})
	require.Equal(t, "review", s.Job("demo", id)["stage"])
	require.EqualValues(t, 3, s.Job("demo", id)["iteration"])

	send(double.Review(1, "alice-gh", "approved", "LGTM"))
	Eventually(t, 30*time.Second, "the approval reaches the quorum", func() bool { return s.Job("demo", id)["stage"] == "testing" })

	r = s.Op(http.MethodPost, "/jobs/"+id+"/actions/ship", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	merged := double.Pulls()[0]
	require.True(t, merged.Merged)
	require.Equal(t, "squash", merged.MergeMethod)
	job = s.Job("demo", id)
	require.Equal(t, "shipped", job["stage"])
	require.Equal(t, "merged", job["pullRequest"].(map[string]any)["state"])
	require.True(t, strings.HasSuffix(double.Deleted()[0], ":"+branch))
}
