package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	blobfs "github.com/gigafactory/fleet/shared/blob/fs"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/httpapi"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// -update rewrites testdata/golden from what the commands print now.
var update = flag.Bool("update", false, "rewrite the golden files")

const opToken = "golden-operator-token-0000000000001"

// world is the real API (httpapi over a coordinator on SQLite) in-process,
// with a manual clock, so every command's output comes from real answers.
type world struct {
	t     *testing.T
	url   string
	clock *clocktest.Clock
	ids   map[string]string // random id -> stable stand-in of the same length
	tmp   string            // files the commands read, shown as $TMP
}

func newWorld(t *testing.T) *world {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	clk := clocktest.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	blobs, err := blobfs.Open(filepath.Join(t.TempDir(), "blobs"))
	require.NoError(t, err)
	c, err := coord.New(coord.Config{}, coord.Deps{Store: st, Clock: clk, Blobs: blobs})
	require.NoError(t, err)
	srv := httptest.NewServer(httpapi.New(c, httpapi.Config{OperatorTokens: []httpapi.OperatorToken{{Name: "ops", Token: opToken}}, Timers: clk}))
	t.Cleanup(srv.Close)
	return &world{t: t, url: srv.URL, clock: clk, ids: map[string]string{}, tmp: t.TempDir()}
}

