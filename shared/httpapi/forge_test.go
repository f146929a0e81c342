package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/forge/github"
)

// TestGitHubWebhookRoute: the route admits a delivery by its signature
// alone: a forged, unsigned or re-signed-with-another-secret delivery is
// 401 and changes nothing; an event the fleet does not act on is 204; a
// signed body that is not the event's payload is 400; one larger than
// GitHub sends is 413; a valid delivery about a repository no product maps
// is answered 200 "ignored"; without a secret configured the route is 503.
func TestGitHubWebhookRoute(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	secret := []byte(testWebhookSecret)
	review := `{"action":"submitted","review":{"state":"approved","commit_id":"abc","user":{"login":"octocat"}},` +
		`"pull_request":{"number":1,"head":{"ref":"aq/job/j1","sha":"abc"}},"repository":{"name":"x","owner":{"login":"nobody"}}}`
	deliver := func(event, body, sig string) result {
		opts := []reqOption{header(github.HeaderEvent, event), header(github.HeaderDelivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958")}
		if sig != "" {
			opts = append(opts, header(github.HeaderSignature, sig))
		}
		return f.call("POST", "/api/fleet/forge/github", "", body, opts...)
	}
	before := f.snapshot()
	for name, res := range map[string]result{
		"unsigned":       deliver("pull_request_review", review, ""),
		"another secret": deliver("pull_request_review", review, github.Sign([]byte("guess"), []byte(review))),
		"a changed body": deliver("pull_request_review", review+" ", github.Sign(secret, []byte(review))),
	} {
		require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res)
		require.Equal(t, "unauthenticated", string(res.errorOf(t).Code), name)
	}
	require.Equal(t, before, f.snapshot(), "a refused delivery changed nothing")

	ping := `{"zen":"Design for failure.","hook_id":1}`
	res := deliver("ping", ping, github.Sign(secret, []byte(ping)))
	require.Equal(t, http.StatusNoContent, res.status, "%s", res)

	res = deliver("pull_request_review", `{"action":"submitted"}`, github.Sign(secret, []byte(`{"action":"submitted"}`)))
	require.Equal(t, http.StatusBadRequest, res.status, "%s", res)
	require.Equal(t, "body", res.errorOf(t).Field)

	res = deliver("pull_request_review", review, github.Sign(secret, []byte(review)))
	require.Equal(t, http.StatusOK, res.status, "%s", res)
	require.Contains(t, string(res.body), `"outcome":"ignored"`)
	require.Contains(t, string(res.body), "no product's forge maps nobody/x")

	big := strings.Repeat(" ", github.MaxPayload+1)
	res = deliver("pull_request_review", big, github.Sign(secret, []byte(big)))
	require.Equal(t, http.StatusRequestEntityTooLarge, res.status)

	bare := newFixture(t, func(c *Config) { c.GitHubWebhookSecret = nil })
	res = bare.call("POST", "/api/fleet/forge/github", "", review, header(github.HeaderEvent, "pull_request_review"),
		header(github.HeaderSignature, github.Sign(secret, []byte(review))))
	require.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res)
	require.Contains(t, string(res.body), "FLEET_GITHUB_WEBHOOK_SECRET_FILE")

	// The document lists each status above: a public route inherits none.
	op := servedOpenAPI(t)["paths"].(map[string]any)["/fleet/forge/github"].(map[string]any)["post"].(map[string]any)
	for _, st := range []string{"200", "204", "400", "401", "413", "429", "503"} {
		require.Contains(t, op["responses"], st)
	}
}

// TestGitHubWebhookBodyBudget: the route reads a delivery before it can
// verify it, so the bytes it holds at once are bounded: while one delivery
// being read holds the budget, another is 429 with Retry-After before it is
// read, whether its length is declared or it comes in chunks; once the
// first is answered, the next delivery goes through.
func TestGitHubWebhookBodyBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var h http.Handler
	ping := `{"zen":"Design for failure.","hook_id":1}`
	deliver := func(body io.Reader, length int64) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/api/fleet/forge/github", body)
		r.ContentLength = length
		r.Header.Set(github.HeaderEvent, "ping")
		r.Header.Set(github.HeaderSignature, github.Sign([]byte(testWebhookSecret), []byte(ping)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for name, tc := range map[string]struct {
		budget int64
		length int64 // of the held delivery; -1 unknown
		held   int   // bytes of it sent before the second delivery
	}{
		"declared length": {budget: 8 << 10, length: 8<<10 - 20, held: 10},
		// Counted as its buffer grows: its first block, 4 KiB, leaves
		// less than the second delivery in this budget.
		"in chunks": {budget: 4<<10 + 20, length: -1, held: 1},
	} {
		t.Run(name, func(t *testing.T) {
			h = New(f.coord, Config{GitHubWebhookSecret: []byte(testWebhookSecret), WebhookBytesInFlight: tc.budget})
			pr, pw := io.Pipe()
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- deliver(pr, tc.length) }()
			// A pipe's write returns once the handler has read it: the
			// budget is taken by then.
			wrote := make(chan error, 1)
			go func() { _, err := pw.Write(make([]byte, tc.held)); wrote <- err }()
			select {
			case err := <-wrote:
				require.NoError(t, err)
			case w := <-done:
				t.Fatalf("answered before reading the body: %d %s", w.Code, w.Body)
			}

			w := deliver(strings.NewReader(ping), int64(len(ping)))
			require.Equal(t, http.StatusTooManyRequests, w.Code, "%s", w.Body)
			require.Equal(t, "1", w.Header().Get("Retry-After"))
			require.Contains(t, w.Body.String(), "throttled")

			require.NoError(t, pw.CloseWithError(io.ErrUnexpectedEOF))
			first := <-done
			require.Equal(t, http.StatusBadRequest, first.Code, "the held delivery ended early: %s", first.Body)

			w = deliver(strings.NewReader(ping), int64(len(ping)))
			require.Equal(t, http.StatusNoContent, w.Code, "the budget was given back: %s", w.Body)
			w = deliver(strings.NewReader(ping), -1)
			require.Equal(t, http.StatusNoContent, w.Code, "in chunks: %s", w.Body)
		})
	}

	// A delivery that cannot be signed is refused before its body is read.
	h = New(f.coord, Config{GitHubWebhookSecret: []byte(testWebhookSecret)})
	for _, sig := range []string{"", "sha256=", "sha256=zz", "sha1=" + strings.Repeat("0", 40), "sha256=" + strings.Repeat("0", 63)} {
		r := httptest.NewRequest("POST", "/api/fleet/forge/github", unread{t})
		r.ContentLength = 25 << 20
		r.Header.Set(github.HeaderEvent, "ping")
		r.Header.Set(github.HeaderSignature, sig)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, http.StatusUnauthorized, w.Code, "%q: %s", sig, w.Body)
		require.Contains(t, w.Body.String(), "64 hex digits")
	}
}

// unread is a body that fails the test when it is read.
type unread struct{ t *testing.T }

func (u unread) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, io.EOF
}
