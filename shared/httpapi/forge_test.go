package httpapi

import (
	"net/http"
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
	for _, st := range []string{"200", "204", "400", "401", "413", "503"} {
		require.Contains(t, op["responses"], st)
	}
}
