package httpapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/explain"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	var prod fleet.Product
	f.ok(200, &prod, "PUT", "/api/fleet/products/p1", rootToken, map[string]any{"name": "Notes", "repos": []string{"learning_ai_notes"}})
	require.Equal(t, []string{"learning_ai_notes"}, prod.Repos)

	var er api.EnrollResponse
	f.ok(201, &er, "POST", "/api/fleet/factories/enroll", rootToken, map[string]any{
		"factoryId": "f1", "kind": "static", "products": []string{"p1"},
		"capabilities": []string{"os:linux", "engine:claude", "has:git"}, "seatLimit": 2, "costPerHourUsd": 1.5,
	})
	require.Equal(t, "f1", er.FactoryID)
	require.True(t, strings.HasPrefix(er.Token, catalog.FactoryTokenPrefix))
	require.Equal(t, "f1", er.Factory.ID)

	var fac fleet.Factory
	f.ok(200, &fac, "POST", "/api/fleet/factories/heartbeat", er.Token, map[string]any{
		"capabilities": []string{"os:linux", "engine:claude", "has:git"}, "repos": []string{"learning_ai_notes"},
		"load": 0, "health": "ok", "seatLimit": 2,
	})
	require.Equal(t, []string{"learning_ai_notes"}, fac.Repos)

	var j fleet.Job
	res := f.ok(201, &j, "POST", "/api/fleet/jobs", rootToken, manifest("learning_ai_notes"), product("p1"), contentType("text/markdown"))
	require.Equal(t, "/api/fleet/jobs/"+j.ID, res.header.Get("Location"))
	require.Equal(t, fleet.StageQueued, j.Stage)
	require.Equal(t, "p1", j.ProductID)
	require.Equal(t, "Task body in Markdown, kept verbatim.\n", j.Body)

	var qs fleet.QueueState
	f.ok(200, &qs, "GET", "/api/fleet/queue-state", er.Token, nil)
	require.Positive(t, qs.Version, "the factory's only product needs no header")

	c := f.claim(er.Token)
	require.Equal(t, j.ID, c.Job.ID)
	require.Equal(t, int64(1), c.LeaseEpoch)
	require.Equal(t, fleet.StageAssigned, c.Job.Stage)
	f.ok(http.StatusNoContent, nil, "POST", "/api/fleet/claim", er.Token, nil)

	f.ok(200, &j, "PATCH", "/api/fleet/jobs/"+j.ID, er.Token, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch, "checkpoint": "abc123"})
	require.Equal(t, fleet.StageBuilding, j.Stage)
	require.Equal(t, "abc123", j.Checkpoint)
	// Prefer: return=minimal: the update lands, and no job comes back.
	res = f.ok(http.StatusNoContent, nil, "PATCH", "/api/fleet/jobs/"+j.ID, er.Token, map[string]any{"stage": "testing", "leaseEpoch": c.LeaseEpoch},
		header("Prefer", "respond-async, return=minimal"))
	require.Empty(t, res.body)
	require.Equal(t, api.PreferMinimal, res.header.Get(api.HeaderPreferenceApplied))
	f.ok(200, &j, "GET", "/api/fleet/jobs/"+j.ID, er.Token, nil)
	require.Equal(t, fleet.StageTesting, j.Stage)

	f.ok(200, &j, "POST", "/api/fleet/jobs/"+j.ID+"/actions/ship", rootToken, map[string]any{"reason": "tests green"})
	require.Equal(t, fleet.StageShipped, j.Stage)

	// Read back, with the header and without (a lookup across products).
	var got fleet.Job
	f.ok(200, &got, "GET", "/api/fleet/jobs/"+j.ID, rootToken, nil, product("p1"))
	require.Equal(t, fleet.StageShipped, got.Stage)
	f.ok(200, &got, "GET", "/api/fleet/jobs/"+j.ID, rootToken, nil)
	require.Equal(t, fleet.StageShipped, got.Stage)
	f.ok(200, &got, "GET", "/api/fleet/jobs/"+j.ID, er.Token, nil)
	// The factory no longer holds it: the job yes, its events no.
	require.Equal(t, 403, f.call("GET", "/api/fleet/jobs/"+j.ID+"/events", er.Token, nil).status)

	var events api.List[fleet.Event]
	f.ok(200, &events, "GET", "/api/fleet/jobs/"+j.ID+"/events", rootToken, nil)
	var types []string
	for _, e := range events.Items {
		types = append(types, string(e.Type))
	}
	require.Equal(t, []string{"submitted", "claimed", "stage", "stage", "ship"}, types)
	f.ok(200, &events, "GET", "/api/fleet/jobs/"+j.ID+"/events?after=3&limit=1", rootToken, nil)
	require.Len(t, events.Items, 1)
	require.Equal(t, int64(4), events.Items[0].Seq)

	var runs api.List[fleet.Run]
	f.ok(200, &runs, "GET", "/api/fleet/jobs/"+j.ID+"/runs", rootToken, nil)
	require.Len(t, runs.Items, 1)
	require.Equal(t, fleet.RunSucceeded, runs.Items[0].Result)

	var ex explain.Explanation
	f.ok(200, &ex, "GET", "/api/fleet/jobs/"+j.ID+"/explain", rootToken, nil)
	require.Equal(t, j.ID, ex.JobID)
	require.Len(t, ex.Schedule.Candidates, 1)

	var list api.List[fleet.Factory]
	f.ok(200, &list, "GET", "/api/fleet/factories", rootToken, nil)
	require.Len(t, list.Items, 1)
	var repos api.List[catalog.RepoInfo]
	f.ok(200, &repos, "GET", "/api/fleet/repos", rootToken, nil)
	require.Equal(t, []catalog.RepoInfo{{Repo: "learning_ai_notes", Products: []string{"p1"}, Factories: []string{"f1"}}}, repos.Items)
	var m coord.Metrics
	f.ok(200, &m, "GET", "/api/fleet/metrics", rootToken, nil)
	require.Equal(t, 1, m.Factories.Total)
	f.ok(200, &prod, "GET", "/api/fleet/products/p1", p1Token, nil)
	require.Equal(t, "Notes", prod.Name)
}

