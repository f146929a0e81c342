package api_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/functions/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/httpapi"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// operatorToken is the bearer token the testdata envelopes carry.
const operatorToken = "fop_envelope-test-operator-token-0123456789abcdef"

// envelope reads an invocation sample from functions/testdata.
func envelope(t *testing.T, name string) *funchost.Invocation {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	require.NoError(t, err)
	var inv funchost.Invocation
	require.NoError(t, json.Unmarshal(b, &inv), name)
	return &inv
}

// withoutHeader returns a copy of inv whose request lacks the header.
func withoutHeader(t *testing.T, inv *funchost.Invocation, name string) *funchost.Invocation {
	t.Helper()
	var hr funchost.HTTPRequest
	require.NoError(t, json.Unmarshal(inv.Data[api.RequestBinding], &hr))
	delete(hr.Headers, name)
	raw, err := json.Marshal(hr)
	require.NoError(t, err)
	return &funchost.Invocation{Data: map[string]json.RawMessage{api.RequestBinding: raw}, Metadata: inv.Metadata}
}

// get builds the host's envelope for a bodiless GET.
func get(t *testing.T, path string) *funchost.Invocation {
	t.Helper()
	raw, err := json.Marshal(funchost.HTTPRequest{
		URL: "https://fleet-func.azurewebsites.net" + path, Method: "GET",
		Headers: map[string][]string{"Authorization": {"Bearer " + operatorToken}, "X-Product-Id": {"p1"}},
	})
	require.NoError(t, err)
	return &funchost.Invocation{Data: map[string]json.RawMessage{api.RequestBinding: raw}}
}

// newFunc serves the real API, over a coordinator on a fresh SQLite store
// that knows operatorToken, as the api function.
func newFunc(t *testing.T) (*coord.Coordinator, funchost.Func) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	c, err := coord.New(coord.Config{}, coord.Deps{Store: st, Clock: clock.System{}})
	require.NoError(t, err)
	return c, api.Func(httpapi.New(c, httpapi.Config{OperatorTokens: []httpapi.OperatorToken{{Name: "ops", Token: operatorToken}}}))
}

// invoke runs inv through f and returns the answer it put in
// Outputs.res; an API error is an HTTP answer, not a failed invocation.
func invoke(ctx context.Context, t *testing.T, f funchost.Func, inv *funchost.Invocation) funchost.HTTPResponse {
	t.Helper()
	res, err := f(ctx, inv)
	require.NoError(t, err, "an API error is an HTTP answer, not a failed invocation")
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var out struct {
		Outputs map[string]funchost.HTTPResponse
	}
	require.NoError(t, json.Unmarshal(b, &out))
	resp, ok := out.Outputs[api.ResponseBinding]
	require.True(t, ok, "no Outputs.%s in %s", api.ResponseBinding, b)
	return resp
}

// TestFuncEnvelopeMode drives the real API through the envelope form a host
// without request forwarding uses: the request comes from Data.req, the
// answer must land in Outputs.res with status, headers and body.
func TestFuncEnvelopeMode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, f := newFunc(t)

	var jobID string
	steps := []struct {
		name   string
		inv    func() *funchost.Invocation
		status string
		check  func(t *testing.T, res funchost.HTTPResponse)
	}{
		{name: "healthz", inv: func() *funchost.Invocation { return envelope(t, "api_healthz.json") }, status: "200",
			check: func(t *testing.T, res funchost.HTTPResponse) {
				require.JSONEq(t, `{"status":"ok"}`, res.Body)
			}},
		{name: "PUT product with a JSON body", inv: func() *funchost.Invocation { return envelope(t, "api_put_product.json") }, status: "200",
			check: func(t *testing.T, res funchost.HTTPResponse) {
				var p fleet.Product
				require.NoError(t, json.Unmarshal([]byte(res.Body), &p))
				require.Equal(t, "p1", p.ID)
				require.Equal(t, []string{"notes", "api"}, p.Repos)
			}},
		{name: "POST job with a JSON body", inv: func() *funchost.Invocation { return envelope(t, "api_submit_job.json") }, status: "201",
			check: func(t *testing.T, res funchost.HTTPResponse) {
				var j fleet.Job
				require.NoError(t, json.Unmarshal([]byte(res.Body), &j))
				require.Equal(t, fleet.StageQueued, j.Stage)
				require.Equal(t, "Envelope job", j.Title)
				require.Equal(t, "/api/fleet/jobs/"+j.ID, res.Headers["Location"])
				jobID = j.ID
			}},
		{name: "the job reached the store", inv: func() *funchost.Invocation { return get(t, "/api/fleet/jobs/"+jobID) }, status: "200",
			check: func(t *testing.T, res funchost.HTTPResponse) {
				stored, err := c.GetJob(ctx, "p1", jobID)
				require.NoError(t, err)
				require.Equal(t, "notes", stored.Repo)
				require.Contains(t, res.Body, `"id":"`+jobID+`"`)
			}},
		{name: "binary body reaches the API", inv: func() *funchost.Invocation { return envelope(t, "api_submit_binary.json") }, status: "400",
			check: func(t *testing.T, res funchost.HTTPResponse) {
				// The API saw the decoded octet-stream and refused its type,
				// naming the header; nothing was written.
				require.Contains(t, res.Body, `"field":"Content-Type"`)
				require.Contains(t, res.Body, "application/octet-stream")
				jobs, _, err := c.ListJobs(ctx, "p1", "", 10, "")
				require.NoError(t, err)
				require.Len(t, jobs, 1)
			}},
		{name: "no token", inv: func() *funchost.Invocation {
			return withoutHeader(t, envelope(t, "api_put_product.json"), "Authorization")
		},
			status: "401", check: func(t *testing.T, res funchost.HTTPResponse) {
				require.Contains(t, res.Body, `"code":"unauthenticated"`)
			}},
		{name: "unknown route", inv: func() *funchost.Invocation { return get(t, "/api/fleet/nothing-here") }, status: "404"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			resp := invoke(ctx, t, f, st.inv())
			require.Equal(t, st.status, resp.StatusCode, resp.Body)
			require.True(t, strings.HasPrefix(resp.Headers["Content-Type"], "application/json"), "Content-Type %q", resp.Headers["Content-Type"])
			if st.check != nil {
				st.check(t, resp)
			}
		})
	}
}

func TestFuncWithoutRequest(t *testing.T) {
	t.Parallel()
	f := api.Func(httpapi.New(nil, httpapi.Config{}))
	_, err := f(t.Context(), &funchost.Invocation{Data: map[string]json.RawMessage{"request": json.RawMessage(`{}`)}})
	require.ErrorIs(t, err, funchost.ErrBadPayload)
}
