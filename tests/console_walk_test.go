package tests

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsoleWalkthroughDefects drives the console through what the
// walkthrough of issue 27 found wrong, each step failing without its fix:
// the sign-in page shows no nav; an unknown product is said to be unknown
// and the product is picked from those the token sees; jobs list newest
// first; a review-gated job in review cannot be shipped and its Votes show
// no stray "null"; the explain card says where a running job runs and where
// a failed one ran (with "Attempts 1 of 3"); an API error is a sentence
// without a route path; the burndown's axis spans the data; Pause and
// Resume are enabled only when they apply;
// and when the stack stops, the pill says "reconnecting" within 2 s while
// heartbeat ages keep counting.
func TestConsoleWalkthroughDefects(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t)
	s.Product("demo", "app")
	tok := s.Factory("f1", "demo", 3, []string{"os:linux"}, []string{"app"})
	patch := func(id string, epoch int64, body map[string]any) {
		t.Helper()
		body["leaseEpoch"] = epoch
		r := s.As(tok, http.MethodPatch, "/jobs/"+id, "", body)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	gated := s.Submit("demo", "---\ntitle: Gated\nrepo: app\ncapabilities: [os:linux]\nreview: {quorum: 1}\n---\nWait for a vote.\n")
	id, epoch := s.Claim(tok)
	require.Equal(t, gated, id)
	patch(gated, epoch, map[string]any{"stage": "building"})
	patch(gated, epoch, map[string]any{"stage": "review", "checkpoint": "aq/job/" + gated + "@abc123"})
	running := s.Submit("demo", Manifest("Running", "app", "os:linux"))
	id, epoch = s.Claim(tok)
	require.Equal(t, running, id)
	patch(running, epoch, map[string]any{"stage": "building"})
	broken := s.Submit("demo", Manifest("Broken", "app", "os:linux"))
	id, epoch = s.Claim(tok)
	require.Equal(t, broken, id)
	r := s.As(tok, http.MethodPost, "/fail", "", map[string]any{"jobId": broken, "leaseEpoch": epoch, "reason": "tests do not compile", "retryable": false})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	// A budget, and a run spending a cent of it a moment later: its
	// forecast lies far beyond the data.
	b := s.Op(http.MethodPut, "/budgets/demo", "", map[string]any{"ceilingUsd": 5, "period": "total"})
	require.Equal(t, http.StatusOK, b.Status, "%s", b.Body)
	time.Sleep(1500 * time.Millisecond)
	spender := s.Submit("demo", Manifest("Spender", "app", "os:linux"))
	id, epoch = s.Claim(tok)
	require.Equal(t, spender, id)
	patch(spender, epoch, map[string]any{"stage": "building"})
	patch(spender, epoch, map[string]any{"stage": "shipped", "usage": map[string]any{"usd": 0.01}})
	newest := s.Submit("demo", Manifest("Newest", "app", "gpu:none"))

	// The sign-in page shows no nav.
	run(t, ctx, 30*time.Second, "open the console", chromedp.Navigate(s.URL+"/api/console/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	require.True(t, evalJS[bool](t, ctx, `getComputedStyle(document.querySelector('#nav')).display === 'none' && getComputedStyle(document.querySelector('#session')).display === 'none'`),
		"the sign-in page shows no nav and no session bar")

	// An unknown product is said to be unknown, naming the ones the token sees.
	run(t, ctx, 20*time.Second, "sign in to an unknown product",
		chromedp.SendKeys(chromedp.CSS("#token"), s.Token), chromedp.SendKeys(chromedp.CSS("#signin-product"), "nope"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)))
	waitJS(t, ctx, 20*time.Second, "the product is unknown", `document.querySelector('form .error')?.textContent === 'Product nope is unknown: this token sees demo.'`)
	// Without one, the first the token sees is picked.
	require.True(t, evalJS[bool](t, ctx, fmt.Sprintf(`(() => { document.querySelector('#signin-product').value = '';
		document.querySelector('#token').value = %q; document.querySelector('form button[type=submit]').click(); return true; })()`, s.Token)), "sign in without a product")
	run(t, ctx, 20*time.Second, "signed in", chromedp.WaitVisible(chromedp.CSS("#nav")))
	require.Equal(t, "demo", evalJS[string](t, ctx, `document.querySelector('#product').value`))
	require.Equal(t, []string{"demo"}, evalJS[[]string](t, ctx, `[...document.querySelectorAll('#product option')].map(o => o.value)`))

	// Jobs, newest first.
	run(t, ctx, 20*time.Second, "jobs page", chromedp.Click(chromedp.CSS(`#nav a[href="#/jobs"]`)))
	waitJS(t, ctx, 20*time.Second, "the jobs are listed", `document.querySelectorAll('main tbody tr').length === 5`)
	require.Equal(t, []string{newest, spender, broken, running, gated},
		evalJS[[]string](t, ctx, `[...document.querySelectorAll('main tbody tr td:first-child')].map(td => td.textContent)`), "newest first")

	// The gated job: Ship disabled while the gate holds it; no stray null.
	run(t, ctx, 20*time.Second, "the gated job", chromedp.Navigate(s.URL+"/api/console/#/job/"+gated))
	waitJS(t, ctx, 20*time.Second, "the review card", `document.querySelector('#job-stage')?.textContent === 'review' && !document.querySelector('#review-card').hidden`)
	require.True(t, evalJS[bool](t, ctx, `document.querySelector('#act-ship').disabled`), "Ship is disabled on a gated job without its quorum")
	require.Contains(t, evalJS[string](t, ctx, `document.querySelector('#gate-note').textContent`), "0 of 1 approvals")
	require.NotContains(t, evalJS[string](t, ctx, `document.querySelector('#review-card').textContent`), "null", "no stray null under Votes")
	require.NotContains(t, evalJS[string](t, ctx, `document.querySelector('main').textContent`), "null")
	// A review comment being typed keeps its focus and its text across a
	// refresh (another job's event brings one) that changed nothing on the card.
	run(t, ctx, 20*time.Second, "type a comment", chromedp.SendKeys(chromedp.CSS("#review-comment"), "looks right"))
	require.True(t, evalJS[bool](t, ctx, `(window.__kept = { comment: document.querySelector('#review-comment'), timeline: document.querySelector('#timeline') }), true`))
	s.Submit("demo", Manifest("Another", "app", "gpu:none"))
	waitJS(t, ctx, 20*time.Second, "the job page refreshes", `document.querySelector('#timeline') !== window.__kept.timeline`)
	require.True(t, evalJS[bool](t, ctx, `document.activeElement === window.__kept.comment && window.__kept.comment.value === 'looks right'`),
		"the comment being typed kept its focus and its text")

	// A running job: where it runs; a failed one: where it ran, one attempt spent.
	run(t, ctx, 20*time.Second, "the running job", chromedp.Navigate(s.URL+"/api/console/#/job/"+running))
	waitJS(t, ctx, 20*time.Second, "explain says where it runs", `document.querySelector('#explain-where')?.textContent.startsWith('Running on f1 (building')`)
	run(t, ctx, 20*time.Second, "the failed job", chromedp.Navigate(s.URL+"/api/console/#/job/"+broken))
	waitJS(t, ctx, 20*time.Second, "explain says where it ran", `document.querySelector('#explain-where')?.textContent.startsWith('Ran on f1 (run 1, failed)')`)
	require.Contains(t, evalJS[string](t, ctx, `document.querySelector('main dl.kv').textContent`), "Attempts1 of 3", "the failed run spent an attempt")

	// An API error is a sentence, without a method or a route path.
	run(t, ctx, 20*time.Second, "a missing job", chromedp.Navigate(s.URL+"/api/console/#/job/jdoesnotexist"))
	waitJS(t, ctx, 20*time.Second, "the error is shown", `!!document.querySelector('main .error')`)
	msg := evalJS[string](t, ctx, `document.querySelector('main .error').textContent`)
	require.Regexp(t, `^Not found: .+\.$`, msg)
	require.NotContains(t, msg, "/jobs/")
	require.NotContains(t, msg, "GET ")

	// Budgets: Pause only while assigning, Resume only while paused.
	run(t, ctx, 20*time.Second, "budgets page", chromedp.Navigate(s.URL+"/api/console/#/budgets"))
	waitJS(t, ctx, 20*time.Second, "the controls", `!!document.querySelector('#budget-state') && !document.querySelector('#budget-controls').hidden`)
	// The chart's axis spans the data (the point is not squeezed into the
	// left edge by a forecast far away), and the forecast is cut at its end.
	waitJS(t, ctx, 20*time.Second, "the burndown's point", `document.querySelectorAll('#burndown-chart circle').length === 1`)
	// The axis ends at now plus a margin, so the forecast (minutes away)
	// runs to the plot's right edge (x 704) and is cut there; an axis
	// stretched to the forecast put its end at 645.
	require.InDelta(t, 704.0, evalJS[float64](t, ctx, `document.querySelector('#bd-forecast').x2.baseVal.value`), 0.5, "the forecast is cut at the axis's end")
	require.Equal(t, []bool{false, true}, evalJS[[]bool](t, ctx, `[document.querySelector('#b-pause').disabled, document.querySelector('#b-resume').disabled]`), "assigning: Pause only")
	run(t, ctx, 20*time.Second, "pause", chromedp.Click(chromedp.CSS("#b-pause")))
	waitJS(t, ctx, 20*time.Second, "paused", `document.querySelector('#budget-state')?.textContent.includes('paused') && document.querySelector('#b-pause').disabled && !document.querySelector('#b-resume').disabled`)

	// The stack stops: "reconnecting" within 2 s, ages count on.
	run(t, ctx, 20*time.Second, "fleet map", chromedp.Navigate(s.URL+"/api/console/#/fleet"))
	waitJS(t, ctx, 20*time.Second, "live on the stream with f1 listed", `document.querySelector('#live').textContent === 'live · stream' && !!document.querySelector('main tbody time')`)
	age := evalJS[string](t, ctx, `document.querySelector('main tbody time').textContent`)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	began := time.Now()
	waitJS(t, ctx, 5*time.Second, "reconnecting", `document.querySelector('#live').textContent.startsWith('reconnecting')`)
	took := time.Since(began)
	t.Logf("reconnecting shown %s after SIGINT", took)
	require.Less(t, took, 2*time.Second, "the pill turns within 2 s of the stack stopping")
	waitJS(t, ctx, 5*time.Second, "the heartbeat age counts on", fmt.Sprintf(`document.querySelector('main tbody time').textContent !== %q`, age))
	_ = s.cmd.Wait()
}
