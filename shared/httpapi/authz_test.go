package httpapi

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// authzWorld is the state every authz case runs against: products p1 and
// other; f1 (p1) holding job held at epoch 1; job queued in p1; f2 (p1)
// whose token is revoked; fo serving only other; fo2 serving other and p3.
// TestAuthzMatrix adds f3 (p1), holding nothing, for the routes a factory
// may use only for a job it holds.
type authzWorld struct {
	f                                         *fixture
	f1, revoked, bystander, foreign, foreign2 string // factory tokens
	held, queued                              string // job ids in p1
	heldEpoch                                 int64
	artifact                                  string // an operator's artifact of held
	tracked                                   string // a job of p1 ingested from a tracker item
}

func newAuthzWorld(t testing.TB) *authzWorld {
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("other", "r2")
	w := &authzWorld{f: f}
	w.f1 = f.enroll("f1", []string{"p1"}, "r1")
	w.revoked = f.enroll("f2", []string{"p1"}, "r1")
	f.ok(http.StatusNoContent, nil, "POST", "/api/fleet/factories/f2/token/revoke", rootToken, nil)
	w.foreign = f.enroll("fo", []string{"other"}, "r2")
	w.foreign2 = f.enroll("fo2", []string{"other", "p3"}, "r2")
	w.held = f.submit("p1", manifest("r1")).ID
	c := f.claim(w.f1)
	require.Equal(t, w.held, c.Job.ID)
	w.heldEpoch = c.LeaseEpoch
	w.queued = f.submit("p1", manifest("r1")).ID
	f.ok(http.StatusCreated, nil, "PUT", "/api/fleet/profiles/backend", rootToken, map[string]any{"profile": "---\n---\nBe careful.\n"}, product("p1"))
	var a fleet.Artifact
	f.ok(http.StatusCreated, &a, "POST", "/api/fleet/jobs/"+w.held+"/artifacts?name=notes.txt", rootToken, "operator's notes", contentType("text/plain"))
	w.artifact = a.ID
	f.ok(http.StatusOK, nil, "PUT", "/api/fleet/budgets/p1", rootToken, map[string]any{"ceilingUsd": 1000})
	var tracked fleet.Job
	f.ok(http.StatusCreated, &tracked, "POST", "/api/fleet/tracker/ingest", rootToken,
		map[string]any{"source": "jira", "itemId": "W-1", "revision": 1, "manifest": manifest("r1")}, product("p1"))
	w.tracked = tracked.ID
	return w
}

// authzRequest is a request that the right principal may make (want is its
// status) and every wrong one must be refused.
type authzRequest struct {
	path        string
	body        any
	contentType string
	token       func(w *authzWorld) string
	want        int
	// scope says what the request names that belongs to p1, so that a
	// principal of other products is refused even without x-product-id.
	scope scope
}

type scope int

const (
	scopeNone     scope = iota
	scopeJob            // a job of p1
	scopeResource       // a factory or product of p1, or an enrollment into p1
)

func operator(*authzWorld) string     { return rootToken }
func factoryF1(w *authzWorld) string  { return w.f1 }
func manifestBody(*authzWorld) string { return manifest("r1") }