func TestLeaseRenewReleaseFail(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	tok := f.enroll("f1", []string{"p1"}, "r1")
	j := f.submit("p1", manifest("r1"))
	c := f.claim(tok)

	f.clock.Advance(time.Minute)
	var rr api.Renewal
	f.ok(200, &rr, "POST", "/api/fleet/jobs/"+j.ID+"/lease/renew", tok, map[string]any{"leaseEpoch": c.LeaseEpoch})
	require.Equal(t, f.clock.Now().Add(coord.DefaultLeaseTTL), rr.LeaseExpiresAt)

	stale := f.call("POST", "/api/fleet/jobs/"+j.ID+"/lease/renew", tok, map[string]any{"leaseEpoch": c.LeaseEpoch + 1})
	require.Equal(t, http.StatusConflict, stale.status)
	require.Equal(t, fleet.CodeFenced, stale.errorOf(t).Code)

	var rel fleet.Job
	f.ok(200, &rel, "POST", "/api/fleet/jobs/"+j.ID+"/lease/release", tok, map[string]any{"leaseEpoch": c.LeaseEpoch})
	require.Equal(t, fleet.StageQueued, rel.Stage)

	c = f.claim(tok)
	require.Equal(t, int64(2), c.LeaseEpoch)
	var failed fleet.Job
	f.ok(200, &failed, "POST", "/api/fleet/fail", tok, map[string]any{
		"jobId": j.ID, "leaseEpoch": c.LeaseEpoch, "reason": "flaky network", "retryable": true, "productId": "p1",
	})
	require.Equal(t, fleet.StageQueued, failed.Stage)
	require.Equal(t, 1, failed.Attempts)

	// The job is backing off and was never dispatched to f1: accept is a
	// conflict, and the fence on the old epoch holds.
	acc := f.call("POST", "/api/fleet/accept", tok, map[string]any{"jobId": j.ID, "dispatchEpoch": 0})
	require.Equal(t, http.StatusConflict, acc.status, acc)
	require.Equal(t, fleet.CodeConflict, acc.errorOf(t).Code)
	again := f.call("PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch})
	require.Equal(t, http.StatusConflict, again.status)
	require.Equal(t, fleet.CodeFenced, again.errorOf(t).Code)
}

func TestSubmitIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	m := manifest("r1", "idempotencyKey: tracker-4711")
	var first, second fleet.Job
	f.ok(201, &first, "POST", "/api/fleet/jobs", rootToken, m, product("p1"), contentType("text/markdown; charset=utf-8"))
	res := f.ok(200, &second, "POST", "/api/fleet/jobs", rootToken, m, product("p1"), contentType("text/markdown"))
	require.Equal(t, first.ID, second.ID)
	require.Empty(t, res.header.Get("Location"))

	var page api.JobPage
	f.ok(200, &page, "GET", "/api/fleet/jobs", rootToken, nil, product("p1"))
	require.Len(t, page.Items, 1)
}

func TestSubmitJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	var j fleet.Job
	// A token scoped to one product needs no header.
	f.ok(201, &j, "POST", "/api/fleet/jobs", p1Token, map[string]any{"manifest": manifest("r1", "priority: high")})
	require.Equal(t, "p1", j.ProductID)
	require.Equal(t, fleet.PriorityHigh, j.Priority)
	require.Equal(t, []string{"os:linux", "engine:claude"}, j.Capabilities)

	res := f.call("POST", "/api/fleet/jobs", rootToken, map[string]any{"manifest": manifest("not-owned")}, product("p1"))
	require.Equal(t, http.StatusUnprocessableEntity, res.status)
	require.Equal(t, api.ErrorDetail{Code: fleet.CodeRepoNotOwned, Field: "repo", Message: res.errorOf(t).Message}, res.errorOf(t))
}

func TestListJobsPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("p2", "r2")
	tok := f.enroll("f1", []string{"p1"}, "r1")
	var want []string
	for range 7 {
		want = append(want, f.submit("p1", manifest("r1")).ID)
		f.clock.Advance(time.Millisecond) // ids order by creation time
	}
	f.submit("p2", manifest("r2"))
	claimed := f.claim(tok).Job.ID

	var got []string
	cursor, pages := "", 0
	for {
		var page api.JobPage
		f.ok(200, &page, "GET", "/api/fleet/jobs?limit=3&cursor="+cursor, rootToken, nil, product("p1"))
		require.LessOrEqual(t, len(page.Items), 3)
		for _, j := range page.Items {
			require.Equal(t, "p1", j.ProductID)
			got = append(got, j.ID)
		}
		pages++
		if page.Cursor == "" {
			break
		}
		cursor = page.Cursor
		require.Less(t, pages, 10)
	}
	slices.Reverse(want)
	require.Equal(t, want, got, "every job once, newest first")
	require.GreaterOrEqual(t, pages, 3)

	var queued api.JobPage
	f.ok(200, &queued, "GET", "/api/fleet/jobs?stage=queued&limit=500", rootToken, nil, product("p1"))
	require.Len(t, queued.Items, 6)
	var assigned api.JobPage
	f.ok(200, &assigned, "GET", "/api/fleet/jobs?stage=assigned", p1Token, nil)
	require.Len(t, assigned.Items, 1)
	require.Equal(t, claimed, assigned.Items[0].ID)
	require.Empty(t, assigned.Cursor)
}

func TestFactoryTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	tok := f.enroll("f1", []string{"p1"}, "r1")

	// A factory rotates its own token: the old one stops working at once.
	var tr api.TokenResponse
	f.ok(200, &tr, "POST", "/api/fleet/factories/f1/token/rotate", tok, nil)
	require.Equal(t, "f1", tr.FactoryID)
	require.Equal(t, http.StatusUnauthorized, f.call("POST", "/api/fleet/claim", tok, nil).status)
	f.ok(http.StatusNoContent, nil, "POST", "/api/fleet/claim", tr.Token, nil)

	// An operator revokes it; then deregisters the factory.
	f.ok(http.StatusNoContent, nil, "POST", "/api/fleet/factories/f1/token/revoke", rootToken, nil)
	res := f.call("POST", "/api/fleet/claim", tr.Token, nil)
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Equal(t, `Bearer realm="fleet"`, res.header.Get("WWW-Authenticate"))
	f.ok(http.StatusNoContent, nil, "DELETE", "/api/fleet/factories/f1", rootToken, nil)
	require.Equal(t, http.StatusNotFound, f.call("DELETE", "/api/fleet/factories/f1", rootToken, nil).status)

	// Scoped operators enrol only inside their scope.
	f.ok(201, nil, "POST", "/api/fleet/factories/enroll", p1Token, map[string]any{"factoryId": "f2", "products": []string{"p1"}})
	res = f.call("POST", "/api/fleet/factories/enroll", p1Token, map[string]any{"factoryId": "f3"})
	require.Equal(t, http.StatusForbidden, res.status, "a factory serving every product")
	var list api.List[fleet.Factory]
	f.ok(200, &list, "GET", "/api/fleet/factories", otherToken, nil)
	require.Empty(t, list.Items)
	f.ok(200, &list, "GET", "/api/fleet/factories", multiToken, nil)
	require.Len(t, list.Items, 1)
}

func TestRequestIDAndAccessLog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res := f.call("GET", "/api/healthz", "", nil, header("X-Request-Id", "trace-42"))
	require.Equal(t, 200, res.status)
	require.Equal(t, "trace-42", res.header.Get("X-Request-Id"))
	require.Equal(t, "application/json", res.header.Get("Content-Type"))
	require.JSONEq(t, `{"status":"ok"}`, string(res.body))

	res = f.call("GET", "/api/fleet/metrics", rootToken, nil, header("X-Request-Id", "has spaces, so replaced"))
	id := res.header.Get("X-Request-Id")
	require.Len(t, id, 24)

	// The access line is written after the response has gone out.
	var line map[string]any
	require.Eventually(t, func() bool { line = f.accessLine(id); return line != nil }, 5*time.Second, time.Millisecond, "access log line for %s", id)
	require.Equal(t, "http request", line["msg"])
	require.Equal(t, "DEBUG", line["level"], "a routine answer")
	require.Equal(t, "GET", line["method"])
	require.Equal(t, "/api/fleet/metrics", line["path"])
	require.Equal(t, float64(200), line["status"])
	require.Equal(t, "operator:root", line["principal"])
	require.Contains(t, line, "durationMs")
	require.NotContains(t, f.logs.String(), rootToken)
}

// accessLine is the access log line of request id, if there is one.
func (f *fixture) accessLine(id string) map[string]any {
	for l := range strings.Lines(f.logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["requestId"] == id && m["msg"] == "http request" {
			return m
		}
	}
	return nil
}

// TestAccessLogLevels: at info, the access log keeps the requests refused
// (4xx, at info) and failed (5xx, at error) and leaves out the routine ones,
// which are logged at debug: a line for every call of a job's life was a
// pipe write and a wake-up of the log's reader each time.
func TestAccessLogLevels(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	j := f.submit("p1", manifest("r1"))
	f.logLevel.Set(slog.LevelInfo)

	for _, tc := range []struct {
		id, path, token string
		failing         bool
		status          int
		level           string // "" for no line
	}{
		{id: "routine", path: "/api/fleet/jobs/" + j.ID, token: rootToken, status: 200},
		{id: "refused", path: "/api/fleet/jobs/" + j.ID, token: "", status: 401, level: "INFO"},
		{id: "missing", path: "/api/fleet/jobs/j-none", token: rootToken, status: 404, level: "INFO"},
		{id: "failed", path: "/api/fleet/jobs/" + j.ID, token: rootToken, failing: true, status: 500, level: "ERROR"},
	} {
		f.faulty.setFailing(tc.failing)
		res := f.call("GET", tc.path, tc.token, nil, product("p1"), header("X-Request-Id", tc.id))
		f.faulty.setFailing(false)
		require.Equal(t, tc.status, res.status, "%s: %s", tc.id, res.body)
		if tc.level != "" {
			require.Eventually(t, func() bool { return f.accessLine(tc.id) != nil }, 5*time.Second, time.Millisecond, "access line of %s", tc.id)
			line := f.accessLine(tc.id)
			require.Equal(t, tc.level, line["level"], tc.id)
			require.Equal(t, float64(tc.status), line["status"], tc.id)
		}
	}
	// The lines of later requests are in: the routine one, answered before
	// them, would be too.
	require.Nil(t, f.accessLine("routine"), "a routine answer is not logged at info")

	f.logLevel.Set(slog.LevelDebug)
	res := f.call("GET", "/api/fleet/jobs/"+j.ID, rootToken, nil, product("p1"), header("X-Request-Id", "routine-debug"))
	require.Equal(t, 200, res.status)
	require.Eventually(t, func() bool { return f.accessLine("routine-debug") != nil }, 5*time.Second, time.Millisecond)
	require.Equal(t, "DEBUG", f.accessLine("routine-debug")["level"])
}

