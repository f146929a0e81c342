package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge/github"
)

// TestHugeDollarFiguresAreRefused: budgets add and compare dollars as int64
// millionths, so a figure past that range turned negative there. A holder
// reporting usd 1e13 made its product's reservation, then its spend,
// negative, and the ceiling admitted every job after it. Every dollar
// figure the API takes is bounded by fleet.MaxUSD: past it, 400 naming
// the field, and nothing stored.
func TestHugeDollarFiguresAreRefused(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	held := "/api/fleet/jobs/" + w.held
	huge := fmt.Sprintf("%g", 10*fleet.MaxUSD)
	cases := []struct {
		name, method, path, token, body, field string
		opts                                   []reqOption
	}{
		{"usage", "POST", held + "/usage", w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usd": 1e13}`, w.heldEpoch), "usd", nil},
		{"usage just past the bound", "POST", held + "/usage", w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usd": %s}`, w.heldEpoch, huge), "usd", nil},
		{"PATCH usage", "PATCH", held, w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usage": {"usd": 1e13, "inputTokens": 0, "outputTokens": 0}}`, w.heldEpoch), "usage.usd", nil},
		{"fail usage", "POST", "/api/fleet/fail", w.f1, fmt.Sprintf(`{"jobId": %q, "leaseEpoch": %d, "reason": "x", "retryable": true, "usage": {"usd": 1e13, "inputTokens": 0, "outputTokens": 0}}`, w.held, w.heldEpoch), "usage.usd", nil},
		{"budget ceiling", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 1e300}`, "ceilingUsd", nil},
		{"budget default estimate", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 5, "defaultJobUsd": 1e13}`, "defaultJobUsd", nil},
		// Product other has no budget, so only the manifest's own check stands.
		{"manifest budget", "POST", "/api/fleet/jobs", rootToken, manifest("r2", "budget: {usd: 1e13}"), "budget.usd",
			[]reqOption{product("other"), contentType("text/markdown")}},
	}
	before := f.snapshot()
	for _, c := range cases {
		res := f.call(c.method, c.path, c.token, c.body, c.opts...)
		require.Equal(t, 400, res.status, "%s: %s", c.name, res)
		require.Equal(t, c.field, res.errorOf(t).Field, "%s: %s", c.name, res)
	}
	require.Equal(t, before, f.snapshot(), "refused dollar figures changed stored state")
	// The bound itself is a figure like any other.
	f.ok(200, nil, "POST", held+"/usage", w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usd": %g}`, w.heldEpoch, fleet.MaxUSD))
}

// TestTruncatedWebhookBodyIs400: a delivery whose body ends before its
// Content-Length is the sender's fault, as on every other route that reads
// a body (400), not an internal error: the webhook read its body itself
// and returned the read error as is, a 500 logged as a server fault.
func TestTruncatedWebhookBodyIs400(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	operatorJSON := map[string]string{"Authorization": "Bearer " + rootToken, "Content-Type": "application/json"}
	cases := []struct {
		method, path string
		headers      map[string]string
		body         string
	}{
		{"POST", "/api/fleet/forge/github", map[string]string{github.HeaderEvent: "ping",
			github.HeaderSignature: github.Sign([]byte(testWebhookSecret), []byte(`{"zen":"x"}`))}, `{"zen":`},
		// The rule every other body follows, for comparison.
		{"PUT", "/api/fleet/products/p1", operatorJSON, `{"repos":`},
	}
	before := f.snapshot()
	for _, c := range cases {
		status, body := truncatedRequest(t, f.url, c.method, c.path, c.headers, c.body, 100)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", c.path, body)
		require.Contains(t, string(body), `"code":"invalid_argument"`, "%s", c.path)
	}
	require.Equal(t, before, f.snapshot(), "a truncated body changed nothing")
}

// truncatedRequest sends method path with headers and a Content-Length of
// declared, then only body, and closes its side: the server reads a body
// that ends early. It returns the answer's status and body.
func truncatedRequest(t *testing.T, base, method, path string, headers map[string]string, body string, declared int) (int, []byte) {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n", method, path, u.Host, declared)
	for k, v := range headers {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n" + body)
	_, err = io.WriteString(conn, req.String())
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// TestRepeatedNestedFieldsAreRefused: a repeated field is refused (400
// naming it) at any depth, as at the top: encoding/json keeps the last of
// two, so a nested object saying two things about one field (a usage's
// usd, a forge's repo mapping, a heartbeat's cooldown) was read one way
// here and possibly another by a proxy or a log reader, and stored.
func TestRepeatedNestedFieldsAreRefused(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	held := "/api/fleet/jobs/" + w.held
	cases := []struct {
		name, method, path, token, body, field string
	}{
		{"PATCH usage", "PATCH", held, w.f1,
			fmt.Sprintf(`{"leaseEpoch": %d, "usage": {"usd": 1, "inputTokens": 0, "outputTokens": 0, "usd": 2}}`, w.heldEpoch), "usage.usd"},
		{"fail usage", "POST", "/api/fleet/fail", w.f1,
			fmt.Sprintf(`{"jobId": %q, "leaseEpoch": %d, "reason": "x", "retryable": true, "usage": {"usd": 1, "usd": 2, "inputTokens": 0, "outputTokens": 0}}`, w.held, w.heldEpoch), "usage.usd"},
		{"forge repo mapping", "PUT", "/api/fleet/products/p1", rootToken,
			`{"repos": ["r1"], "forge": {"kind": "github", "repos": {"r1": "acme/one", "r1": "evil/two"}}}`, "forge.repos.r1"},
		{"heartbeat cooldown", "POST", "/api/fleet/factories/heartbeat", w.f1,
			`{"capabilities": [], "repos": [], "cooldowns": {"engine:claude": "2026-03-04T06:00:00Z", "engine:claude": "2026-03-04T05:07:00Z"}}`, "cooldowns.engine:claude"},
		{"in a list", "POST", "/api/fleet/jobs/" + w.queued + "/children", rootToken,
			`{"children": [{"manifest": "a", "manifest": "b"}]}`, "children[0].manifest"},
	}
	before := f.snapshot()
	for _, c := range cases {
		res := f.call(c.method, c.path, c.token, c.body)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", c.name, res)
		require.Equal(t, c.field, res.errorOf(t).Field, "%s: %s", c.name, res)
	}
	require.Equal(t, before, f.snapshot(), "refused bodies changed stored state")
}
