package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
)

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: fleet.Code(code), Message: msg}})
}

// newClient returns a client of srv whose waits between tries pass at
// once.
func newClient(t *testing.T, srv *httptest.Server, token, product string) *api.Client {
	t.Helper()
	w := &waits{Clock: clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
	return api.New(api.Config{BaseURL: srv.URL, Token: token, Product: product, Timers: w})
}

// TestErrors: the API's error shape becomes an *Error that callers branch
// on with errors.As, errors.Is against the sentinels, or CodeOf.
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
			c := newClient(t, srv, "tok", "")
			_, err := c.Renew(context.Background(), "p", "j1", 1)
			require.Error(t, err)
			require.Equal(t, tt.fenced, errors.Is(err, api.ErrFenced))
			require.Equal(t, tt.conflict, errors.Is(err, api.ErrConflict))
			require.Equal(t, tt.notFound, errors.Is(err, api.ErrNotFound))
			require.Equal(t, tt.p, api.IsPermanent(err))
			require.Equal(t, fleet.Code(tt.code), api.CodeOf(err))
			var e *api.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.status, e.Status)
			require.Equal(t, "no", e.Message)
		})
	}
}

// TestErrorWithoutTheAPIShape: a proxy's page is classified by its status.
func TestErrorWithoutTheAPIShape(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer srv.Close()
	c := api.New(api.Config{BaseURL: srv.URL, Attempts: 1})
	_, err := c.GetJob(context.Background(), "", "j1")
	require.ErrorIs(t, err, api.ErrUnavailable)
	require.EqualError(t, err, "502 unavailable: <html>bad gateway</html>")
}

// TestRetries: idempotent calls retry transient failures; a stage change,
// an accept, a fail and a plain release do not (a lost success would come
// back as a 409).
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
	c := newClient(t, srv, "tok", "")
	ctx := context.Background()
	ren, err := c.Renew(ctx, "p", "j1", 1)
	require.NoError(t, err)
	require.Equal(t, 2030, ren.LeaseExpiresAt.Year())
	require.EqualValues(t, 3, calls.Load())

	for name, call := range map[string]func() error{
		"accept": func() error {
			_, err := c.Accept(ctx, api.AcceptRequest{JobID: "j1", ProductID: "p", DispatchEpoch: api.Ptr[int64](1)})
			return err
		},
		"stage change": func() error {
			return c.Patch(ctx, "p", "j1", api.PatchRequest{Stage: api.Ptr(fleet.StageBuilding), LeaseEpoch: api.Ptr[int64](1)})
		},
		"fail": func() error {
			_, err := c.Fail(ctx, api.FailRequest{JobID: "j1", LeaseEpoch: api.Ptr[int64](1), Reason: api.Ptr("x"), Retryable: api.Ptr(true)})
			return err
		},
		"plain release": func() error {
			_, err := c.Release(ctx, "p", "j1", api.ReleaseRequest{LeaseEpoch: api.Ptr[int64](1)})
			return err
		},
	} {
		calls.Store(0)
		require.Error(t, call(), name)
		require.EqualValues(t, 1, calls.Load(), "%s is tried once", name)
	}

	calls.Store(0)
	_, err = c.Release(ctx, "p", "j1", api.ReleaseRequest{LeaseEpoch: api.Ptr[int64](1), Outcome: api.Ptr(fleet.ReleaseCancelled)})
	require.NoError(t, err, "an acknowledgement is retried")
	require.EqualValues(t, 3, calls.Load())
}

// waits records the waits a client starts and lets each pass at once.
type waits struct {
	*clocktest.Clock
	mu  sync.Mutex
	got []time.Duration
}

func (w *waits) NewTicker(d time.Duration) clock.Ticker {
	w.mu.Lock()
	w.got = append(w.got, d)
	w.mu.Unlock()
	t := w.Clock.NewTicker(d)
	w.Clock.Advance(d)
	return t
}

// TestRetryAfter: a 429's or a 503's Retry-After is the wait before the
// next try, however short the backoff.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "7")
			apiError(w, 429, "throttled", "slow down")
		case 2:
			w.Header().Set("Retry-After", "3")
			apiError(w, 503, "unavailable", "later")
		default:
			_ = json.NewEncoder(w).Encode(fleet.Job{ID: "j1"})
		}
	}))
	defer srv.Close()
	w := &waits{Clock: clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
	c := api.New(api.Config{BaseURL: srv.URL, Backoff: time.Millisecond, Timers: w})
	_, err := c.GetJob(context.Background(), "p", "j1")
	require.NoError(t, err)
	require.EqualValues(t, 3, calls.Load())
	require.Equal(t, []time.Duration{7 * time.Second, 3 * time.Second}, w.got)
}

// TestNetworkFailureRetried: a request that got no answer is retried when
// it is safe to; the error it ends with says unavailable and wraps the
// cause.
func TestNetworkFailureRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		require.NoError(t, err)
		_ = conn.Close()
	}))
	defer srv.Close()
	c := newClient(t, srv, "tok", "")
	_, err := c.GetJob(context.Background(), "p", "j1")
	require.ErrorIs(t, err, api.ErrUnavailable)
	var e *api.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 0, e.Status)
	require.Error(t, e.Err)
	require.EqualValues(t, api.DefaultAttempts, calls.Load())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls.Store(0)
	_, err = c.GetJob(ctx, "p", "j1")
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 0, calls.Load())
}

