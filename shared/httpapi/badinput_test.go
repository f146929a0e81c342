package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// TestBadInput: every malformed request gets the exact 4xx, code and field,
// never a 5xx, and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	held := "/api/fleet/jobs/" + w.held
	twoMiB := strings.Repeat("x", 2<<20)
	md := contentType("text/markdown")
	p1 := product("p1")

	type tc struct {
		name         string
		method, path string
		token        string
		body         any
		opts         []reqOption
		status       int
		code         fleet.Code
		field        string
	}
	bad := func(name, method, path, token string, body any, field string, opts ...reqOption) tc {
		return tc{name: name, method: method, path: path, token: token, body: body, opts: opts, status: 400, code: fleet.CodeInvalid, field: field}
	}
	cases := []tc{
		bad("truncated JSON", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": [`, ""),
		bad("JSON syntax error", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ]}`, ""),
		bad("unknown field", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": [], "colour": "red"}`, "colour"),
		bad("repeated field", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": [], "repos": ["r9"]}`, "repos"),
		bad("string for a list", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": "r1"}`, "repos"),
		bad("number in a string list", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": [1]}`, "repos"),
		bad("string for an integer", "POST", "/api/fleet/factories/heartbeat", w.f1, `{"capabilities": [], "repos": [], "load": "high"}`, "load"),
		bad("fraction for an integer", "POST", "/api/fleet/factories/enroll", rootToken, `{"factoryId": "f9", "seatLimit": 1.5}`, "seatLimit"),
		bad("string for an epoch", "POST", held+"/lease/renew", w.f1, `{"leaseEpoch": "1"}`, "leaseEpoch"),
		bad("trailing data", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": []} {}`, ""),
		bad("trailing garbage", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": []}x`, ""),
		bad("empty body", "PUT", "/api/fleet/products/p1", rootToken, "", ""),
		bad("array body", "PUT", "/api/fleet/products/p1", rootToken, `[]`, ""),
		bad("null body", "PUT", "/api/fleet/products/p1", rootToken, `null`, ""),
		bad("invalid UTF-8", "PUT", "/api/fleet/products/p1", rootToken, "{\"name\": \"\xff\", \"repos\": []}", ""),
		bad("missing repos", "PUT", "/api/fleet/products/p1", rootToken, `{"name": "x"}`, "repos"),
		bad("text/plain on a JSON route", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": []}`, "Content-Type", contentType("text/plain")),
		bad("malformed Content-Type", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": []}`, "Content-Type", contentType("text/")),
		bad("bad repo in product", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["../x"]}`, "repos[0]"),

		bad("unknown stage in PATCH", "PATCH", held, w.f1, `{"stage": "done", "leaseEpoch": 1}`, "stage"),
		bad("PATCH without leaseEpoch", "PATCH", held, w.f1, `{"stage": "building"}`, "leaseEpoch"),
		bad("PATCH to a stage a factory may not set", "PATCH", held, w.f1, `{"stage": "cancelled", "leaseEpoch": 1}`, "stage"),
		bad("checkpoint with a control character", "PATCH", held, w.f1, `{"leaseEpoch": 1, "checkpoint": "a\u0007b"}`, "checkpoint"),
		bad("unknown stage in a list filter", "GET", "/api/fleet/jobs?stage=done", rootToken, nil, "stage", p1),
		bad("limit 0", "GET", "/api/fleet/jobs?limit=0", rootToken, nil, "limit", p1),
		bad("limit 501", "GET", "/api/fleet/jobs?limit=501", rootToken, nil, "limit", p1),
		bad("limit not a number", "GET", "/api/fleet/jobs?limit=ten", rootToken, nil, "limit", p1),
		bad("unknown query parameter", "GET", "/api/fleet/jobs?stages=queued", rootToken, nil, "stages", p1),
		bad("repeated query parameter", "GET", "/api/fleet/jobs?stage=queued&stage=failed", rootToken, nil, "stage", p1),
		bad("query parameter on a route taking none", "GET", held+"?verbose=1", rootToken, nil, "verbose"),
		bad("malformed query string", "GET", "/api/fleet/jobs?stage=%zz", rootToken, nil, "", p1),
		bad("forged cursor", "GET", "/api/fleet/jobs?cursor=zzz", rootToken, nil, "cursor", p1),
		bad("cursor with control characters", "GET", "/api/fleet/jobs?cursor=%01", rootToken, nil, "cursor", p1),
		bad("list without a product", "GET", "/api/fleet/jobs", rootToken, nil, "x-product-id"),
		bad("malformed x-product-id", "GET", "/api/fleet/jobs", rootToken, nil, "x-product-id", product("../x")),
		bad("negative after", "GET", held+"/events?after=-1", rootToken, nil, "after"),
		bad("unknown action", "POST", held+"/actions/explode", rootToken, nil, "action"),
		bad("action with an unknown field", "POST", held+"/actions/cancel", rootToken, `{"why": "x"}`, "why"),
		bad("malformed job id", "GET", "/api/fleet/jobs/-x", rootToken, nil, "id"),
		bad("malformed factory id", "DELETE", "/api/fleet/factories/a%20b", rootToken, nil, "id"),
		bad("queue state without a product", "GET", "/api/fleet/queue-state", rootToken, nil, "x-product-id"),
		bad("metrics without a product, several in scope", "GET", "/api/fleet/metrics", multiToken, nil, "x-product-id"),

		bad("manifest without repo", "POST", "/api/fleet/jobs", rootToken, "---\ntitle: x\n---\nbody\n", "repo", p1, md),
		bad("repo escaping its directory", "POST", "/api/fleet/jobs", rootToken, manifest("../x"), "repo", p1, md),
		bad("capability without a kind", "POST", "/api/fleet/jobs", rootToken,
			"---\nrepo: r1\ncapabilities: [build]\n---\nbody\n", "capabilities[0]", p1, md),
		bad("manifest without a body", "POST", "/api/fleet/jobs", rootToken, "---\nrepo: r1\ntitle: x\n---\n", "body", p1, md),
		bad("manifest without front matter", "POST", "/api/fleet/jobs", rootToken, "just text", "manifest", p1, md),
		bad("unknown manifest field", "POST", "/api/fleet/jobs", rootToken, manifest("r1", "colour: red"), "colour", p1, md),
		bad("title with a right-to-left override", "POST", "/api/fleet/jobs", rootToken, "---\nrepo: r1\ntitle: fix \u202egnp.exe\n---\nbody\n", "title", p1, md),
		bad("title with a lone carriage return", "POST", "/api/fleet/jobs", rootToken, "---\nrepo: r1\ntitle: \"safe\\rrm -rf\"\n---\nbody\n", "title", p1, md),
		bad("empty markdown body", "POST", "/api/fleet/jobs", rootToken, "", "manifest", p1, md),
		bad("JSON submit without manifest", "POST", "/api/fleet/jobs", rootToken, `{}`, "manifest", p1),
		bad("JSON submit with a number", "POST", "/api/fleet/jobs", rootToken, `{"manifest": 5}`, "manifest", p1),
		bad("submit without Content-Type", "POST", "/api/fleet/jobs", rootToken, manifest("r1"), "Content-Type", p1, contentType("")),
		bad("submit as text/plain", "POST", "/api/fleet/jobs", rootToken, manifest("r1"), "Content-Type", p1, contentType("text/plain")),
		bad("submit without a product", "POST", "/api/fleet/jobs", rootToken, manifest("r1"), "x-product-id", md),

		bad("accept without dispatchEpoch", "POST", "/api/fleet/accept", w.f1, `{"jobId": "`+w.queued+`"}`, "dispatchEpoch"),
		bad("accept without jobId", "POST", "/api/fleet/accept", w.f1, `{"dispatchEpoch": 1}`, "jobId"),
		bad("accept with a malformed productId", "POST", "/api/fleet/accept", w.f1, `{"jobId": "j1", "dispatchEpoch": 1, "productId": "../x"}`, "productId"),
		bad("fail without retryable", "POST", "/api/fleet/fail", w.f1, `{"jobId": "`+w.held+`", "leaseEpoch": 1, "reason": "x"}`, "retryable"),
		bad("fail with an unknown kind", "POST", "/api/fleet/fail", w.f1, `{"jobId": "`+w.held+`", "leaseEpoch": 1, "reason": "x", "retryable": true, "kind": "tired"}`, "kind"),
		bad("fail with a cooldown that is not an engine's", "POST", "/api/fleet/fail", w.f1, `{"jobId": "`+w.held+`", "leaseEpoch": 1, "reason": "x", "retryable": true, "kind": "rate_limited", "cooldowns": {"gpu:a100": "2099-01-01T00:00:00Z"}}`, "cooldowns.gpu:a100"),
		bad("fail with an exit reason unknown", "POST", "/api/fleet/fail", w.f1, `{"jobId": "`+w.held+`", "leaseEpoch": 1, "reason": "x", "retryable": true, "exit": {"code": 1, "reason": "bored"}}`, "exit.reason"),
		bad("fail with a session that could be a flag", "POST", "/api/fleet/fail", w.f1, `{"jobId": "`+w.held+`", "leaseEpoch": 1, "reason": "x", "retryable": true, "engineSession": "--dangerously-skip-permissions"}`, "engineSession"),
		bad("usage with negative turns", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1, "usd": 1, "turns": -1}`, "turns"),
		bad("usage with negative cache reads", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1, "usd": 1, "cacheReadTokens": -1}`, "cacheReadTokens"),
		bad("fail without reason", "POST", "/api/fleet/fail", w.f1, `{"jobId": "`+w.held+`", "leaseEpoch": 1, "retryable": true}`, "reason"),
		bad("renew without leaseEpoch", "POST", held+"/lease/renew", w.f1, `{}`, "leaseEpoch"),
		bad("release with an empty body", "POST", held+"/lease/release", w.f1, "", ""),
		bad("usage without usd", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1}`, "usd"),
		bad("usage without leaseEpoch", "POST", held+"/usage", w.f1, `{"usd": 1}`, "leaseEpoch"),
		bad("negative usage", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1, "usd": -0.5}`, "usd"),
		bad("negative output tokens", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1, "usd": 1, "outputTokens": -3}`, "outputTokens"),
		bad("string for tokens", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1, "usd": 1, "inputTokens": "many"}`, "inputTokens"),
		bad("usage with an unknown field", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1, "usd": 1, "cost": 2}`, "cost"),
		bad("usage with a malformed engine", "POST", held+"/usage", w.f1, `{"leaseEpoch": 1, "usd": 1, "engine": "a b"}`, "engine"),
		bad("PATCH with negative usage", "PATCH", held, w.f1, `{"leaseEpoch": 1, "usage": {"usd": -1, "inputTokens": 0, "outputTokens": 0}}`, "usage.usd"),
		bad("PATCH with a negative diff", "PATCH", held, w.f1, `{"leaseEpoch": 1, "diff": {"files": -1, "insertions": 0, "deletions": 0}}`, "diff.files"),
		bad("PATCH with an empty head", "PATCH", held, w.f1, `{"leaseEpoch": 1, "head": ""}`, "head"),
		bad("fail with negative usage", "POST", "/api/fleet/fail", w.f1, `{"jobId": "`+w.held+`", "leaseEpoch": 1, "reason": "x", "retryable": true, "usage": {"usd": -2, "inputTokens": 0, "outputTokens": 0}}`, "usage.usd"),
		bad("budget without ceiling", "PUT", "/api/fleet/budgets/p1", rootToken, `{"period": "month"}`, "ceilingUsd"),
		bad("budget with a zero ceiling", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 0}`, "ceilingUsd"),
		bad("budget with an unknown period", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 5, "period": "week"}`, "period"),
		bad("budget alert above the ceiling", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 5, "alertAt": 1.5}`, "alertAt"),
		bad("budget with a negative default", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 5, "defaultJobUsd": -1}`, "defaultJobUsd"),
		bad("budget with a string ceiling", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": "lots"}`, "ceilingUsd"),
		bad("pause with a control character", "POST", "/api/fleet/budgets/p1/pause", rootToken, `{"reason": "a\u0007b"}`, "reason"),
		bad("resume with a field", "POST", "/api/fleet/budgets/p1/resume", rootToken, `{"reason": "x"}`, "reason"),
		bad("claim with a field", "POST", "/api/fleet/claim", w.f1, `{"products": ["p1"]}`, "products"),

		bad("children without a list", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken, `{}`, "children"),
		bad("children an empty list", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken, `{"children": []}`, "children"),
		bad("children a number", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken, `{"children": [5]}`, "children[0]"),
		bad("children an object without manifest", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken, `{"children": [{}]}`, "children[0].manifest"),
		bad("children an object with another field", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken, `{"children": [{"manifest": "x", "colour": 1}]}`, "children[0].colour"),
		bad("children with a bad manifest", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken,
			map[string]any{"children": []string{manifest("r1"), manifest("r1", "kind: epic")}}, "children[1].kind"),
		bad("children over the limit", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken,
			map[string]any{"children": make([]string, fleet.MaxChildrenPerRequest+1)}, "children"),
		bad("children from an operator with an epoch", "POST", "/api/fleet/jobs/"+w.queued+"/children", rootToken,
			map[string]any{"leaseEpoch": 1, "children": []string{manifest("r1")}}, "leaseEpoch"),
		bad("children from the holder without an epoch", "POST", held+"/children", w.f1,
			map[string]any{"children": []string{manifest("r1")}}, "leaseEpoch"),
		bad("vote without approve", "POST", held+"/review", rootToken, `{"head": "h"}`, "approve"),
		bad("vote without head", "POST", held+"/review", rootToken, `{"approve": true}`, "head"),
		bad("vote with a string approve", "POST", held+"/review", rootToken, `{"approve": "yes", "head": "h"}`, "approve"),
		bad("review request with repeated reviewers", "POST", held+"/review/request", rootToken,
			map[string]any{"reviewers": []string{"a", "a"}}, "reviewers[1]"),
		bad("review request with quorum 0", "POST", held+"/review/request", rootToken,
			map[string]any{"quorum": 0}, "quorum"),
		bad("review request from an operator with an epoch", "POST", held+"/review/request", rootToken,
			map[string]any{"leaseEpoch": 1}, "leaseEpoch"),
		bad("heartbeat capability without a kind", "POST", "/api/fleet/factories/heartbeat", w.f1, `{"capabilities": ["build"], "repos": []}`, "capabilities[0]"),
		bad("heartbeat without repos", "POST", "/api/fleet/factories/heartbeat", w.f1, `{"capabilities": []}`, "repos"),
		bad("heartbeat with an unknown health", "POST", "/api/fleet/factories/heartbeat", w.f1, `{"capabilities": [], "repos": [], "health": "great"}`, "health"),
		bad("heartbeat cooldown for no engine", "POST", "/api/fleet/factories/heartbeat", w.f1, `{"capabilities": [], "repos": [], "cooldowns": {"gpu:a100": "2099-01-01T00:00:00Z"}}`, "cooldowns.gpu:a100"),
		bad("heartbeat cooldown a year ahead", "POST", "/api/fleet/factories/heartbeat", w.f1, `{"capabilities": [], "repos": [], "cooldowns": {"engine:claude": "2099-01-01T00:00:00Z"}}`, "cooldowns.engine:claude"),
		bad("enroll with an unknown kind", "POST", "/api/fleet/factories/enroll", rootToken, `{"factoryId": "f9", "kind": "huge"}`, "kind"),
		bad("enroll with a path as id", "POST", "/api/fleet/factories/enroll", rootToken, `{"factoryId": "../f9"}`, "factoryId"),
		bad("enroll with a capability without a kind", "POST", "/api/fleet/factories/enroll", rootToken, `{"factoryId": "f9", "capabilities": ["build"]}`, "capabilities[0]"),
		bad("enroll with a negative cost", "POST", "/api/fleet/factories/enroll", rootToken, `{"factoryId": "f9", "costPerHourUsd": -1}`, "costPerHourUsd"),

		{name: "2 MiB markdown", method: "POST", path: "/api/fleet/jobs", token: rootToken, body: "---\nrepo: r1\n---\n" + twoMiB,
			opts: []reqOption{p1, md}, status: 413, code: fleet.CodeTooLarge},
		{name: "2 MiB JSON", method: "PUT", path: "/api/fleet/products/p1", token: rootToken, body: `{"name": "` + twoMiB + `", "repos": []}`,
			status: 413, code: fleet.CodeTooLarge},
		{name: "heartbeat capability outside the token", method: "POST", path: "/api/fleet/factories/heartbeat", token: w.f1,
			body: `{"capabilities": ["gpu:a100"], "repos": []}`, status: 403, code: fleet.CodeForbidden, field: "capabilities[0]"},
		{name: "unknown route", method: "GET", path: "/api/fleet/nothing", token: rootToken, status: 404, code: fleet.CodeNotFound},
		{name: "budget of a product without one", method: "GET", path: "/api/fleet/budgets/other", token: rootToken, status: 404, code: fleet.CodeNotFound},
		{name: "budget of an undeclared product", method: "PUT", path: "/api/fleet/budgets/nope", token: rootToken,
			body: `{"ceilingUsd": 5}`, status: 404, code: fleet.CodeNotFound},
		{name: "pause a product without a budget", method: "POST", path: "/api/fleet/budgets/other/pause", token: rootToken, status: 404, code: fleet.CodeNotFound},
		{name: "submit a job whose budget exceeds the product's ceiling", method: "POST", path: "/api/fleet/jobs", token: rootToken,
			body: manifest("r1", "budget: {usd: 5000}"), opts: []reqOption{p1, md}, status: 422, code: fleet.CodeBudgetExceeded, field: "budget.usd"},
		{name: "usage of a stale epoch", method: "POST", path: held + "/usage", token: w.f1,
			body: fmt.Sprintf(`{"leaseEpoch": %d, "usd": 1}`, w.heldEpoch+1), status: 409, code: fleet.CodeFenced},
		{name: "unknown job", method: "GET", path: "/api/fleet/jobs/jmissing", token: rootToken, opts: []reqOption{p1}, status: 404, code: fleet.CodeNotFound},
		{name: "wrong method", method: "DELETE", path: "/api/healthz", status: 405, code: codeMethodNotAllowed},
		{name: "action the stage forbids", method: "POST", path: held + "/actions/ship", token: rootToken, status: 409, code: fleet.CodeConflict},
		{name: "enroll an enrolled factory", method: "POST", path: "/api/fleet/factories/enroll", token: rootToken,
			body: `{"factoryId": "f1"}`, status: 409, code: fleet.CodeConflict},
		{name: "submit for a repo the product does not own", method: "POST", path: "/api/fleet/jobs", token: rootToken,
			body: manifest("r2"), opts: []reqOption{p1, md}, status: 422, code: fleet.CodeRepoNotOwned, field: "repo"},
	}
	ingest := "/api/fleet/tracker/ingest"
	mf, _ := json.Marshal(manifest("r1"))
	cases = append(cases,
		bad("ingest without source", "POST", ingest, rootToken, `{"itemId": "P-1", "revision": 1, "manifest": `+string(mf)+`}`, "source", p1),
		bad("ingest with a bad source", "POST", ingest, rootToken, `{"source": "a:b", "itemId": "P-1", "revision": 1, "manifest": `+string(mf)+`}`, "source", p1),
		bad("ingest with a numeric item", "POST", ingest, rootToken, `{"source": "jira", "itemId": 7, "revision": 1, "manifest": `+string(mf)+`}`, "itemId", p1),
		bad("ingest without revision", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "manifest": `+string(mf)+`}`, "revision", p1),
		bad("ingest with a string revision", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": "2", "manifest": `+string(mf)+`}`, "revision", p1),
		bad("ingest with revision 0", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 0, "manifest": `+string(mf)+`}`, "revision", p1),
		bad("ingest without manifest", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 1}`, "manifest", p1),
		bad("ingest with manifest and fields", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 1, "manifest": `+string(mf)+`, "title": "x"}`, "title", p1),
		bad("ingest fields with a bad priority", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 1, "repo": "r1", "priority": "urgent"}`, "priority", p1),
		bad("ingest fields with an unknown field", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 1, "repo": "r1", "colour": "red"}`, "colour", p1),
		bad("ingest with a numeric body", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 1, "repo": "r1", "body": 5}`, "body", p1),
		bad("ingest naming its own key", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 1, "repo": "r1", "body": "Do it.", "idempotencyKey": "k"}`, "idempotencyKey", p1),
		bad("ingest without a product", "POST", ingest, rootToken, `{"source": "jira", "itemId": "P-1", "revision": 1, "manifest": `+string(mf)+`}`, productField),
		tc{name: "ingest for a repo the product does not own", method: "POST", path: ingest, token: rootToken,
			body: `{"source": "jira", "itemId": "P-1", "revision": 1, "repo": "r2", "body": "Do it."}`, opts: []reqOption{p1}, status: 422, code: fleet.CodeRepoNotOwned, field: "repo"},
		bad("tracker webhook not absolute", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["r1"], "tracker": {"webhookUrl": "/hook", "secret": "0123456789abcdef"}}`, "tracker.webhookUrl"),
		bad("tracker webhook ftp", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["r1"], "tracker": {"webhookUrl": "ftp://h/x", "secret": "0123456789abcdef"}}`, "tracker.webhookUrl"),
		bad("tracker webhook with credentials", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["r1"], "tracker": {"webhookUrl": "https://u:p@h/x", "secret": "0123456789abcdef"}}`, "tracker.webhookUrl"),
		bad("tracker without a secret", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["r1"], "tracker": {"webhookUrl": "https://h/x"}}`, "tracker.secret"),
		bad("tracker with a short secret", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["r1"], "tracker": {"webhookUrl": "https://h/x", "secret": "short"}}`, "tracker.secret"),
		bad("tracker with an unknown field", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["r1"], "tracker": {"url": "https://h/x"}}`, "tracker.url"),
		bad("tracker as a string", "PUT", "/api/fleet/products/p1", rootToken, `{"repos": ["r1"], "tracker": "https://h/x"}`, "tracker"),
	)

	before := f.snapshot()
	for _, c := range cases {
		res := f.call(c.method, c.path, c.token, c.body, c.opts...)
		require.Less(t, res.status, 500, "%s: %s", c.name, res)
		require.Equal(t, c.status, res.status, "%s: %s", c.name, res)
		require.Equal(t, "application/json", res.header.Get("Content-Type"), c.name)
		e := res.errorOf(t)
		require.Equal(t, c.code, e.Code, "%s: %s", c.name, res)
		require.Equal(t, c.field, e.Field, "%s: %s", c.name, res)
		require.NotEmpty(t, e.Message, c.name)
		if c.status == 405 {
			require.Equal(t, "GET, HEAD", res.header.Get("Allow"))
		}
	}
	require.Equal(t, before, f.snapshot(), "rejected requests changed stored state")
}

// TestManifestTooLarge: with a body cap above the manifest cap, an
// oversized manifest is refused by the manifest's own limit.
func TestManifestTooLarge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withMaxBody(4<<20))
	f.putProduct("p1", "r1")
	big := manifest("r1") + strings.Repeat("x", fleet.MaxManifestBytes)
	for _, body := range []any{big, map[string]any{"manifest": big}} {
		ct := contentType("text/markdown")
		if _, ok := body.(string); !ok {
			ct = contentType("application/json")
		}
		res := f.call("POST", "/api/fleet/jobs", rootToken, body, product("p1"), ct)
		require.Equal(t, http.StatusRequestEntityTooLarge, res.status, res)
		require.Equal(t, api.ErrorDetail{Code: fleet.CodeTooLarge, Field: "manifest", Message: res.errorOf(t).Message}, res.errorOf(t))
	}
}

// names returns n distinct short repo names (base 36), so even 120,000 of
// them fit in a body under the cap.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "r" + strconv.FormatInt(int64(i), 36)
	}
	return out
}

// TestListsBounded: every list a client sends has a bound, and a list over
// it is a 400 naming the field before any work on its entries (120,000
// repos in one heartbeat used to cost seconds of CPU in de-duplication);
// nothing is stored.
func TestListsBounded(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	caps := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "has:tool" + strconv.Itoa(i)
		}
		return out
	}
	list := func(items []string) string { return "[" + strings.Join(items, ", ") + "]" }
	cases := []struct {
		name, method, path, token string
		body                      any
		opts                      []reqOption
		field                     string
	}{
		{"heartbeat with 120,000 repos", "POST", "/api/fleet/factories/heartbeat", w.f1,
			map[string]any{"capabilities": []string{}, "repos": names(120_000)}, nil, "repos"},
		{"heartbeat repos over the bound", "POST", "/api/fleet/factories/heartbeat", w.f1,
			map[string]any{"capabilities": []string{}, "repos": names(fleet.MaxRepos + 1)}, nil, "repos"},
		{"heartbeat capabilities over the bound", "POST", "/api/fleet/factories/heartbeat", w.f1,
			map[string]any{"capabilities": caps(fleet.MaxCapabilities + 1), "repos": []string{}}, nil, "capabilities"},
		{"product repos over the bound", "PUT", "/api/fleet/products/p1", rootToken,
			map[string]any{"repos": names(fleet.MaxRepos + 1)}, nil, "repos"},
		{"enroll products over the bound", "POST", "/api/fleet/factories/enroll", rootToken,
			map[string]any{"factoryId": "f9", "products": names(fleet.MaxProducts + 1)}, nil, "products"},
		{"enroll capabilities over the bound", "POST", "/api/fleet/factories/enroll", rootToken,
			map[string]any{"factoryId": "f9", "capabilities": caps(fleet.MaxCapabilities + 1)}, nil, "capabilities"},
		{"manifest capabilities over the bound", "POST", "/api/fleet/jobs", rootToken,
			manifest("r1", "capabilities: "+list(caps(fleet.MaxCapabilities+1))), []reqOption{product("p1"), contentType("text/markdown")}, "capabilities"},
		{"manifest deps over the bound", "POST", "/api/fleet/jobs", rootToken,
			manifest("r1", "deps: "+list(names(fleet.MaxDeps+1))), []reqOption{product("p1"), contentType("text/markdown")}, "deps"},
		{"manifest reviewers over the bound", "POST", "/api/fleet/jobs", rootToken,
			manifest("r1", "review: {reviewers: "+list(names(fleet.MaxReviewers+1))+"}"), []reqOption{product("p1"), contentType("text/markdown")}, "review.reviewers"},
	}
	before := f.snapshot()
	for _, c := range cases {
		res := f.call(c.method, c.path, c.token, c.body, c.opts...)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %.300s", c.name, res)
		e := res.errorOf(t)
		require.Equal(t, fleet.CodeInvalid, e.Code, c.name)
		require.Equal(t, c.field, e.Field, "%s: %s", c.name, e.Message)
	}
	require.Equal(t, before, f.snapshot(), "rejected requests changed stored state")
}

// TestListsDeduplicated: lists at their bound (counted as sent) are taken,
// duplicates dropped and the first occurrence's order kept.
func TestListsDeduplicated(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	repos := names(fleet.MaxRepos - 10)
	withDups := append(append([]string{}, repos...), repos[2:12]...)
	withDups[1] = repos[0] // a duplicate early on, too
	want := append([]string{repos[0]}, repos[2:]...)

	var p fleet.Product
	f.ok(200, &p, "PUT", "/api/fleet/products/p1", rootToken, map[string]any{"repos": withDups})
	require.Equal(t, want, p.Repos)

	tok := f.enroll("f1", []string{"p1", "p1"}, "r0")
	var fac fleet.Factory
	f.ok(200, &fac, "POST", "/api/fleet/factories/heartbeat", tok, map[string]any{"capabilities": []string{}, "repos": withDups})
	require.Equal(t, want, fac.Repos)
	require.Equal(t, []string{"p1"}, fac.Products)
}

// TestManifestEncodedTooLarge: a manifest under the byte limit whose stored
// form is over the store's (1 MiB of '<' escapes to 6 MiB) is 413 too_large
// naming the body, and nothing is stored, not even the dependency mark.
func TestManifestEncodedTooLarge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	dep := f.submit("p1", manifest("r1"))
	src := manifest("r1", "deps: ["+dep.ID+"]")
	// A quote takes two bytes stored ('<' takes one since job documents
	// are written without HTML escaping).
	src += strings.Repeat(`"`, fleet.MaxManifestBytes-len(src))
	before := f.snapshot()
	res := f.call("POST", "/api/fleet/jobs", rootToken, src, product("p1"), contentType("text/markdown"))
	require.Equal(t, http.StatusRequestEntityTooLarge, res.status, "%.300s", res)
	e := res.errorOf(t)
	require.Equal(t, fleet.CodeTooLarge, e.Code)
	require.Equal(t, "body", e.Field)
	require.Equal(t, before, f.snapshot(), "a rejected submit changed stored state")
}

// TestStoreTooLargeMapsToTooLarge: the store's size error is too_large
// (413) wherever it comes from, never a 500.
func TestStoreTooLargeMapsToTooLarge(t *testing.T) {
	t.Parallel()
	d := classify(fmt.Errorf("write factory f1: %w", store.ErrTooLarge))
	require.Equal(t, fleet.CodeTooLarge, d.Code)
	require.Equal(t, http.StatusRequestEntityTooLarge, statusOf(d.Code))
}
