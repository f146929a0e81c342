package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
)

// bodyRoutes are the routes whose handler reads a request body, in the
// routes table's order (the fuzz input picks one by index). Token rotation
// and revocation take no body and would lock the world's factory out.
func bodyRoutes() []string {
	var keys []string
	for _, rt := range routes {
		if rt.method == http.MethodGet || rt.method == http.MethodDelete || strings.Contains(rt.pattern, "/token/") {
			continue
		}
		keys = append(keys, rt.method+" "+rt.pattern)
	}
	return keys
}

// fuzzContentTypes are the Content-Type headers a fuzz input picks from.
var fuzzContentTypes = []string{"application/json", "text/markdown", "", "application/merge-patch+json", "text/plain"}

// FuzzRequestBodies sends any body to every route that reads one, as the
// principal the route admits, against a world with a held job, a queued one,
// factories, products and a profile: the answer is never a 5xx and never a
// panic, and a request the API refuses (4xx) leaves every container as it
// was. The world is built once per fuzzing process and accepted requests
// change it, so a crasher is reported with the input that found it and
// re-run from a fresh world by `go test -run`.
func FuzzRequestBodies(f *testing.F) {
	w := newAuthzWorld(f)
	keys := bodyRoutes()
	valid := authzRequests(w)
	for i, key := range keys {
		req, ok := valid[key]
		require.True(f, ok, "authzRequests has no request for %s", key)
		body, ct := seedBody(f, req)
		f.Add(uint8(i), uint8(slices.Index(fuzzContentTypes, ct)), body)
		for _, bad := range []string{``, `{}`, `[]`, `null`, `{"leaseEpoch": -1}`, `{"leaseEpoch": 1e99}`, `{"a":1,"a":2}`,
			`{"stage": "shipped", "leaseEpoch": 1}`, "{\"reason\": \"\xff\"}", `{"children": [{"manifest": 1}]}`, "---\n---\n"} {
			f.Add(uint8(i), uint8(0), []byte(bad))
		}
	}
	f.Fuzz(func(t *testing.T, route, ctIndex uint8, body []byte) {
		key := keys[int(route)%len(keys)]
		req := valid[key]
		method, _, _ := strings.Cut(key, " ")
		ct := fuzzContentTypes[int(ctIndex)%len(fuzzContentTypes)]
		before := snapshotStore(t, w.f.store)
		status, answer := send(t, w.f.url, method, req.path, req.token(w), ct, body)
		require.Less(t, status, 500, "%s %s with %q (%s): %d %s", method, req.path, body, ct, status, answer)
		if status >= 400 {
			var e api.ErrorBody
			require.NoError(t, json.Unmarshal(answer, &e), "%d without an error body: %s", status, answer)
			require.NotEmpty(t, e.Error.Code, "%s", answer)
			require.Equal(t, before, snapshotStore(t, w.f.store), "%s %s refused with %d but changed the store: %s", method, req.path, status, answer)
		}
	})
}

// seedBody is a valid request's body as bytes and its content type.
func seedBody(tb testing.TB, req authzRequest) ([]byte, string) {
	ct := req.contentType
	switch b := req.body.(type) {
	case nil:
		return nil, ct
	case string:
		return []byte(b), ct
	default:
		enc, err := json.Marshal(b)
		require.NoError(tb, err)
		if ct == "" {
			ct = "application/json"
		}
		return enc, ct
	}
}

// send makes one request and returns its status and body.
func send(t *testing.T, base, method, path, token, contentType string, body []byte) (int, []byte) {
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// FuzzResumeIDs resumes every event route (the job and product streams by
// Last-Event-ID, their long-poll forms by ?after=) from any id: a stream
// either opens (200) or is refused with a 400 naming where the id came
// from; never a 5xx or a panic.
func FuzzResumeIDs(f *testing.F) {
	w := newAuthzWorld(f)
	held := "/api/fleet/jobs/" + w.held
	pos := send0(f, w.f.url+"/api/fleet/events", rootToken)
	for _, id := range []string{"0", "1", "-1", "99999999999999999999", "p1.", "p1.e30", "p1.eyJlIjoiIiwiZiI6IiJ9", pos, pos + "x", "\x00", " 1"} {
		for r := range 4 {
			f.Add(uint8(r), id)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, id string) {
		var path, field string
		switch route % 4 {
		case 0:
			path, field = held+"/events/stream", headerLastEventID
		case 1:
			path, field = "/api/fleet/events/stream", headerLastEventID
		case 2:
			path, field = held+"/events?after="+url.QueryEscape(id), "after"
		case 3:
			path, field = "/api/fleet/events?after="+url.QueryEscape(id), "after"
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.f.url+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+rootToken)
		req.Header.Set("X-Product-Id", "p1")
		if field == headerLastEventID {
			req.Header.Set(headerLastEventID, id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// net/http refuses to send a header value it cannot encode:
			// such an id never reaches a server.
			require.ErrorContains(t, err, "invalid header field value")
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return // a stream opened (or a page answered); cancel ends it
		}
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %q: %s", path, id, body)
		var e api.ErrorBody
		require.NoError(t, json.Unmarshal(body, &e), "%s", body)
		if id != "" && strings.TrimSpace(id) == id {
			require.Equal(t, field, e.Error.Field, "%s", body)
		}
	})
}

// send0 GETs a JSON answer and returns its position field.
func send0(tb testing.TB, u, token string) string {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(tb, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Product-Id", "p1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(tb, err)
	defer resp.Body.Close()
	var page struct {
		Position string `json:"position"`
	}
	require.NoError(tb, json.NewDecoder(resp.Body).Decode(&page))
	require.NotEmpty(tb, page.Position)
	return page.Position
}