// TestListJobsCursorRefusedOnlyWhenBad: a cursor the store did not issue
// is a 400 naming cursor, and a store failure on a later page a 500: any
// unclassified failure with a cursor was taken as the cursor's fault, which
// hid outages behind "start again without it".
func TestListJobsCursorRefusedOnlyWhenBad(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	for range 3 {
		f.submit("p1", manifest("r1"))
		f.clock.Advance(time.Millisecond)
	}
	var page api.JobPage
	f.ok(200, &page, "GET", "/api/fleet/jobs?limit=1", rootToken, nil, product("p1"))
	require.NotEmpty(t, page.Cursor)

	res := f.call("GET", "/api/fleet/jobs?limit=1&cursor=x:5", rootToken, nil, product("p1"))
	require.Equal(t, http.StatusBadRequest, res.status, "%s", res)
	require.Equal(t, "cursor", res.errorOf(t).Field)

	f.faulty.setFailQueries(true)
	res = f.call("GET", "/api/fleet/jobs?limit=1&cursor="+url.QueryEscape(page.Cursor), rootToken, nil, product("p1"))
	f.faulty.setFailQueries(false)
	require.Equal(t, http.StatusInternalServerError, res.status, "%s", res)
	require.Equal(t, codeInternal, res.errorOf(t).Code)
}

func TestStoreFailures(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	j := f.submit("p1", manifest("r1"))

	f.faulty.setFailing(true)
	res := f.call("GET", "/api/fleet/jobs/"+j.ID, rootToken, nil, product("p1"))
	require.Equal(t, http.StatusInternalServerError, res.status)
	e := res.errorOf(t)
	require.Equal(t, codeInternal, e.Code)
	require.Contains(t, e.Message, res.header.Get("X-Request-Id"))
	require.NotContains(t, string(res.body), "secret-path", "internals stay in the log")
	require.Contains(t, f.logs.String(), "secret-path")
	f.faulty.setFailing(false)

	require.NoError(t, f.store.Close())
	res = f.call("GET", "/api/fleet/jobs/"+j.ID, rootToken, nil, product("p1"))
	require.Equal(t, http.StatusServiceUnavailable, res.status)
	require.Equal(t, fleet.CodeUnavailable, res.errorOf(t).Code)
	require.Equal(t, "5", res.header.Get("Retry-After"))
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
		code   fleet.Code
	}{
		{fleet.Invalid("x", "bad"), 400, fleet.CodeInvalid},
		{&fleet.IllegalTransitionError{From: fleet.StageShipped, To: fleet.StageBuilding, Actor: fleet.ActorFactory}, 409, fleet.CodeConflict},
		{fleet.Errorf(fleet.CodeFenced, "stale"), 409, fleet.CodeFenced},
		{fleet.Errorf(fleet.CodePaused, "paused"), 422, fleet.CodePaused},
		{fleet.Errorf(fleet.CodeBudgetExceeded, "over"), 422, fleet.CodeBudgetExceeded},
		{&http.MaxBytesError{Limit: 10}, 413, fleet.CodeTooLarge},
		{wrapf(store.ErrThrottled), 429, fleet.CodeThrottled},
		{wrapf(store.ErrUnavailable), 503, fleet.CodeUnavailable},
		{fleet.Errorf(fleet.CodeThrottled, "slow down"), 429, fleet.CodeThrottled},
		{wrapf(store.ErrPrecondition), 500, codeInternal},
	} {
		d := classify(tc.err)
		require.Equal(t, tc.code, d.Code, "%v", tc.err)
		require.Equal(t, tc.status, statusOf(d.Code), "%v", tc.err)
	}
}

