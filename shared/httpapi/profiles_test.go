package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestProfileRoutes: PUT makes versions, GET reads the latest or one
// version, a job naming the persona carries the version it was submitted
// with, and an unknown persona is 400 naming persona.
func TestProfileRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	md := contentType("text/markdown")

	var v1, v2, got fleet.Profile
	res := f.ok(http.StatusCreated, &v1, "PUT", "/api/fleet/profiles/backend", rootToken,
		"---\ncapabilities: [gpu:a100]\nbudget: {wall: 1h}\n---\nVersion one.\n", md, product("p1"))
	require.Equal(t, int64(1), v1.Version)
	require.Equal(t, "/api/fleet/profiles/backend?version=1", res.header.Get("Location"))
	require.Equal(t, []string{"gpu:a100"}, v1.Capabilities)

	var j fleet.Job
	f.ok(http.StatusCreated, &j, "POST", "/api/fleet/jobs", rootToken, manifest("r1", "persona: backend"), md, product("p1"))
	require.Equal(t, &fleet.JobProfile{Name: "backend", Version: 1, Capabilities: []string{"gpu:a100"}, Body: "Version one.\n"}, j.Profile)
	require.Equal(t, []string{"os:linux", "engine:claude", "gpu:a100"}, j.Capabilities)

	f.ok(http.StatusCreated, &v2, "PUT", "/api/fleet/profiles/backend", rootToken, map[string]any{"profile": "---\n---\nVersion two.\n"}, product("p1"))
	require.Equal(t, int64(2), v2.Version)
	f.ok(http.StatusOK, &got, "GET", "/api/fleet/profiles/backend", rootToken, nil, product("p1"))
	require.Equal(t, "Version two.\n", got.Body)
	f.ok(http.StatusOK, &got, "GET", "/api/fleet/profiles/backend?version=1", rootToken, nil, product("p1"))
	require.Equal(t, "Version one.\n", got.Body)
	var list api.List[map[string]any]
	f.ok(http.StatusOK, &list, "GET", "/api/fleet/profiles/backend/versions", rootToken, nil, product("p1"))
	require.Len(t, list.Items, 2)
	f.ok(http.StatusOK, &list, "GET", "/api/fleet/profiles", rootToken, nil, product("p1"))
	require.Len(t, list.Items, 1)
	require.NotContains(t, list.Items[0], "body", "lists leave the instructions out")

	var again fleet.Job
	f.ok(http.StatusOK, &again, "GET", "/api/fleet/jobs/"+j.ID, rootToken, nil, product("p1"))
	require.Equal(t, j.Profile, again.Profile, "the job keeps the version it was submitted with")

	for _, tt := range []struct {
		name, method, path, body, field string
		status                          int
	}{
		{"unknown persona", "POST", "/api/fleet/jobs", manifest("r1", "persona: frontend"), "persona", 400},
		{"body too large", "PUT", "/api/fleet/profiles/big", "---\n---\n" + strings.Repeat("x", fleet.MaxProfileBodyBytes+1), "body", 400},
		{"bad capability", "PUT", "/api/fleet/profiles/bad", "---\ncapabilities: [gpu]\n---\nb\n", "capabilities[0]", 400},
		{"bad name", "PUT", "/api/fleet/profiles/a:b", "---\n---\nb\n", "name", 400},
		{"empty body", "PUT", "/api/fleet/profiles/e", "", "profile", 400},
		{"unknown version", "GET", "/api/fleet/profiles/backend?version=9", "", "", 404},
		{"bad version", "GET", "/api/fleet/profiles/backend?version=0", "", "version", 400},
		{"unknown profile", "GET", "/api/fleet/profiles/nobody", "", "", 404},
		{"no product", "GET", "/api/fleet/profiles", "", "x-product-id", 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot()
			opts := []reqOption{md}
			if tt.name != "no product" {
				opts = append(opts, product("p1"))
			}
			var body any
			if tt.method != "GET" {
				body = tt.body
			}
			res := f.call(tt.method, tt.path, rootToken, body, opts...)
			require.Equal(t, tt.status, res.status, "%s", res)
			require.Equal(t, tt.field, res.errorOf(t).Field)
			require.Equal(t, before, f.snapshot())
		})
	}
}
