package fleetapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/stretchr/testify/require"
)

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                          string
		status                        int
		code                          string
		fenced, conflict, notFound, p bool
	}{
		{name: "fenced", status: 409, code: "fenced", fenced: true, p: true},
		{name: "conflict", status: 409, code: "conflict", conflict: true, p: true},
		{name: "not found", status: 404, code: "not_found", notFound: true, p: true},
		{name: "throttled", status: 429, code: "throttled"},
		{name: "unavailable", status: 503, code: "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				apiError(w, tt.status, tt.code, "no")
			}))
			defer srv.Close()
			c := New(srv.URL, "tok", "")
			c.Attempts, c.Backoff = 2, time.Millisecond
			_, err := c.Renew(context.Background(), "p", "j1", 1)
			require.Error(t, err)
			require.Equal(t, tt.fenced, IsFenced(err))
			require.Equal(t, tt.conflict, IsConflict(err))
			require.Equal(t, tt.notFound, IsNotFound(err))
			require.Equal(t, tt.p, IsPermanent(err))
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.status, e.Status)
		})
	}
}

// TestRetries: idempotent calls retry transient failures; a stage change
// and an accept do not (a lost success would come back as a 409).
func TestRetries(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			apiError(w, 503, "unavailable", "busy")
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"leaseExpiresAt": "2030-01-01T00:00:00Z"})
	}))
	defer srv.Close()
	c := New(srv.URL, "tok", "")
	c.Backoff = time.Millisecond
	until, err := c.Renew(context.Background(), "p", "j1", 1)
	require.NoError(t, err)
	require.Equal(t, 2030, until.Year())
	require.EqualValues(t, 3, calls.Load())

	calls.Store(0)
	_, err = c.Accept(context.Background(), protocol.DispatchMessage{JobID: "j1", ProductID: "p", DispatchEpoch: 1})
	require.Error(t, err)
	require.EqualValues(t, 1, calls.Load())

	calls.Store(0)
	_, err = c.Patch(context.Background(), "p", "j1", Patch{Stage: "building", LeaseEpoch: 1})
	require.Error(t, err)
	require.EqualValues(t, 1, calls.Load())
}

func TestRequests(t *testing.T) {
	t.Parallel()
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "Bearer ft_x", r.Header.Get("Authorization"))
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("x-product-id"))
		switch r.URL.Path {
		case "/api/fleet/claim":
			w.WriteHeader(http.StatusNoContent)
		case "/api/fleet/jobs/j1":
			if r.Method == http.MethodPatch {
				require.Equal(t, "aq/wip/j1", body["checkpoint"])
				require.NotContains(t, body, "stage", "a checkpoint-only patch sends no stage")
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "j1", "stage": "building"})
		case "/api/fleet/fail":
			require.Equal(t, false, body["retryable"])
			require.Equal(t, "crash: x", body["reason"])
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "j1", "stage": "failed"})
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "ft_x", "demo")
	ctx := context.Background()
	cl, err := c.Claim(ctx)
	require.NoError(t, err)
	require.Nil(t, cl, "204: nothing to claim")
	cp := "aq/wip/j1"
	j, err := c.Patch(ctx, "prod", "j1", Patch{LeaseEpoch: 2, Checkpoint: &cp})
	require.NoError(t, err)
	require.Equal(t, "building", string(j.Stage))
	_, err = c.Fail(ctx, "prod", "j1", 2, "crash: x", false)
	require.NoError(t, err)
	require.NoError(t, c.Heartbeat(ctx, Heartbeat{Capabilities: []string{}, Repos: []string{}}))
	require.Equal(t, []string{
		"POST /api/fleet/claim demo",
		"PATCH /api/fleet/jobs/j1 prod",
		"POST /api/fleet/fail prod",
		"POST /api/fleet/factories/heartbeat demo",
	}, seen)
}