func wrapf(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "store op: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func TestThrottledHasRetryAfter(t *testing.T) {
	t.Parallel()
	s := &server{log: slog.New(slog.DiscardHandler)}
	rec := httptest.NewRecorder()
	req, _ := http.NewRequest("GET", "/api/fleet/metrics", nil)
	s.writeError(rec, req, wrapf(store.ErrThrottled))
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.JSONEq(t, `{"error":{"code":"throttled","message":"the store is throttling requests; retry after the Retry-After delay"}}`, rec.Body.String())
}

// TestFailReasonWithControlCharacters: an engine that prints ANSI colours
// (or bytes that are not UTF-8) still gets its failure report accepted: the
// job ends failed at once, its reason stored escaped, instead of a 400 that
// leaves it leased until expiry and retried to dead_letter.
func TestFailReasonWithControlCharacters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body func(jobID string, epoch int64) any
		want string
	}{
		{"ansi colours", func(id string, epoch int64) any {
			return map[string]any{"jobId": id, "leaseEpoch": epoch, "reason": "\x1b[31mFAIL\x1b[0m tests", "retryable": false}
		}, `\x1b[31mFAIL\x1b[0m tests`},
		{"raw bytes that are not utf-8", func(id string, epoch int64) any {
			return fmt.Sprintf(`{"jobId":%q,"leaseEpoch":%d,"reason":"caf`+"\xe9"+`","retryable":false}`, id, epoch)
		}, "caf\ufffd"},
		{"empty reason", func(id string, epoch int64) any {
			return map[string]any{"jobId": id, "leaseEpoch": epoch, "reason": "", "retryable": false}
		}, "no reason given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.putProduct("p1", "r1")
			tok := f.enroll("f1", []string{"p1"}, "r1")
			j := f.submit("p1", manifest("r1"))
			c := f.claim(tok)
			var failed fleet.Job
			f.ok(200, &failed, "POST", "/api/fleet/fail", tok, tc.body(j.ID, c.LeaseEpoch))
			require.Equal(t, fleet.StageFailed, failed.Stage)
			require.Empty(t, failed.HolderFactoryID)
			require.Equal(t, tc.want, failed.LastFailure.Reason)
		})
	}
}

// TestListJobsPageBytes: a page is bounded in bytes as well as in jobs, so
// that jobs with large manifests do not make an answer no client reads
// (api.Client reads 8 MiB of one): past maxJobPageBytes the page ends early,
// its cursor right after its last job, and paging still lists every job
// once.
func TestListJobsPageBytes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	big := manifest("r1") + strings.Repeat("A long task. ", 900<<10/13)
	const n = 10
	for range n {
		f.submit("p1", big)
		f.clock.Advance(time.Millisecond)
	}
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		res := f.call("GET", "/api/fleet/jobs?limit=500&cursor="+cursor, rootToken, nil, product("p1"))
		require.Equal(t, http.StatusOK, res.status, "%s", res)
		require.LessOrEqual(t, len(res.body), maxJobPageBytes+4<<10, "page %d", pages)
		var page api.JobPage
		require.NoError(t, json.Unmarshal(res.body, &page))
		require.NotEmpty(t, page.Items)
		for _, j := range page.Items {
			require.False(t, seen[j.ID], "job %s twice", j.ID)
			seen[j.ID] = true
		}
		pages++
		if page.Cursor == "" {
			break
		}
		cursor = page.Cursor
		require.Less(t, pages, n)
	}
	require.Len(t, seen, n)
	require.GreaterOrEqual(t, pages, 3)
}