// api calls the API directly (seeding: what factories do).
func (w *world) api(method, path, token, product, ctype, body string) map[string]any {
	w.t.Helper()
	req, err := http.NewRequest(method, w.url+"/api/fleet"+path, strings.NewReader(body))
	require.NoError(w.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if product != "" {
		req.Header.Set("X-Product-Id", product)
	}
	if body != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(w.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(w.t, err)
	require.Less(w.t, resp.StatusCode, 300, "%s %s: %s", method, path, b)
	out := map[string]any{}
	if len(b) > 0 {
		require.NoError(w.t, json.Unmarshal(b, &out))
	}
	return out
}

// stable registers a random id (or its random tail) for scrubbing.
func (w *world) stable(id string) string {
	if _, ok := w.ids[id]; !ok {
		n := len(w.ids) + 1
		// Job ids end in 16 random hex digits after a clock-derived part;
		// a keyed id is all hash.
		w.ids[id] = id[:len(id)-16] + fmt.Sprintf("%016d", n)
		if keyedID.MatchString(id) {
			w.ids[id] = fmt.Sprintf("k%024d", n)
		}
	}
	return id
}

func (w *world) submit(product, manifest string) string {
	w.t.Helper()
	j := w.api("POST", "/jobs", opToken, product, "text/markdown", manifest)
	return w.stable(j["id"].(string))
}

func (w *world) enroll(id, product string, caps []string, seats int) string {
	w.t.Helper()
	b, _ := json.Marshal(map[string]any{"factoryId": id, "kind": "static", "products": []string{product}, "capabilities": caps, "seatLimit": seats})
	return w.api("POST", "/factories/enroll", opToken, "", "application/json", string(b))["token"].(string)
}

func (w *world) heartbeat(token string, caps, repos []string) {
	w.t.Helper()
	b, _ := json.Marshal(map[string]any{"capabilities": caps, "repos": repos, "load": 0, "health": "ok"})
	w.api("POST", "/factories/heartbeat", token, "", "application/json", string(b))
}

var (
	// Ids the coordinator makes: a letter, 13 hex digits of clock, 16 random.
	randomID = regexp.MustCompile(`\b[a-z][0-9a-f]{13}[0-9a-f]{16}\b`)
	// Ids made of a key (kernel.KeyedID): a child's key is its parent's
	// own, so its id is as random as the parent's.
	keyedID        = regexp.MustCompile(`\bk[0-9a-f]{24}\b`)
	factoryTokenRE = regexp.MustCompile(`fft_[A-Za-z0-9_-]{20,}`)
	hashRE         = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	portRE         = regexp.MustCompile(`127\.0\.0\.1:\d+`)
)

func (w *world) scrub(s string) string {
	for _, id := range randomID.FindAllString(s, -1) {
		w.stable(id)
	}
	for _, id := range keyedID.FindAllString(s, -1) {
		w.stable(id)
	}
	for id, stand := range w.ids {
		s = strings.ReplaceAll(s, id, stand)
	}
	s = factoryTokenRE.ReplaceAllStringFunc(s, func(m string) string { return "fft_" + strings.Repeat("x", len(m)-4) })
	s = hashRE.ReplaceAllString(s, strings.Repeat("0", 64))
	s = strings.ReplaceAll(s, w.tmp, "$TMP")
	return portRE.ReplaceAllString(s, "127.0.0.1:PORT")
}

// run runs fleetctl in-process and returns its transcript.
func (w *world) run(env map[string]string, stdin string, args ...string) (string, int) {
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return map[string]string{"FLEET_URL": w.url, "FLEET_TOKEN": opToken, "FLEET_PRODUCT": "demo"}[k]
	}
	code := Run(context.Background(), args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: getenv, Now: w.clock.Now})
	var b strings.Builder
	fmt.Fprintf(&b, "$ fleetctl %s\n[exit %d]\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return w.scrub(b.String()), code
}

func manifest(title, repo, extra string) string {
	return "---\ntitle: " + title + "\nrepo: " + repo + "\ncapabilities: [os:linux, engine:claude]\n" + extra + "---\nDo the thing.\n"
}

// TestGolden runs every command, table and JSON, against the real API and
// compares the transcripts (stdout, stderr, exit code) with testdata/golden.
func TestGolden(t *testing.T) {
	w := newWorld(t)
	caps := []string{"os:linux", "engine:claude", "has:git"}
	w.api("PUT", "/products/demo", opToken, "", "application/json", `{"name": "Demo", "repos": ["hello", "web"]}`)
	w.api("PUT", "/products/other", opToken, "", "application/json", `{"repos": ["elsewhere"]}`)
	ft1 := w.enroll("laptop-1", "demo", caps, 2)
	w.heartbeat(ft1, caps, []string{"hello", "web"})
	ft2 := w.enroll("gpu-box", "demo", []string{"os:linux", "gpu:a100"}, 1)
	w.heartbeat(ft2, []string{"os:linux", "gpu:a100"}, []string{"hello"})
	w.enroll("spare", "demo", caps, 1)
	w.api("PUT", "/profiles/backend", opToken, "demo", "text/markdown", "---\ncapabilities: [has:git]\nengine: claude\n---\nYou are a careful backend engineer.\n")

	w.clock.Advance(time.Minute)
	built := w.submit("demo", manifest("Ship me", "hello", "priority: critical\n"))
	w.clock.Advance(time.Minute)
	claim := w.api("POST", "/claim", ft1, "", "", "")
	require.Equal(t, built, claim["job"].(map[string]any)["id"])
	epoch := fmt.Sprint(claim["leaseEpoch"])
	w.api("PATCH", "/jobs/"+built, ft1, "", "application/json", `{"stage": "building", "leaseEpoch": `+epoch+`}`)
	w.clock.Advance(30 * time.Second)
	w.api("PATCH", "/jobs/"+built, ft1, "", "application/json", `{"stage": "testing", "leaseEpoch": `+epoch+`, "checkpoint": "aq/job/`+built+`"}`)
	w.clock.Advance(time.Minute)
	queued := w.submit("demo", manifest("Fix the login redirect", "web", "persona: backend\n"))
	w.clock.Advance(time.Minute)
	toCancel := w.submit("demo", manifest("Changed my mind", "hello", "priority: low\n"))
	w.clock.Advance(time.Second)
	toReject := w.submit("demo", manifest("Reject me", "hello", "priority: critical\n"))
	claim = w.api("POST", "/claim", ft1, "", "", "")
	require.Equal(t, toReject, claim["job"].(map[string]any)["id"])
	epoch = fmt.Sprint(claim["leaseEpoch"])
	w.api("PATCH", "/jobs/"+toReject, ft1, "", "application/json", `{"stage": "building", "leaseEpoch": `+epoch+`}`)
	w.api("PATCH", "/jobs/"+toReject, ft1, "", "application/json", `{"stage": "testing", "leaseEpoch": `+epoch+`}`)
	w.clock.Advance(2 * time.Minute)

	manifestFile := filepath.Join(w.tmp, "job.md")
	require.NoError(t, os.WriteFile(manifestFile, []byte(manifest("From a file", "web", "idempotencyKey: golden-1\n")), 0o644))
	profileFile := filepath.Join(w.tmp, "reviewer.md")
	require.NoError(t, os.WriteFile(profileFile, []byte("---\ncapabilities: [os:linux]\n---\nReview with care.\n"), 0o644))

	type tc struct {
		name  string
		args  []string
		env   map[string]string
		stdin string
		exit  int
	}
	cases := []tc{
		{name: "jobs-ls", args: []string{"jobs", "ls"}},
		{name: "jobs-ls-json", args: []string{"jobs", "ls", "-o", "json"}},
		{name: "jobs-ls-stage", args: []string{"jobs", "ls", "--stage", "testing"}},
		{name: "jobs-ls-paged", args: []string{"jobs", "ls", "--limit", "2", "--all"}},
		{name: "jobs-show", args: []string{"jobs", "show", queued}},
		{name: "jobs-show-json", args: []string{"jobs", "show", queued, "-o", "json"}},
		{name: "jobs-submit-file", args: []string{"jobs", "submit", manifestFile}},
		{name: "jobs-submit-again", args: []string{"jobs", "submit", manifestFile}},
		{name: "jobs-submit-stdin-json", args: []string{"jobs", "submit", "-", "-o", "json"}, stdin: manifest("From stdin", "hello", "")},
		{name: "jobs-explain", args: []string{"jobs", "explain", queued}},
		{name: "jobs-explain-json", args: []string{"jobs", "explain", queued, "-o", "json"}},
		{name: "jobs-events", args: []string{"jobs", "events", built}},
		{name: "jobs-events-json", args: []string{"jobs", "events", built, "--after", "2", "-o", "json"}},
		{name: "jobs-runs", args: []string{"jobs", "runs", built}},
		{name: "jobs-runs-json", args: []string{"jobs", "runs", built, "-o", "json"}},
		{name: "jobs-ship", args: []string{"jobs", "ship", built}},
		{name: "jobs-reject-json", args: []string{"jobs", "reject", toReject, "--reason", "wrong approach", "-o", "json"}},
		{name: "jobs-requeue", args: []string{"jobs", "requeue", toReject}},
		{name: "jobs-cancel", args: []string{"jobs", "cancel", toCancel, "--reason", "not needed"}},
		{name: "factories-ls", args: []string{"factories", "ls"}},
		{name: "factories-ls-json", args: []string{"factories", "ls", "-o", "json"}},
		{name: "factories-enroll", args: []string{"factories", "enroll", "new-box", "--products", "demo", "--capabilities", "os:linux,has:git", "--seats", "3"}},
		{name: "factories-enroll-json", args: []string{"factories", "enroll", "new-box-2", "--products", "demo", "-o", "json"}},
		{name: "factories-token-rotate", args: []string{"factories", "token", "rotate", "new-box"}},
		{name: "factories-token-revoke-json", args: []string{"factories", "token", "revoke", "new-box", "-o", "json"}},
		{name: "factories-drain", args: []string{"factories", "drain", "gpu-box"}},
		{name: "factories-ls-draining", args: []string{"factories", "ls"}},
		{name: "factories-undrain-json", args: []string{"factories", "undrain", "gpu-box", "-o", "json"}},
		{name: "err-drain-not-found", args: []string{"factories", "drain", "nope"}, exit: ExitNotFound},
		{name: "factories-deregister", args: []string{"factories", "deregister", "new-box"}},
		{name: "products-get", args: []string{"products", "get", "demo"}},
		{name: "products-put-json", args: []string{"products", "put", "demo", "--name", "Demo", "--repo", "hello,web", "--repo", "docs", "-o", "json"}},
		{name: "products-put-max-running", args: []string{"products", "put", "other", "--max-running", "2"}},
		{name: "products-get-capped-json", args: []string{"products", "get", "other", "-o", "json"}},
		{name: "err-invalid-max-running", args: []string{"products", "put", "other", "--max-running", "-1"}, exit: ExitUsage},
		{name: "repos-ls", args: []string{"repos", "ls"}},
		{name: "repos-ls-json", args: []string{"repos", "ls", "-o", "json"}},
		{name: "profiles-put", args: []string{"profiles", "put", "reviewer", profileFile}},
		{name: "profiles-ls", args: []string{"profiles", "ls"}},
		{name: "profiles-ls-json", args: []string{"profiles", "ls", "-o", "json"}},
		{name: "profiles-show", args: []string{"profiles", "show", "backend"}},
		{name: "profiles-versions", args: []string{"profiles", "versions", "backend"}},
		// Errors and their exit codes.
		{name: "err-not-found", args: []string{"jobs", "show", "jnope"}, exit: ExitNotFound},
		{name: "err-conflict", args: []string{"jobs", "ship", queued}, exit: ExitConflict},
		{name: "err-auth", args: []string{"jobs", "ls"}, env: map[string]string{"FLEET_TOKEN": "wrong-token-wrong-token-wrong-token"}, exit: ExitAuth},
		{name: "err-no-token", args: []string{"jobs", "ls"}, env: map[string]string{"FLEET_TOKEN": ""}, exit: ExitAuth},
		{name: "err-usage-product", args: []string{"jobs", "ls"}, env: map[string]string{"FLEET_PRODUCT": ""}, exit: ExitUsage},
		{name: "err-usage-args", args: []string{"jobs", "show"}, exit: ExitUsage},
		{name: "err-usage-output", args: []string{"jobs", "ls", "-o", "yaml"}, exit: ExitUsage},
		{name: "err-invalid", args: []string{"jobs", "ls", "--stage", "nowhere"}, exit: ExitUsage},
		{name: "err-refused", args: []string{"jobs", "submit", "-"}, stdin: manifest("Not ours", "elsewhere", ""), exit: ExitRefused},
		{name: "err-unknown-product", args: []string{"jobs", "ls", "-p", "nope"}, exit: ExitNotFound},
		{name: "err-unavailable", args: []string{"jobs", "ls"}, env: map[string]string{"FLEET_URL": "http://127.0.0.1:1"}, exit: ExitUnavailable},
	}
	run := func(c tc) {
		t.Helper()
		got, code := w.run(c.env, c.stdin, c.args...)
		require.Equal(t, c.exit, code, "%s:\n%s", c.name, got)
		require.NotContains(t, got, opToken, "%s: the token is never printed", c.name)
		golden(t, c.name, got)
	}
	for _, c := range cases {
		run(c)
	}

	// A composite job with two children (the DAG), and two jobs held at
	// the review gate, delivered by the factory.
	epic := w.submit("demo", manifest("Epic", "hello", "kind: composite\n"))
	// One at a time, a second apart: a child's id is made of its parent's,
	// which is random, so lists ordered by age then id (the starving jobs
	// in the metrics) would otherwise order these two at random.
	for _, child := range []string{manifest("Part one", "hello", "idempotencyKey: part-1\n"), manifest("Part two", "web", "idempotencyKey: part-2\n")} {
		w.clock.Advance(time.Second)
		children, _ := json.Marshal(map[string]any{"children": []string{child}})
		w.api("POST", "/jobs/"+epic+"/children", opToken, "demo", "application/json", string(children))
	}
	w.clock.Advance(time.Second)
	// Only this factory has the docs repo, so it claims exactly these.
	ftDocs := w.enroll("docs-box", "demo", caps, 1)
	w.heartbeat(ftDocs, caps, []string{"docs"})
	gated := func(title string) string {
		id := w.submit("demo", manifest(title, "docs", "review: {reviewers: [ops], quorum: 1}\n"))
		claim := w.api("POST", "/claim", ftDocs, "", "", "")
		require.Equal(t, id, claim["job"].(map[string]any)["id"])
		epoch := fmt.Sprint(claim["leaseEpoch"])
		w.api("PATCH", "/jobs/"+id, ftDocs, "", "application/json", `{"stage": "building", "leaseEpoch": `+epoch+`}`)
		w.api("PATCH", "/jobs/"+id, ftDocs, "", "application/json", `{"stage": "review", "leaseEpoch": `+epoch+`, "checkpoint": "aq/job/`+id+`@abc123"}`)
		w.clock.Advance(time.Second)
		return id
	}
	approveMe, rejectMe := gated("Review me"), gated("Reject me in review")
	for _, c := range []tc{
		{name: "jobs-watch", args: []string{"jobs", "watch", built}},
		{name: "jobs-watch-json", args: []string{"jobs", "watch", built, "--after", "3", "-o", "json"}},
		{name: "jobs-dag", args: []string{"jobs", "dag", epic}},
		{name: "jobs-dag-json", args: []string{"jobs", "dag", epic, "-o", "json"}},
		{name: "review-approve", args: []string{"review", "approve", approveMe, "--comment", "looks good"}},
		{name: "review-reject-json", args: []string{"review", "reject", rejectMe, "--comment", "needs tests", "-o", "json"}},
		{name: "err-review-not-in-review", args: []string{"review", "approve", rejectMe, "--head", "aq/job/x@old"}, exit: ExitConflict},
	} {
		run(c)
	}

	// A budget, and a run whose usage settles into it past the alert.
	run(tc{name: "budgets-set", args: []string{"budgets", "set", "--ceiling", "5", "--default-job-usd", "0.5"}})
	// A repo only one factory has, so that factory's claim is this job.
	w.api("PUT", "/products/demo", opToken, "", "application/json", `{"name": "Demo", "repos": ["hello", "web", "docs", "ledger"]}`)
	ftSpend := w.enroll("spender", "demo", caps, 1)
	w.heartbeat(ftSpend, caps, []string{"ledger"})
	spend := w.submit("demo", manifest("Spend", "ledger", ""))
	claim = w.api("POST", "/claim", ftSpend, "", "", "")
	require.Equal(t, spend, claim["job"].(map[string]any)["id"])
	w.api("PATCH", "/jobs/"+spend, ftSpend, "", "application/json", `{"stage": "building", "leaseEpoch": `+epoch+`}`)
	w.api("PATCH", "/jobs/"+spend, ftSpend, "", "application/json", `{"stage": "testing", "leaseEpoch": `+epoch+`, "usage": {"usd": 4.25, "inputTokens": 9000, "outputTokens": 800}, "turns": 12, "model": "claude-sonnet-4"}`)
	for _, c := range []tc{
		// The run's usage, turns and model, on its one line.
		{name: "jobs-runs-usage", args: []string{"jobs", "runs", spend}},
		{name: "budgets-show", args: []string{"budgets", "show"}},
		{name: "budgets-show-json", args: []string{"budgets", "show", "demo", "-o", "json"}},
		{name: "budgets-pause", args: []string{"budgets", "pause", "--reason", "quarter end"}},
		{name: "budgets-resume-json", args: []string{"budgets", "resume", "demo", "-o", "json"}},
		{name: "budgets-set-keeps", args: []string{"budgets", "set", "--alert-at", "0.6"}},
		// Shell completion: products from the live fleet, periods.
		{name: "complete-budgets-product", args: []string{"__complete", "budgets", "show", ""}},
		{name: "complete-budgets-period", args: []string{"__complete", "budgets", "set", "--period", ""}},
		{name: "err-budgets-new-needs-ceiling", args: []string{"budgets", "set", "other"}, exit: ExitUsage},
		{name: "err-budgets-no-product", args: []string{"budgets", "show"}, env: map[string]string{"FLEET_PRODUCT": ""}, exit: ExitUsage},
	} {
		run(c)
	}

	// Half an hour on: the queued jobs starve and the silent factories go
	// stale, so metrics and alerts have something to say.
	w.clock.Advance(40 * time.Minute)
	for _, c := range []tc{
		{name: "metrics", args: []string{"metrics"}},
		{name: "metrics-json", args: []string{"metrics", "-o", "json"}},
		{name: "alerts", args: []string{"alerts"}},
		{name: "alerts-json", args: []string{"alerts", "-o", "json"}},
	} {
		run(c)
	}

	// An artifact of the built job, uploaded as an operator may (last, so
	// its event and id leave the transcripts above as they were).
	art := w.api("POST", "/jobs/"+built+"/artifacts?name=notes.txt&kind=report", opToken, "demo", "text/plain", "release notes\n")["id"].(string)
	artFile := filepath.Join(w.tmp, "notes.txt")
	for _, c := range []tc{
		{name: "artifacts-ls", args: []string{"artifacts", "ls", built}},
		{name: "artifacts-ls-json", args: []string{"artifacts", "ls", built, "-o", "json"}},
		{name: "artifacts-get", args: []string{"artifacts", "get", art}},
		{name: "artifacts-get-file", args: []string{"artifacts", "get", art, "-o", artFile}},
		{name: "err-artifact-not-found", args: []string{"artifacts", "get", built + ".anope"}, exit: ExitNotFound},
	} {
		run(c)
	}
	saved, err := os.ReadFile(artFile)
	require.NoError(t, err)
	require.Equal(t, "release notes\n", string(saved), "artifacts get -o wrote the bytes")
	// The tracker bridge: a product's webhook (its secret from a file,
	// never printed), an item ingested, re-ingested and updated, its job's
	// echo state and a re-send.
	const secret = "golden-webhook-secret-0123456789"
	secretFile := filepath.Join(w.tmp, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\n"), 0o600))
	itemFile := filepath.Join(w.tmp, "item.md")
	require.NoError(t, os.WriteFile(itemFile, []byte(manifest("From the tracker", "hello", "")), 0o644))
	ingest := func(rev int) []string {
		return []string{"tracker", "ingest", itemFile, "--source", "jira", "--item", "APP-1", "--revision", fmt.Sprint(rev)}
	}
	for _, c := range []tc{
		{name: "products-put-tracker", args: []string{"products", "put", "demo", "--webhook-url", "https://hooks.example/fleet", "--secret-file", secretFile}},
		{name: "products-get-tracker-json", args: []string{"products", "get", "demo", "-o", "json"}},
		{name: "products-put-tracker-url-keeps-secret", args: []string{"products", "put", "demo", "--webhook-url", "https://hooks.example/v2"}},
		{name: "err-products-tracker-no-url", args: []string{"products", "put", "other", "--secret-file", secretFile}, exit: ExitUsage},
		{name: "tracker-ingest", args: ingest(1)},
		{name: "tracker-ingest-again", args: ingest(1)},
		{name: "tracker-ingest-update-json", args: append(ingest(2), "-o", "json")},
		{name: "err-tracker-ingest-no-revision", args: []string{"tracker", "ingest", itemFile, "--source", "jira", "--item", "APP-1"}, exit: ExitUsage},
	} {
		got, code := w.run(c.env, c.stdin, c.args...)
		require.NotContains(t, got, secret, "%s: the secret is never printed", c.name)
		require.Equal(t, c.exit, code, "%s:\n%s", c.name, got)
		golden(t, c.name, got)
	}
	body, _ := json.Marshal(map[string]any{"source": "jira", "itemId": "APP-1", "revision": 2, "manifest": manifest("From the tracker", "hello", "")})
	tracked := w.api("POST", "/tracker/ingest", opToken, "demo", "application/json", string(body))["id"].(string)
	for _, c := range []tc{
		{name: "jobs-show-tracked", args: []string{"jobs", "show", tracked}},
		{name: "jobs-echo", args: []string{"jobs", "echo", tracked}},
		{name: "tracker-resend-json", args: []string{"tracker", "resend", tracked, "-o", "json"}},
		{name: "err-jobs-echo-untracked", args: []string{"jobs", "echo", queued}, exit: ExitConflict},
	} {
		run(c)
	}

	// A job no factory could ever run: explain says "unroutable:" once.
	h100 := w.submit("demo", "---\ntitle: Needs a GPU\nrepo: hello\ncapabilities: [gpu:h100]\n---\nTrain.\n")
	run(tc{name: "jobs-explain-unroutable", args: []string{"jobs", "explain", h100}})

	// A job no factory offers a capability for: stored, with a warning.
	run(tc{name: "jobs-submit-warning", args: []string{"jobs", "submit", "-"}, stdin: "---\ntitle: Needs an H100\nrepo: hello\ncapabilities: [gpu:h100]\n---\nTrain.\n"})

	// Short job ids, as git abbreviates: a unique prefix stands for the
	// job; an ambiguous one is refused naming two it matches.
	for _, c := range []tc{
		{name: "jobs-show-short-id", args: []string{"jobs", "show", queued[:14]}},
		{name: "jobs-runs-short-id", args: []string{"jobs", "runs", built[:14]}},
		// Submitted a second apart: their ids share 11 characters.
		{name: "err-jobs-short-id-ambiguous", args: []string{"jobs", "show", toReject[:11]}, exit: ExitUsage},
		{name: "err-jobs-short-id-none", args: []string{"jobs", "show", "j00ff"}, exit: ExitNotFound},
		// An artifact by its job (abbreviated) and name.
		{name: "artifacts-get-job-name", args: []string{"artifacts", "get", built[:14], "notes.txt"}},
		{name: "err-artifacts-get-job-no-such-name", args: []string{"artifacts", "get", built, "nope.txt"}, exit: ExitNotFound},
	} {
		run(c)
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file; run go test ./infra/fleetctl/... -update")
	require.Equal(t, string(want), got, "%s differs from the golden file (go test ./infra/fleetctl/... -update rewrites it)", name)
}
