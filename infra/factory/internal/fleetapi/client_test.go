package fleetapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gigafactory/fleet/shared/fleet"
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
	ren, err := c.Renew(context.Background(), "p", "j1", 1)
	require.NoError(t, err)
	require.Equal(t, 2030, ren.LeaseExpiresAt.Year())
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
	_, err = c.Fail(ctx, "prod", "j1", 2, "crash: x", false, nil)
	require.NoError(t, err)
	require.NoError(t, c.Heartbeat(ctx, Heartbeat{Capabilities: []string{}, Repos: []string{}}))
	require.Equal(t, []string{
		"POST /api/fleet/claim demo",
		"PATCH /api/fleet/jobs/j1 prod",
		"POST /api/fleet/fail prod",
		"POST /api/fleet/factories/heartbeat demo",
	}, seen)
}

// TestFailReasonSanitised: an engine's coloured output in a failure report
// reaches the coordinator as plain, bounded text that passes the server's
// own rule for the field (no control characters, valid UTF-8, at most 4000
// bytes), so /fail is never refused for its reason.
func TestFailReasonSanitised(t *testing.T) {
	t.Parallel()
	long := "crash: engine x exited 1; last output:\n" + strings.Repeat("\x1b[31mERROR\x1b[0m é\r\n", 800)
	tests := []struct {
		name, reason, want string
	}{
		{name: "colours", reason: "crash: \x1b[1;31mboom\x1b[0m done", want: "crash: boom done"},
		{name: "osc title and bell", reason: "x\x1b]0;title\x07y\x1b]8;;http://e\x1b\\z", want: "xyz"},
		{name: "other controls", reason: "a\x00b\x08c\td\ne\x7f\u0085f", want: "abc\td\nef"},
		{name: "carriage returns of a progress bar", reason: "10%\r50%\r100%\r\ndone", want: "10%\n50%\n100%\ndone"},
		{name: "invalid utf-8", reason: "bad \xff\xfe byte", want: "bad \uFFFD\uFFFD byte"},
		{name: "lone escape at the end", reason: "end\x1b", want: "end"},
		{name: "plain", reason: "git_error: push: rejected", want: "git_error: push: rejected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, SanitizeReason(tt.reason))
		})
	}

	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reason string `json:"reason"`
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		// The coordinator's rule for the field (coord.Fail).
		if err := fleet.ValidateText("reason", body.Reason, 4000); err != nil {
			apiError(w, 400, "invalid_argument", err.Error())
			return
		}
		got.Store(body.Reason)
		_ = json.NewEncoder(w).Encode(fleet.Job{ID: "j1", Stage: fleet.StageFailed})
	}))
	defer srv.Close()
	c := New(srv.URL, "tok", "")
	for _, reason := range []string{"crash: \x1b[31mred\x1b[0m", long} {
		_, err := c.Fail(context.Background(), "p", "j1", 1, reason, false, nil)
		require.NoError(t, err, "a failure report is never refused for its text")
		sent := got.Load().(string)
		require.LessOrEqual(t, len(sent), MaxReasonLen)
		require.True(t, utf8.ValidString(sent))
		require.NotContains(t, sent, "\x1b")
		require.True(t, strings.HasPrefix(sent, "crash: "), "the kind survives: %q", sent[:min(len(sent), 40)])
	}
	require.Contains(t, got.Load().(string), "ERROR é", "the tail of the output survives")
}