// authzRequests has one valid request per route; the test fails for a route
// missing here, so a new route cannot skip the matrix.
func authzRequests(w *authzWorld) map[string]authzRequest {
	held, queued := "/api/fleet/jobs/"+w.held, "/api/fleet/jobs/"+w.queued
	lease := map[string]any{"leaseEpoch": w.heldEpoch}
	return map[string]authzRequest{
		"POST /api/fleet/jobs":     {path: "/api/fleet/jobs", body: manifestBody(w), contentType: "text/markdown", token: operator, want: 201},
		"GET /api/fleet/jobs":      {path: "/api/fleet/jobs", token: operator, want: 200},
		"GET /api/fleet/jobs/{id}": {path: held, token: operator, want: 200, scope: scopeJob},
		"PATCH /api/fleet/jobs/{id}": {path: held, body: map[string]any{"stage": "building", "leaseEpoch": w.heldEpoch},
			token: factoryF1, want: 200, scope: scopeJob},
		"POST /api/fleet/jobs/{id}/actions/{action}": {path: queued + "/actions/cancel", body: map[string]any{"reason": "no"},
			token: operator, want: 200, scope: scopeJob},
		"POST /api/fleet/jobs/{id}/lease/renew":   {path: held + "/lease/renew", body: lease, token: factoryF1, want: 200, scope: scopeJob},
		"POST /api/fleet/jobs/{id}/lease/release": {path: held + "/lease/release", body: lease, token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/runs":           {path: held + "/runs", token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/events":         {path: held + "/events", token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/explain":        {path: held + "/explain", token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/events/stream":  {path: held + "/events/stream", token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/events/stream":            {path: "/api/fleet/events/stream", token: operator, want: 200},
		"GET /api/fleet/events":                   {path: "/api/fleet/events", token: operator, want: 200},
		"POST /api/fleet/claim":                   {path: "/api/fleet/claim", token: factoryF1, want: 200},
		"POST /api/fleet/jobs/{id}/children": {path: queued + "/children", body: map[string]any{"children": []string{manifest("r1")}},
			token: operator, want: 201, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/dag": {path: held + "/dag", token: factoryF1, want: 200, scope: scopeJob},
		// The holder may request a review of its job, but not of one it
		// has not started building: 409 once through authorisation.
		"POST /api/fleet/jobs/{id}/review/request": {path: held + "/review/request", body: map[string]any{"leaseEpoch": w.heldEpoch, "head": "aq/job/x@1"}, token: factoryF1, want: 409, scope: scopeJob},
		// Not in review: 409 once through authorisation.
		"POST /api/fleet/jobs/{id}/review": {path: queued + "/review", body: map[string]any{"approve": true, "head": "h"},
			token: operator, want: 409, scope: scopeJob},
		"POST /api/fleet/jobs/{id}/artifacts": {path: held + "/artifacts?name=output.log&kind=log&leaseEpoch=" + strconv.FormatInt(w.heldEpoch, 10),
			body: "engine output\n", contentType: "text/plain", token: factoryF1, want: 201, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/artifacts": {path: held + "/artifacts", token: factoryF1, want: 200, scope: scopeJob},
		"POST /api/fleet/jobs/{id}/log": {path: held + "/log?offset=0&leaseEpoch=" + strconv.FormatInt(w.heldEpoch, 10),
			body: "engine output\n", contentType: "text/plain", token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/log":          {path: held + "/log", token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/log/stream":   {path: held + "/log/stream", token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/artifacts/{id}":         {path: "/api/fleet/artifacts/" + w.artifact, token: factoryF1, want: 200, scope: scopeJob},
		"GET /api/fleet/artifacts/{id}/content": {path: "/api/fleet/artifacts/" + w.artifact + "/content", token: factoryF1, want: 200, scope: scopeJob},
		"DELETE /api/fleet/artifacts/{id}":      {path: "/api/fleet/artifacts/" + w.artifact, token: operator, want: 204, scope: scopeJob},
		"POST /api/fleet/accept": {path: "/api/fleet/accept", body: map[string]any{"jobId": w.queued, "dispatchEpoch": 0},
			token: factoryF1, want: http.StatusConflict, scope: scopeJob}, // never dispatched to f1
		"POST /api/fleet/fail": {path: "/api/fleet/fail", body: map[string]any{"jobId": w.held, "leaseEpoch": w.heldEpoch,
			"reason": "broke", "retryable": false}, token: factoryF1, want: 200, scope: scopeJob},
		"POST /api/fleet/factories/enroll": {path: "/api/fleet/factories/enroll",
			body: map[string]any{"factoryId": "f9", "products": []string{"p1"}}, token: operator, want: 201, scope: scopeResource},
		"POST /api/fleet/factories/heartbeat": {path: "/api/fleet/factories/heartbeat",
			body: map[string]any{"capabilities": []string{"os:linux"}, "repos": []string{"r1"}}, token: factoryF1, want: 200},
		"GET /api/fleet/factories":                    {path: "/api/fleet/factories", token: operator, want: 200},
		"DELETE /api/fleet/factories/{id}":            {path: "/api/fleet/factories/f1", token: operator, want: 204, scope: scopeResource},
		"POST /api/fleet/factories/{id}/drain":        {path: "/api/fleet/factories/f1/drain", token: operator, want: 200, scope: scopeResource},
		"POST /api/fleet/factories/{id}/undrain":      {path: "/api/fleet/factories/f1/undrain", token: operator, want: 200, scope: scopeResource},
		"POST /api/fleet/factories/{id}/token/rotate": {path: "/api/fleet/factories/f1/token/rotate", token: factoryF1, want: 200, scope: scopeResource},
		"POST /api/fleet/factories/{id}/token/revoke": {path: "/api/fleet/factories/f1/token/revoke", token: operator, want: 204, scope: scopeResource},
		"PUT /api/fleet/products/{productId}": {path: "/api/fleet/products/p1", body: map[string]any{"repos": []string{"r1", "r3"}},
			token: operator, want: 200, scope: scopeResource},
		"GET /api/fleet/products/{productId}": {path: "/api/fleet/products/p1", token: operator, want: 200, scope: scopeResource},
		"GET /api/fleet/repos":                {path: "/api/fleet/repos", token: operator, want: 200},
		"GET /api/fleet/metrics":              {path: "/api/fleet/metrics", token: operator, want: 200},
		"PUT /api/fleet/profiles/{name}": {path: "/api/fleet/profiles/backend", body: "---\ncapabilities: [gpu:a100]\n---\nBe bold.\n",
			contentType: "text/markdown", token: operator, want: 201},
		"GET /api/fleet/profiles":                 {path: "/api/fleet/profiles", token: operator, want: 200},
		"GET /api/fleet/profiles/{name}":          {path: "/api/fleet/profiles/backend?version=1", token: operator, want: 200},
		"GET /api/fleet/profiles/{name}/versions": {path: "/api/fleet/profiles/backend/versions", token: operator, want: 200},
		"GET /api/fleet/queue-state":              {path: "/api/fleet/queue-state", token: factoryF1, want: 200},
		"POST /api/fleet/jobs/{id}/usage": {path: held + "/usage", body: map[string]any{"leaseEpoch": w.heldEpoch, "usd": 0.5,
			"inputTokens": 10, "outputTokens": 20}, token: factoryF1, want: 200, scope: scopeJob},
		"PUT /api/fleet/budgets/{productId}": {path: "/api/fleet/budgets/p1", body: map[string]any{"ceilingUsd": 50, "period": "total"},
			token: operator, want: 200, scope: scopeResource},
		"GET /api/fleet/budgets/{productId}":          {path: "/api/fleet/budgets/p1", token: operator, want: 200, scope: scopeResource},
		"GET /api/fleet/budgets/{productId}/burndown": {path: "/api/fleet/budgets/p1/burndown", token: operator, want: 200, scope: scopeResource},
		"POST /api/fleet/budgets/{productId}/pause": {path: "/api/fleet/budgets/p1/pause", body: map[string]any{"reason": "audit"},
			token: operator, want: 200, scope: scopeResource},
		"POST /api/fleet/budgets/{productId}/resume": {path: "/api/fleet/budgets/p1/resume", token: operator, want: 200, scope: scopeResource},
		"POST /api/fleet/tracker/echo":               {path: "/api/fleet/tracker/echo", body: map[string]any{"jobId": w.tracked}, token: operator, want: 202, scope: scopeJob},
		"GET /api/fleet/jobs/{id}/echo":              {path: "/api/fleet/jobs/" + w.tracked + "/echo", token: operator, want: 200, scope: scopeJob},
		"POST /api/fleet/tracker/ingest": {path: "/api/fleet/tracker/ingest", body: map[string]any{"source": "jira", "itemId": "P-1",
			"revision": 1, "manifest": manifest("r1")}, token: operator, want: 201},
		// Public: the signature, not a bearer, admits it (forge_test.go);
		// unsigned, as here, it is 401.
		"POST /api/fleet/forge/github": {path: "/api/fleet/forge/github", body: map[string]any{"zen": "Keep it logically awesome.", "hook_id": 1},
			token: operator, want: 401},
	}
}

// denial is one wrong principal and the status it must get.
type denial struct {
	name    string
	token   string
	auth    string // a raw Authorization header, instead of token
	product string // x-product-id
	want    int
}

func denials(w *authzWorld, rt route, req authzRequest) []denial {
	d := []denial{
		{name: "no token", want: 401},
		{name: "unknown factory-like token", token: junkToken, want: 401},
		{name: "unknown token", token: "not-a-token-anyone-issued", want: 401},
		{name: "revoked factory token", token: w.revoked, want: 401},
		{name: "not bearer", auth: "Basic " + rootToken, want: 401},
		{name: "two tokens", auth: "Bearer " + rootToken + " " + rootToken, want: 401},
		{name: "operator of another product", token: otherToken, product: "p1", want: 403},
		{name: "factory of another product", token: w.foreign, product: "p1", want: 403},
	}
	switch rt.access {
	case operatorOnly:
		d = append(d, denial{name: "factory token on an operator route", token: w.f1, product: "p1", want: 403})
	case factoryOnly:
		d = append(d, denial{name: "operator token on a factory route", token: rootToken, product: "p1", want: 403})
	case operatorOrSelf:
		d = append(d, denial{name: "factory acting on another factory", token: w.foreign, want: 403})
	}
	if rt.access == operatorOrHolder {
		// A factory of p1 may make it only for a job it holds (API.md,
		// Auth), so f3 is refused.
		d = append(d,
			denial{name: "factory of the product not holding the job", token: w.bystander, product: "p1", want: 403},
			denial{name: "factory of the product not holding the job, no header", token: w.bystander, want: 403})
	}
	admitsOperators := rt.access != factoryOnly
	admitsFactories := rt.access == factoryOnly || rt.access == anyPrincipal || rt.access == operatorOrHolder
	switch req.scope {
	case scopeJob:
		// A principal of exactly one product looks in that product and
		// does not find the job; one of several finds it across products
		// and is refused by scope.
		d = append(d,
			denial{name: "operator of another product, no header", token: otherToken, want: ifElse(admitsOperators, 404, 403)},
			denial{name: "operator of other products, no header", token: elsewhereToken, want: 403},
			denial{name: "factory of another product, no header", token: w.foreign, want: ifElse(admitsFactories, 404, 403)},
			denial{name: "factory of other products, no header", token: w.foreign2, want: 403})
	case scopeResource:
		d = append(d,
			denial{name: "operator of another product, no header", token: otherToken, want: 403},
			denial{name: "operator of other products, no header", token: elsewhereToken, want: 403},
			denial{name: "factory of another product, no header", token: w.foreign, want: 403})
	}
	return d
}

func TestAuthzMatrix(t *testing.T) {
	t.Parallel()
	for _, rt := range routes {
		if rt.access == public {
			continue
		}
		key := rt.method + " " + rt.pattern
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			w := newAuthzWorld(t)
			req, ok := authzRequests(w)[key]
			require.True(t, ok, "route %s has no authz case: add one to authzRequests", key)
			if rt.access == operatorOrHolder {
				// Its only repo is one no job names: it never gets one.
				w.bystander = w.f.enroll("f3", []string{"p1"}, "r9")
			}
			ct := req.contentType
			if ct == "" {
				ct = "application/json"
			}

			before := w.f.snapshot()
			for _, d := range denials(w, rt, req) {
				opts := []reqOption{contentType(ct)}
				if d.product != "" {
					opts = append(opts, product(d.product))
				}
				if d.auth != "" {
					opts = append(opts, header("Authorization", d.auth))
				}
				res := w.f.call(rt.method, req.path, d.token, req.body, opts...)
				require.Equal(t, d.want, res.status, "%s: %s", d.name, res)
				wantCode := map[int]string{401: "unauthenticated", 403: "forbidden", 404: "not_found"}[d.want]
				require.Equal(t, wantCode, string(res.errorOf(t).Code), d.name)
			}
			require.Equal(t, before, w.f.snapshot(), "a refused request changed stored state")

			// The control: the right principal gets through with the same
			// request, so the refusals above were about who asked.
			res := w.f.call(rt.method, req.path, req.token(w), req.body, contentType(ct), product("p1"))
			require.Equal(t, req.want, res.status, "allowed request: %s", res)
		})
	}
}

// TestJobScopeWithoutHeader: with no x-product-id, a job is found across
// products and the caller's scope checked against the job's product.
func TestJobScopeWithoutHeader(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	f.ok(200, nil, "GET", "/api/fleet/jobs/"+w.held, p1Token, nil)
	f.ok(200, nil, "GET", "/api/fleet/jobs/"+w.held, multiToken, nil)
	require.Equal(t, 403, f.call("GET", "/api/fleet/jobs/"+w.held, elsewhereToken, nil).status)
	// A token of exactly one product looks only there.
	require.Equal(t, 404, f.call("GET", "/api/fleet/jobs/"+w.held, otherToken, nil).status)
	// A header naming the wrong product of the caller's own scope does not
	// find the job.
	require.Equal(t, 404, f.call("GET", "/api/fleet/jobs/"+w.held, multiToken, nil, product("other")).status)
	require.Equal(t, 404, f.call("GET", "/api/fleet/jobs/jnope", rootToken, nil).status)
	// The body's productId must agree with the header.
	res := f.call("POST", "/api/fleet/fail", w.f1, map[string]any{"jobId": w.held, "leaseEpoch": w.heldEpoch,
		"reason": "x", "retryable": true, "productId": "other"}, product("p1"))
	require.Equal(t, 400, res.status)
	require.Equal(t, "productId", res.errorOf(t).Field)
	res = f.call("POST", "/api/fleet/fail", w.f1, map[string]any{"jobId": w.held, "leaseEpoch": w.heldEpoch,
		"reason": "x", "retryable": true, "productId": "other"})
	require.Equal(t, 403, res.status)
}

func ifElse[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}
