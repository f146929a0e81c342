package app

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
)

// testOperatorToken is the operator token of testLookup's configuration.
const testOperatorToken = "op_0123456789abcdef"

// testLookup is a start-up configuration on a fresh data dir, without a
// bus, accepting testOperatorToken, with extra on top.
func testLookup(t *testing.T, extra map[string]string) config.Lookup {
	t.Helper()
	v := map[string]string{config.DataDir: t.TempDir(), config.Bus: "none", config.OperatorToken: testOperatorToken}
	maps.Copy(v, extra)
	return config.Lookup{Values: v}
}

func streamsCall(t *testing.T, ctx context.Context, method, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testOperatorToken)
	req.Header.Set("X-Product-Id", "p1")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestStreamCapSettings: FLEET_MAX_STREAMS_PER_PRINCIPAL and
// FLEET_MAX_STREAMS are validated at start (named in the error) and reach
// the API.
func TestStreamCapSettings(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		bad   map[string]string
		names string
	}{
		{map[string]string{config.MaxStreamsPerPrincipal: "0"}, config.MaxStreamsPerPrincipal},
		{map[string]string{config.MaxStreamsPerPrincipal: "many"}, config.MaxStreamsPerPrincipal},
		{map[string]string{config.MaxStreams: "-1"}, config.MaxStreams + "="},
		{map[string]string{config.MaxStreamsPerPrincipal: "64", config.MaxStreams: "16"}, config.MaxStreams + "=16"},
	} {
		_, err := Open(t.Context(), testLookup(t, tc.bad), log)
		require.Error(t, err, "%v", tc.bad)
		require.ErrorContains(t, err, tc.names, "%v", tc.bad)
	}

	a, err := Open(t.Context(), testLookup(t, map[string]string{config.MaxStreamsPerPrincipal: "1"}), log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	srv := httptest.NewServer(a.API)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	require.Equal(t, http.StatusOK, streamsCall(t, ctx, "GET", srv.URL+"/api/fleet/events/stream", "").StatusCode)
	second := streamsCall(t, t.Context(), "GET", srv.URL+"/api/fleet/events/stream", "")
	require.Equal(t, http.StatusTooManyRequests, second.StatusCode)
	require.NotEmpty(t, second.Header.Get("Retry-After"))
}

// TestBufferedResponsesOption: WithBufferedResponses (the Lambda front
// door) reaches the API: a job stream ends once it has replayed the job's
// events instead of staying open.
func TestBufferedResponsesOption(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := Open(t.Context(), testLookup(t, nil), log, WithBufferedResponses())
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	srv := httptest.NewServer(a.API)
	t.Cleanup(srv.Close)
	require.Equal(t, http.StatusOK, streamsCall(t, t.Context(), "PUT", srv.URL+"/api/fleet/products/p1", `{"repos":["r1"]}`).StatusCode)
	sub := streamsCall(t, t.Context(), "POST", srv.URL+"/api/fleet/jobs",
		`{"manifest":"---\ntitle: t\nrepo: r1\n---\nDo it.\n"}`)
	require.Equal(t, http.StatusCreated, sub.StatusCode)
	loc := sub.Header.Get("Location")
	require.NotEmpty(t, loc)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp := streamsCall(t, ctx, "GET", srv.URL+loc+"/events/stream", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the buffered stream ended by itself (got %q)", body)
	require.Contains(t, string(body), "event: submitted")
}
