package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestIngestRoute: both body shapes make the item's job (201, Location);
// the item again is the same job (200, unchanged); a higher revision
// before start updates it; one after start is 409 naming revision.
func TestIngestRoute(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	tok := f.enroll("f1", []string{"p1"}, "r1")
	p1 := product("p1")
	const path = "/api/fleet/tracker/ingest"

	var j fleet.Job
	res := f.ok(http.StatusCreated, &j, "POST", path, rootToken, map[string]any{
		"source": "jira", "itemId": "PROJ-1", "revision": 1, "manifest": manifest("r1")}, p1)
	require.Equal(t, "/api/fleet/jobs/"+j.ID, res.header.Get("Location"))
	require.Equal(t, "created", res.header.Get(ingestOutcomeHeader))
	require.Equal(t, &fleet.TrackerRef{Source: "jira", ItemID: "PROJ-1", Revision: 1}, j.Tracker)

	var same fleet.Job
	res = f.ok(http.StatusOK, &same, "POST", path, rootToken, map[string]any{
		"source": "jira", "itemId": "PROJ-1", "revision": 1, "manifest": manifest("r1")}, p1)
	require.Equal(t, j.ID, same.ID)
	require.Equal(t, "unchanged", res.header.Get(ingestOutcomeHeader))

	// The manifest's fields as JSON, body as the task.
	var up fleet.Job
	res = f.ok(http.StatusOK, &up, "POST", path, rootToken, map[string]any{
		"source": "jira", "itemId": "PROJ-1", "revision": 2, "title": "Second take", "repo": "r1",
		"capabilities": []string{"os:linux", "engine:claude"}, "priority": "high", "budget": map[string]any{"usd": 3},
		"body": "Now with more detail.\n"}, p1)
	require.Equal(t, "updated", res.header.Get(ingestOutcomeHeader))
	require.Equal(t, j.ID, up.ID)
	require.Equal(t, "Second take", up.Title)
	require.Equal(t, fleet.PriorityHigh, up.Priority)
	require.Equal(t, 3.0, up.Budget.USD)
	require.Equal(t, "Now with more detail.\n", up.Body)
	require.Equal(t, int64(2), up.Tracker.Revision)

	f.claim(tok)
	res = f.call("POST", path, rootToken, map[string]any{
		"source": "jira", "itemId": "PROJ-1", "revision": 3, "manifest": manifest("r1")}, p1)
	require.Equal(t, http.StatusConflict, res.status, res)
	require.Equal(t, "revision", res.errorOf(t).Field)
	require.Contains(t, res.errorOf(t).Message, "has started")
}

// TestProductTrackerSecretNeverReturned: PUT sets the target, GET and PUT
// answer secretSet, never the secret; a PUT without tracker keeps it, one
// without secret keeps the secret, null removes it. The logs never hold it.
func TestProductTrackerSecretNeverReturned(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const secret = "s3cr3t-never-shown-0123456789"
	path := "/api/fleet/products/p1"
	var bodies []string
	put := func(body map[string]any) map[string]any {
		t.Helper()
		var v map[string]any
		res := f.ok(http.StatusOK, &v, "PUT", path, rootToken, body)
		bodies = append(bodies, string(res.body))
		return v
	}
	get := func() map[string]any {
		t.Helper()
		var v map[string]any
		res := f.ok(http.StatusOK, &v, "GET", path, rootToken, nil)
		bodies = append(bodies, string(res.body))
		return v
	}
	want := map[string]any{"webhookUrl": "https://hooks.example/fleet", "secretSet": true}
	v := put(map[string]any{"repos": []string{"r1"}, "tracker": map[string]any{"webhookUrl": "https://hooks.example/fleet", "secret": secret}})
	require.Equal(t, want, v["tracker"])
	require.Equal(t, want, get()["tracker"])
	require.Equal(t, want, put(map[string]any{"repos": []string{"r1"}})["tracker"], "absent keeps it")
	want["webhookUrl"] = "http://127.0.0.1:9/other"
	require.Equal(t, want, put(map[string]any{"repos": []string{"r1"}, "tracker": map[string]any{"webhookUrl": "http://127.0.0.1:9/other"}})["tracker"],
		"a new URL keeps the secret")
	p, err := f.coord.GetProduct(t.Context(), "p1")
	require.NoError(t, err)
	require.Equal(t, fleet.Secret(secret), p.Tracker.Secret, "stored")
	require.NotContains(t, get(), "secret")
	require.NotContains(t, put(map[string]any{"repos": []string{"r1"}, "tracker": nil}), "tracker", "null removes it")

	for _, b := range bodies {
		require.NotContains(t, b, secret)
	}
	require.NotContains(t, f.logs.String(), secret)
	require.False(t, strings.Contains(f.logs.String(), "s3cr3t"))
}
