package tests

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// operation is one route of the served OpenAPI document.
type operation struct {
	method, path, access string
}

// operations reads every operation the running binary documents.
func operations(t *testing.T, s *Stack) []operation {
	t.Helper()
	r := Call(t, http.MethodGet, s.URL+"/api/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	r.JSON(t, &doc)
	var ops []operation
	for path, methods := range doc.Paths {
		for method, raw := range methods {
			var op struct {
				Access string `json:"x-fleet-access"`
			}
			if json.Unmarshal(raw, &op) != nil || op.Access == "" {
				continue // path-level keys such as "parameters"
			}
			ops = append(ops, operation{strings.ToUpper(method), path, op.Access})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].path+ops[i].method < ops[j].path+ops[j].method })
	require.NotEmpty(t, ops)
	return ops
}

// snapshot is everything an operator can read; a rejected request must
// leave it as it was.
func snapshot(t *testing.T, s *Stack, admin string, jobID string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []struct{ path, product string }{
		{"/jobs", "demo"}, {"/jobs", "other"}, {"/jobs/" + jobID, "demo"}, {"/jobs/" + jobID + "/events", "demo"},
		{"/factories", ""}, {"/products/demo", ""}, {"/products/other", ""}, {"/queue-state", "demo"},
	} {
		r := Call(t, http.MethodGet, s.API+q.path, admin, nil, "x-product-id", q.product)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", q.path, r.Body)
		b.Write(r.Body)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestAuthzMatrix: every documented route × {no token, unknown token,
// revoked factory token, factory token on an operator route, a product the
// principal is not scoped to, a factory of the product reading what only
// the job's holder may} is refused with 401/403 by the real binary, and
// nothing stored changes.
func TestAuthzMatrix(t *testing.T) {
	t.Parallel()
	admin, scoped := randomToken("adm_"), randomToken("scp_")
	s := startStack(t, "FLEET_OPERATOR_TOKEN=admin:"+admin+",scoped:"+scoped+":other")
	s.Token = admin
	s.Product("demo", "r1")
	s.Product("other", "r2")
	ft := s.Factory("f1", "demo", 2, []string{"os:linux"}, []string{"r1"})
	revoked := s.Factory("f-revoked", "demo", 1, []string{"os:linux"}, []string{"r1"})
	// Serves demo but has only a repo no job names: it never holds one.
	idle := s.Factory("f-idle", "demo", 1, []string{"os:linux"}, []string{"r9"})
	rv := s.Op(http.MethodPost, "/factories/f-revoked/token/revoke", "", nil)
	require.Less(t, rv.Status, 300, "revoke: %s", rv.Body)
	job := s.Submit("demo", Manifest("Guarded", "r1", "os:linux"))
	claimed, epoch := s.Claim(ft)
	require.Equal(t, job, claimed)
	// An artifact of the held job, for the artifact routes' {id}.
	up := upload(t, s, ft, job, "name=out.log&kind=log&leaseEpoch="+strconv.FormatInt(epoch, 10), []byte("engine output\n"), "text/plain")
	require.Equal(t, http.StatusCreated, up.Status, "upload: %s", up.Body)
	artifact := up.Map(t)["id"].(string)

	before := snapshot(t, s, admin, job)
	concrete := strings.NewReplacer("{id}", job, "{action}", "ship", "{productId}", "demo", "{name}", "backend")
	checked := 0
	for _, op := range operations(t, s) {
		if op.access == "public" {
			continue
		}
		checked++
		url := s.URL + "/api" + concrete.Replace(op.path)
		if strings.HasPrefix(op.path, "/fleet/factories/{id}") {
			url = s.URL + "/api" + strings.Replace(op.path, "{id}", "f1", 1)
		}
		if strings.HasPrefix(op.path, "/fleet/artifacts/{id}") {
			url = s.URL + "/api" + strings.Replace(op.path, "{id}", artifact, 1)
		}
		name := op.method + " " + op.path
		type attempt struct {
			who     string
			token   string
			headers []string
			want    int
		}
		attempts := []attempt{
			{"no token", "", nil, http.StatusUnauthorized},
			{"unknown operator token", randomToken("nobody_"), nil, http.StatusUnauthorized},
			{"unknown factory token", "fft_" + randomToken(""), nil, http.StatusUnauthorized},
			{"revoked factory token", revoked, nil, http.StatusUnauthorized},
		}
		if !strings.Contains(op.access, "factory") {
			attempts = append(attempts, attempt{"factory token on an operator route", ft, []string{"x-product-id", "demo"}, http.StatusForbidden})
		}
		if strings.Contains(op.access, "operator") {
			attempts = append(attempts, attempt{"operator of another product", scoped, []string{"x-product-id", "demo"}, http.StatusForbidden})
		}
		if strings.Contains(op.access, "factory") {
			attempts = append(attempts, attempt{"factory outside its product", ft, []string{"x-product-id", "other"}, http.StatusForbidden})
		}
		if op.access == "operator,factory-holder" {
			attempts = append(attempts, attempt{"factory of the product not holding the job", idle, []string{"x-product-id", "demo"}, http.StatusForbidden})
		}
		for _, a := range attempts {
			r := Call(t, op.method, url, a.token, map[string]any{}, a.headers...)
			require.Equal(t, a.want, r.Status, "%s as %s: %s", name, a.who, r.Body)
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			r.JSON(t, &e)
			wantCode := map[int]string{http.StatusUnauthorized: "unauthenticated", http.StatusForbidden: "forbidden"}[a.want]
			require.Equal(t, wantCode, e.Error.Code, "%s as %s", name, a.who)
		}
	}
	require.GreaterOrEqual(t, checked, 24, "every guarded route of the API is documented and checked")
	require.Equal(t, before, snapshot(t, s, admin, job), "a refused request changed stored state")
}

// TestBadInputNeverServerError: malformed or oversized input gets a 4xx
// naming the field, from the real binary, and changes nothing.
func TestBadInputNeverServerError(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "r1")
	s.Product("other", "r2")
	ft := s.Factory("f1", "demo", 2, []string{"os:linux"}, []string{"r1"})
	job := s.Submit("demo", Manifest("Target", "r1", "os:linux"))
	r := s.As(ft, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	epoch := r.Map(t)["leaseEpoch"]

	manifest := func(front string) string { return "---\n" + front + "---\nDo it.\n" }
	tests := []struct {
		name, method, path string
		token              string
		body               any
		status             int
		code, field        string
	}{
		{"malformed JSON", http.MethodPut, "/products/demo", s.Token, []byte(`{"repos": [`), 400, "invalid_argument", ""},
		{"unknown field", http.MethodPut, "/products/demo", s.Token, []byte(`{"repos": [], "bogus": 1}`), 400, "invalid_argument", "bogus"},
		{"unknown stage", http.MethodPatch, "/jobs/" + job, ft, map[string]any{"stage": "flying", "leaseEpoch": epoch}, 400, "invalid_argument", "stage"},
		{"2 MiB body", http.MethodPost, "/jobs", s.Token, manifest("repo: r1\n") + strings.Repeat("x", 2<<20), 413, "too_large", ""},
		{"manifest without repo", http.MethodPost, "/jobs", s.Token, manifest("title: no repo\n"), 400, "invalid_argument", "repo"},
		{"repo ../x", http.MethodPost, "/jobs", s.Token, manifest("repo: ../x\n"), 400, "invalid_argument", "repo"},
		{"capability without a colon", http.MethodPost, "/jobs", s.Token, manifest("repo: r1\ncapabilities: [build]\n"), 400, "invalid_argument", "capabilities[0]"},
		{"wrong type", http.MethodPost, "/factories/heartbeat", ft, []byte(`{"capabilities": [], "repos": [], "load": "high", "health": "ok"}`), 400, "invalid_argument", "load"},
		{"negative usage", http.MethodPost, "/jobs/" + job + "/usage", ft, map[string]any{"leaseEpoch": epoch, "usd": -1}, 400, "invalid_argument", "usd"},
		{"budget without a ceiling", http.MethodPut, "/budgets/demo", s.Token, map[string]any{"period": "month"}, 400, "invalid_argument", "ceilingUsd"},
		{"budget with an unknown period", http.MethodPut, "/budgets/demo", s.Token, map[string]any{"ceilingUsd": 5, "period": "week"}, 400, "invalid_argument", "period"},
	}
	before := snapshot(t, s, s.Token, job)
	for _, tc := range tests {
		r := Call(t, tc.method, s.API+tc.path, tc.token, tc.body, "x-product-id", "demo")
		require.Less(t, r.Status, 500, "%s: %s", tc.name, r.Body)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Field   string `json:"field"`
			} `json:"error"`
		}
		r.JSON(t, &e)
		require.Equal(t, tc.code, e.Error.Code, tc.name)
		require.NotEmpty(t, e.Error.Message, tc.name)
		if tc.field != "" {
			require.Equal(t, tc.field, e.Error.Field, "%s: %s", tc.name, e.Error.Message)
		}
	}
	require.Equal(t, before, snapshot(t, s, s.Token, job), "a rejected request changed stored state")
}