func TestRequests(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "Bearer ft_x", r.Header.Get("Authorization"))
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("x-product-id"))
		mu.Unlock()
		switch r.URL.Path {
		case "/api/fleet/claim":
			require.NotEmpty(t, body["requestId"])
			w.WriteHeader(http.StatusNoContent)
		case "/api/fleet/jobs/j1":
			if r.Method == http.MethodPatch {
				require.Equal(t, "aq/wip/j1", body["checkpoint"])
				require.NotContains(t, body, "stage", "a checkpoint-only patch sends no stage")
				require.Equal(t, api.PreferMinimal, r.Header.Get(api.HeaderPrefer), "a patch asks for no job back")
				w.WriteHeader(http.StatusNoContent)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "j1", "stage": "building"})
		case "/api/fleet/fail":
			require.Equal(t, false, body["retryable"])
			require.Equal(t, "crash: x", body["reason"])
			require.NotContains(t, body, "usage", "no usage is sent when none is known")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "j1", "stage": "failed"})
		case "/api/fleet/factories/heartbeat":
			require.Equal(t, []any{}, body["capabilities"])
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "f1"})
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	c := newClient(t, srv, "ft_x", "demo")
	ctx := context.Background()
	cl, err := c.Claim(ctx, api.ClaimRequest{})
	require.NoError(t, err)
	require.Nil(t, cl, "204: nothing to claim")
	require.NoError(t, c.Patch(ctx, "prod", "j1", api.PatchRequest{LeaseEpoch: api.Ptr[int64](2), Checkpoint: api.Ptr("aq/wip/j1")}))
	_, err = c.Fail(ctx, api.FailRequest{JobID: "j1", ProductID: "prod", LeaseEpoch: api.Ptr[int64](2), Reason: api.Ptr("crash: x"), Retryable: api.Ptr(false)})
	require.NoError(t, err)
	_, err = c.Heartbeat(ctx, api.HeartbeatRequest{Capabilities: []string{}, Repos: []string{}})
	require.NoError(t, err)
	_, err = c.GetJob(ctx, "", "j1")
	require.NoError(t, err)
	require.Equal(t, []string{
		"POST /api/fleet/claim demo",
		"PATCH /api/fleet/jobs/j1 prod",
		"POST /api/fleet/fail prod",
		"POST /api/fleet/factories/heartbeat demo",
		"GET /api/fleet/jobs/j1 ", // a job read across products sends no product
	}, seen)
}

// TestClaimRetriesWithSameRequestID: a claim whose answer is lost (the
// connection drops after the server took it) is retried with the same
// requestId, so the coordinator answers the lease it already gave; the
// next claim uses a new id.
func TestClaimRetriesWithSameRequestID(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		ids []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body api.ClaimRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		mu.Lock()
		ids = append(ids, body.RequestID)
		n := len(ids)
		mu.Unlock()
		if n == 1 {
			// The claim happened; its answer never arrives.
			conn, _, err := http.NewResponseController(w).Hijack()
			require.NoError(t, err)
			_ = conn.Close()
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"job": map[string]any{"id": "j1"}, "leaseEpoch": 1, "leaseExpiresAt": "2030-01-01T00:00:00Z"})
	}))
	defer srv.Close()
	c := newClient(t, srv, "tok", "")

	cl, err := c.Claim(context.Background(), api.ClaimRequest{})
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, "j1", cl.Job.ID)
	_, err = c.Claim(context.Background(), api.ClaimRequest{})
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ids, 3)
	require.NotEmpty(t, ids[0])
	require.Equal(t, ids[0], ids[1], "the retry carries the same request id")
	require.NotEqual(t, ids[1], ids[2], "a new claim has a new id")
}

// TestUploadRetriedFromTheStart: a transient failure of an upload sends
// the whole file again, its length declared each time.
func TestUploadRetriedFromTheStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "out.log")
	require.NoError(t, os.WriteFile(path, []byte("hello log"), 0o600))
	var (
		mu     sync.Mutex
		bodies []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.EqualValues(t, 9, r.ContentLength)
		require.Equal(t, "text/plain", r.Header.Get("Content-Type"))
		require.Equal(t, "kind=log&leaseEpoch=3&name=out.log", r.URL.RawQuery)
		b := new(bytes.Buffer)
		_, _ = b.ReadFrom(r.Body)
		mu.Lock()
		bodies = append(bodies, b.String())
		n := len(bodies)
		mu.Unlock()
		if n == 1 {
			apiError(w, 503, "unavailable", "later")
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(fleet.Artifact{ID: "j1.a", Size: 9})
	}))
	defer srv.Close()
	c := newClient(t, srv, "tok", "")
	a, err := c.UploadArtifact(context.Background(), "p", "j1", api.ArtifactUpload{Name: "out.log", Kind: fleet.ArtifactLog,
		ContentType: "text/plain", LeaseEpoch: api.Ptr[int64](3), Open: api.OpenFile(path)})
	require.NoError(t, err)
	require.Equal(t, "j1.a", a.ID)
	require.Equal(t, []string{"hello log", "hello log"}, bodies)
}

// TestStream: events are read with their ids, a bare id moves the resume
// point, comments are skipped, and a resume sends Last-Event-ID.
func TestStream(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "4", r.Header.Get("Last-Event-ID"))
		require.Equal(t, "text/event-stream", r.Header.Get("Accept"))
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(": keep-alive\n\nid: 5\nevent: stage\ndata: {\"a\":1}\n\nid: 6\n\ndata: x\ndata: y\n\n"))
	}))
	defer srv.Close()
	c := newClient(t, srv, "tok", "")
	var got []api.Event
	opened := false
	last, err := c.Stream(context.Background(), api.StreamRequest{Path: "/jobs/j1/events/stream", After: "4", Opened: func() { opened = true }},
		func(e api.Event) error { got = append(got, e); return nil })
	require.NoError(t, err)
	require.True(t, opened)
	require.Equal(t, "6", last)
	require.Equal(t, []api.Event{{ID: "5", Type: "stage", Data: `{"a":1}`}, {Type: "message", Data: "x\ny"}}, got)
}
