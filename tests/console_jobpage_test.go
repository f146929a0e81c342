package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestConsoleJobPage: the job page a reviewer needs (Chromium, signed in
// as a user does), on a review-gated job a real factory delivered: its
// diff shows beside Approve and Reject before any vote (the file, its +/-
// counts, an added line as text), the timeline gives each event's absolute
// time on hover and how long each stage and run took, the header shows the
// cost the engine reported, a job with children draws its DAG as an SVG
// graph with a box per job and an edge per child, and a job from a tracker
// shows its delivery state with a Re-send button that outlives refreshes.
func TestConsoleJobPage(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	// The tracker webhook below is a loopback port nothing listens on: its
	// first delivery is refused, and the next is an hour away.
	s := startStack(t, "FLEET_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8", "FLEET_ECHO_BACKOFF=1h", "FLEET_ECHO_MAX_BACKOFF=1h")
	repo := newFacRepo(t, "app")
	s.Product("demo", repo.Name)
	startFactory(t, s, "fa", "demo", 1, repo, facEngine(t, `printf 'first\n<b>added line for review</b>\n' > notes.txt
echo "# app, changed" > README.md
printf '{"usd": 0.42, "inputTokens": 1200, "outputTokens": 300}' > "$FLEET_JOB_USAGE_FILE"`))
	gated := s.Submit("demo", "---\ntitle: Gated\nrepo: app\ncapabilities: [os:linux]\nreview: {quorum: 1}\n---\nChange it.\n")
	facWaitStage(t, s, "demo", gated, "review", 60*time.Second)
	parent := s.Submit("demo", "---\ntitle: Epic\nrepo: app\nkind: composite\ncapabilities: [gpu:none]\n---\nSplit it.\n")
	kids := s.Op("POST", "/jobs/"+parent+"/children", "demo", map[string]any{"children": []string{
		"---\ntitle: Part one\nrepo: app\ncapabilities: [gpu:none]\n---\nOne.\n", "---\ntitle: Part two\nrepo: app\ncapabilities: [gpu:none]\n---\nTwo.\n"}})
	require.Equal(t, 201, kids.Status, "%s", kids.Body)

	consoleSignIn(t, ctx, s, "demo")

	// The diff, before any vote, beside the review buttons.
	evalJS[string](t, ctx, `location.hash = '#/job/`+gated+`'`)
	waitJS(t, ctx, 20*time.Second, "the diff shows", `!document.querySelector('#diff-card')?.hidden && !!document.querySelector('#diff-files li[data-file="notes.txt"]')`)
	require.True(t, evalJS[bool](t, ctx, `!!document.querySelector('#review-approve') && !!document.querySelector('#review-reject')`), "the review buttons are there: no vote yet")
	require.Equal(t, "review", s.Job("demo", gated)["stage"])
	require.Equal(t, []string{"README.md +1 −1", "notes.txt +2 −0"},
		evalJS[[]string](t, ctx, `[...document.querySelectorAll('#diff-files li')].map(li => li.textContent)`), "each file with its +/- counts")
	require.Equal(t, "2 files changed, +3 −1", evalJS[string](t, ctx, `document.querySelector('#diff-summary').textContent`))
	added := evalJS[[]string](t, ctx, `[...document.querySelectorAll('.diff-file[data-file="notes.txt"] pre.diff .diff-add')].map(s => s.textContent)`)
	require.Equal(t, []string{"+first\n", "+<b>added line for review</b>\n"}, added, "the added lines, marked, as text")
	require.False(t, evalJS[bool](t, ctx, `!!document.querySelector('#diff-card b')`), "diff content never becomes markup")
	require.Equal(t, []string{"-# app\n"}, evalJS[[]string](t, ctx, `[...document.querySelectorAll('.diff-file[data-file="README.md"] pre.diff .diff-del')].map(s => s.textContent)`))
	require.Equal(t, "review-card", evalJS[string](t, ctx, `document.querySelector('#diff-card').previousElementSibling.id`), "the diff sits beside the review card")

	// The cost the engine reported, in the header.
	require.Equal(t, "$0.42 · 1,500 tokens", evalJS[string](t, ctx, `document.querySelector('#job-cost').textContent`))

	// The timeline: absolute times on hover, how long each stage and run took.
	titles := evalJS[[]string](t, ctx, `[...document.querySelectorAll('#timeline time')].map(t => t.title)`)
	require.NotEmpty(t, titles)
	for _, ti := range titles {
		require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC$`, ti)
	}
	stays := evalJS[[]string](t, ctx, `[...document.querySelectorAll('#timeline .stage-duration')].map(s => s.textContent)`)
	require.NotEmpty(t, stays)
	for _, d := range stays {
		require.Regexp(t, `^\d+(\.\d)?s( so far)? in [a-z ]+$|^\d+m \d+s( so far)? in [a-z ]+$`, d)
	}
	require.True(t, strings.HasSuffix(stays[len(stays)-1], "so far in review"), "the current stage counts on: %q", stays[len(stays)-1])
	require.Contains(t, stays, evalJS[string](t, ctx, `[...document.querySelectorAll('#timeline li[data-to=building] .stage-duration')].pop()?.textContent`), "the building stage has its duration")
	require.Regexp(t, `^\d+(\.\d)?s$`, evalJS[string](t, ctx, `document.querySelector('#run-durations .run-duration').textContent`), "the run's duration")
	shoot(t, ctx, "job-review-diff")

	// A job with children: the DAG as a graph.
	evalJS[string](t, ctx, `location.hash = '#/job/`+parent+`'`)
	waitJS(t, ctx, 20*time.Second, "the DAG graph", `document.querySelectorAll('#dag-graph .dag-node').length === 3`)
	nodes := evalJS[[]string](t, ctx, `[...document.querySelectorAll('#dag-graph .dag-node')].map(n => n.dataset.job + ' ' + n.querySelector('.dag-title').textContent + ' ' + n.querySelector('.dag-stage').textContent)`)
	require.Len(t, nodes, 3)
	require.Contains(t, nodes, parent+" Epic blocked · composite", "%v", nodes)
	require.Equal(t, 2, evalJS[int](t, ctx, `document.querySelectorAll('#dag-graph path.dag-edge.dag-child[data-from="`+parent+`"]').length`), "an edge to each child")
	require.True(t, evalJS[bool](t, ctx, `(() => { const y = id => document.querySelector('#dag-graph .dag-node[data-job="'+id+'"] rect').y.baseVal.value;
		return [...document.querySelectorAll('#dag-graph .dag-node')].every(n => n.dataset.job === '`+parent+`' || y(n.dataset.job) > y('`+parent+`')); })()`), "the children sit below their parent")
	require.NotContains(t, evalJS[string](t, ctx, `document.querySelector('main').textContent`), "null", "a job without runs shows no stray null")
	shoot(t, ctx, "job-dag")

	// A job from a tracker: its card says how far its events got, and the
	// Re-send button stays the element it was across a refresh (another
	// job's event) that changed nothing on the card.
	const secret = fleet.Secret("tracker-shared-secret-0123456789")
	hook := newTrackerHook(t, secret) // never started: deliveries are refused
	r := s.Op(http.MethodPut, "/products/demo", "", map[string]any{"repos": []string{repo.Name},
		"tracker": map[string]any{"webhookUrl": hook.URL(), "secret": string(secret)}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = s.Op(http.MethodPost, "/tracker/ingest", "demo", map[string]any{"source": "jira", "itemId": "APP-9", "revision": 1,
		"manifest": Manifest("Tracked", repo.Name, "gpu:none")})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	tracked := r.Map(t)["id"].(string)
	evalJS[string](t, ctx, `location.hash = '#/job/`+tracked+`'`)
	waitJS(t, ctx, 30*time.Second, "the tracker card with the refused delivery",
		`!document.querySelector('#tracker-card')?.hidden && document.querySelector('#echo-error')?.textContent === 'connection_refused'`)
	require.Equal(t, "APP-9", evalJS[string](t, ctx, `document.querySelector('#tracker-item').textContent`))
	require.True(t, evalJS[bool](t, ctx, `(window.__kept = { resend: document.querySelector('#echo-resend'), timeline: document.querySelector('#timeline') }), true`))
	s.Submit("demo", Manifest("Untracked", repo.Name, "gpu:none"))
	waitJS(t, ctx, 20*time.Second, "the job page refreshes", `document.querySelector('#timeline') !== window.__kept.timeline`)
	require.True(t, evalJS[bool](t, ctx, `document.querySelector('#echo-resend') === window.__kept.resend`), "the Re-send button outlived a refresh")
	run(t, ctx, 20*time.Second, "re-send", chromedp.Click(chromedp.CSS("#echo-resend")))
	waitJS(t, ctx, 20*time.Second, "the re-send's outcome", `document.querySelector('#echo-outcome')?.textContent.startsWith('re-send started')`)
}

// consoleSignIn signs in to the console as a user does: the operator token
// and the product typed into the sign-in form.
func consoleSignIn(t *testing.T, ctx context.Context, s *Stack, product string) {
	t.Helper()
	run(t, ctx, 30*time.Second, "sign in",
		chromedp.Navigate(s.URL+"/api/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), s.Token),
		chromedp.SendKeys(chromedp.CSS("#signin-product"), product),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#nav")))
}
