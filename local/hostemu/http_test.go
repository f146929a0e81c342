package hostemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/funchost"
)

// route builds an httpRoute from function.json-style trigger properties.
func route(t *testing.T, props string, forwarding bool) *httpRoute {
	t.Helper()
	mode := ModeEnvelope
	if forwarding {
		mode = ModeForward
	}
	return routeIn(t, props, mode)
}

func routeIn(t testing.TB, props string, mode HTTPMode) *httpRoute {
	t.Helper()
	var p map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(props), &p))
	fn := &Function{Name: "fn", Bindings: []Binding{
		{Type: "httpTrigger", Direction: "in", Name: "req", Props: p},
		{Type: "http", Direction: "out", Name: "res"},
	}}
	r, err := newHTTPRoute(fn, fn.Bindings[0], Settings(func(string) string { return "" }), mode)
	require.NoError(t, err)
	return r
}

func TestHTTPRouteMatch(t *testing.T) {
	t.Parallel()
	catchAll := route(t, `{"route":"{*path}","methods":["get","post"]}`, true)
	byID := route(t, `{"route":"fleet/jobs/{id}"}`, true)
	typed := route(t, `{"route":"items/{id:int}/parts/{part}","methods":["put"]}`, true)
	literal := route(t, `{"route":"/healthz/"}`, true)
	defaulted := route(t, `{}`, true) // the route defaults to the function name
	tests := []struct {
		name   string
		r      *httpRoute
		method string
		path   string
		params map[string]string
		ok     bool
	}{
		{name: "catch-all, deep", r: catchAll, method: "GET", path: "fleet/jobs/j1/events", ok: true,
			params: map[string]string{"path": "fleet/jobs/j1/events"}},
		{name: "catch-all, root", r: catchAll, method: "POST", path: "", ok: true, params: map[string]string{"path": ""}},
		{name: "catch-all, method not listed", r: catchAll, method: "DELETE", path: "fleet/jobs"},
		{name: "parameter", r: byID, method: "PATCH", path: "fleet/jobs/j42", ok: true, params: map[string]string{"id": "j42"}},
		{name: "parameter, literal case-insensitive", r: byID, method: "GET", path: "Fleet/JOBS/j42", ok: true, params: map[string]string{"id": "j42"}},
		{name: "parameter, too short", r: byID, method: "GET", path: "fleet/jobs"},
		{name: "parameter, too long", r: byID, method: "GET", path: "fleet/jobs/j42/runs"},
		{name: "parameter, literal differs", r: byID, method: "GET", path: "fleet/runs/j42"},
		{name: "constraint is not enforced, name kept", r: typed, method: "PUT", path: "items/7/parts/wheel", ok: true,
			params: map[string]string{"id": "7", "part": "wheel"}},
		{name: "typed, wrong method", r: typed, method: "GET", path: "items/7/parts/wheel"},
		{name: "literal", r: literal, method: "GET", path: "healthz", ok: true, params: map[string]string{}},
		{name: "literal, any method", r: literal, method: "OPTIONS", path: "healthz", ok: true, params: map[string]string{}},
		{name: "literal, other path", r: literal, method: "GET", path: "healthzz"},
		{name: "default route", r: defaulted, method: "GET", path: "fn", ok: true, params: map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			params, ok := tc.r.match(tc.method, strings.Split(tc.path, "/"))
			require.Equal(t, tc.ok, ok)
			if tc.ok {
				require.Equal(t, tc.params, params)
			}
		})
	}
	require.Equal(t, "res", catchAll.out)
	require.Equal(t, ModeForward, catchAll.mode)
	require.Equal(t, ModeEnvelope, route(t, `{"route":"x"}`, false).mode)
	// A function with bindings besides HTTP always gets an envelope.
	fn := &Function{Name: "fn", Bindings: []Binding{
		{Type: "httpTrigger", Direction: "in", Name: "req"}, {Type: "http", Direction: "out", Name: "res"},
		{Type: "blob", Direction: "out", Name: "b"},
	}}
	r, err := newHTTPRoute(fn, fn.Bindings[0], Settings(func(string) string { return "" }), ModeProxy)
	require.NoError(t, err)
	require.Equal(t, ModeEnvelope, r.mode)
}

// TestWithSystemProperties: each document of a batch is handed out with
// _etag and _ts added, as Cosmos DB does, and its own fields unchanged; a
// body that is not an object is handed out as it is.
func TestWithSystemProperties(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		same bool // handed out unchanged
	}{
		{name: "document", body: `{"id":"j1","productId":"p1","stage":"queued"}`},
		{name: "empty object", body: `{}`},
		{name: "padded", body: "  {\n \"id\": \"j1\" }\n"},
		{name: "padded empty", body: "{ }"},
		{name: "not an object", body: `["j1"]`, same: true},
		{name: "empty string", body: `""`, same: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var inv funchost.Invocation
			require.NoError(t, json.Unmarshal(batchInvocation("documents", []store.Item{{ID: "j1", PartitionKey: "p1", Rev: "17", Body: []byte(tc.body)}}, 1764230400), &inv))
			docs, err := funchost.Documents(inv.Data["documents"])
			require.NoError(t, err)
			require.Len(t, docs, 1)
			got := docs[0]
			if tc.same {
				require.Equal(t, tc.body, string(got))
				return
			}
			var doc map[string]any
			require.NoError(t, json.Unmarshal(got, &doc))
			require.Equal(t, "17", doc["_etag"])
			require.Equal(t, float64(1764230400), doc["_ts"], "_ts must be the number given: %s", got)
			var orig map[string]any
			require.NoError(t, json.Unmarshal([]byte(tc.body), &orig))
			for k, v := range orig {
				require.Equal(t, v, doc[k], "field %s", k)
			}
			require.Len(t, doc, len(orig)+2)
		})
	}
}

// readyChild is a Child whose process is already "running" at addr: the
// triggers talk to a fake handler without starting anything.
func readyChild(addr string) *Child {
	ready := make(chan struct{})
	close(ready)
	return &Child{ready: ready, addr: addr, Log: slog.New(slog.DiscardHandler)}
}

// echoAPI answers with what reached it, as the api function would see it.
var echoAPI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Seen-Path", r.URL.Path)
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"method": r.Method, "query": r.URL.RawQuery, "contentType": r.Header.Get("Content-Type"),
		"body": base64.StdEncoding.EncodeToString(body),
	})
})

// TestHTTPFrontEnvelope runs the emulator's envelope mode (a host without
// request forwarding) against a handler speaking funchost: the request
// crosses as Data.req, the answer comes back from Outputs.res.
func TestHTTPFrontEnvelope(t *testing.T) {
	t.Parallel()
	var gotReq funchost.HTTPRequest
	handler := funchost.NewServer(nil, "", nil)
	inner := funchost.HTTPFunc(echoAPI, "req", "res")
	handler.Handle("fn", func(ctx context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		if err := json.Unmarshal(inv.Data["req"], &gotReq); err != nil {
			return nil, err
		}
		return inner(ctx, inv)
	})
	fake := httptest.NewServer(handler)
	t.Cleanup(fake.Close)

	front := newHTTPFront("api", []*httpRoute{route(t, `{"route":"{*path}"}`, false)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	binary := []byte{0x00, 0xff, 0x1f, 0x8b, 0x00}
	tests := []struct {
		name        string
		method      string
		target      string
		contentType string
		body        []byte
		status      int
		wantQuery   string
	}{
		{name: "GET without a body", method: "GET", target: "/api/fleet/jobs?stage=queued&limit=2", status: 202, wantQuery: "stage=queued&limit=2"},
		{name: "POST JSON", method: "POST", target: "/api/fleet/jobs", contentType: "application/json", body: []byte(`{"manifest":"é"}`), status: 202},
		{name: "POST binary", method: "POST", target: "/api/blob", contentType: "application/octet-stream", body: binary, status: 202},
		{name: "outside the route prefix", method: "GET", target: "/other/x", status: 404},
		{name: "prefix lookalike", method: "GET", target: "/apix/y", status: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.target, bytes.NewReader(tc.body))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			rec := httptest.NewRecorder()
			front.ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			if tc.status != http.StatusAccepted {
				require.Contains(t, rec.Body.String(), `"code":"not_found"`)
				return
			}
			var echoed struct{ Method, Query, ContentType, Body string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &echoed))
			require.Equal(t, tc.method, echoed.Method)
			require.Equal(t, tc.wantQuery, echoed.Query)
			require.Equal(t, tc.contentType, echoed.ContentType)
			body, err := base64.StdEncoding.DecodeString(echoed.Body)
			require.NoError(t, err)
			require.Equal(t, string(tc.body), string(body), "the body must cross the envelope byte for byte")
			require.Equal(t, strings.SplitN(tc.target, "?", 2)[0], rec.Header().Get("X-Seen-Path"))

			// The envelope carried route parameters and the query as the host does.
			require.Equal(t, strings.TrimPrefix(strings.SplitN(tc.target, "?", 2)[0], "/api/"), gotReq.Params["path"])
			if tc.wantQuery != "" {
				require.Equal(t, map[string]string{"stage": "queued", "limit": "2"}, gotReq.Query)
			}
		})
	}
}

// TestHTTPFrontFailures checks what a client sees when the handler fails.
func TestHTTPFrontFailures(t *testing.T) {
	t.Parallel()
	handler := funchost.NewServer(nil, "", nil)
	handler.Handle("fn", func(context.Context, *funchost.Invocation) (*funchost.Result, error) {
		return nil, io.ErrUnexpectedEOF
	})
	fake := httptest.NewServer(handler)
	t.Cleanup(fake.Close)

	front := newHTTPFront("api", []*httpRoute{route(t, `{"route":"{*path}"}`, false)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	rec := httptest.NewRecorder()
	front.ServeHTTP(rec, httptest.NewRequest("GET", "/api/x", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	// The host drops a failed invocation's Logs: the reason is the
	// handler's to log, not the client's to read.
	require.NotContains(t, rec.Body.String(), "unexpected EOF", "the host does not read a failed invocation's Logs")

	// A handler that is not running: clients wait, then get 503.
	stopped := &Child{Log: slog.New(slog.DiscardHandler), ready: make(chan struct{})}
	front = newHTTPFront("api", []*httpRoute{route(t, `{"route":"{*path}"}`, true)}, stopped)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	rec = httptest.NewRecorder()
	front.ServeHTTP(rec, httptest.NewRequest("GET", "/api/x", nil).WithContext(ctx))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
}

// TestHTTPFrontForwardsBodyOnlyWithContentLength: with forwarding, the host
// copies the request body only when Content-Length > 0; a chunked body
// reaches the handler empty.
func TestHTTPFrontForwardsBodyOnlyWithContentLength(t *testing.T) {
	t.Parallel()
	type seen struct {
		body          string
		contentLength int64
	}
	got := make(chan seen, 1)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{body: string(b), contentLength: r.ContentLength}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(fake.Close)
	front := newHTTPFront("api", []*httpRoute{route(t, `{"route":"{*path}"}`, true)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	emu := httptest.NewServer(front)
	t.Cleanup(emu.Close)

	tests := []struct {
		name    string
		chunked bool
		want    seen
	}{
		{name: "with Content-Length", want: seen{body: `{"a":1}`, contentLength: 7}},
		{name: "chunked", chunked: true, want: seen{body: "", contentLength: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(`{"a":1}`)
			if tc.chunked {
				body = io.MultiReader(body) // length unknown: sent chunked
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL+"/api/x", body)
			require.NoError(t, err)
			resp, err := emu.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode)
			require.Equal(t, tc.want, <-got)
		})
	}
}

// TestHTTPFrontEnvelopeShape checks Data.req as the host writes it: Query a
// JSON object with repeated values joined by commas, and the body base64
// only for application/octet-stream and multipart (any other body is the
// text read from it).
func TestHTTPFrontEnvelopeShape(t *testing.T) {
	t.Parallel()
	got := make(chan map[string]json.RawMessage, 1)
	handler := funchost.NewServer(nil, "", nil)
	handler.Handle("fn", func(_ context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		var req map[string]json.RawMessage
		if err := json.Unmarshal(inv.Data["req"], &req); err != nil {
			return nil, err
		}
		got <- req
		return &funchost.Result{Outputs: map[string]any{"res": funchost.HTTPResponse{StatusCode: "204"}}}, nil
	})
	fake := httptest.NewServer(handler)
	t.Cleanup(fake.Close)
	front := newHTTPFront("api", []*httpRoute{route(t, `{"route":"{*path}"}`, false)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))

	body := []byte("hello")
	tests := []struct {
		contentType string
		wantBody    string // Data.req.Body, raw JSON
	}{
		{contentType: "application/octet-stream", wantBody: `"aGVsbG8="`},
		{contentType: "multipart/form-data; boundary=x", wantBody: `"aGVsbG8="`},
		{contentType: "image/png", wantBody: `"hello"`},
		{contentType: "text/markdown", wantBody: `"hello"`},
		{contentType: "application/json", wantBody: `"hello"`},
	}
	for _, tc := range tests {
		t.Run(tc.contentType, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/api/x?a=1&a=2&b=x", bytes.NewReader(body))
			req.Header.Set("Content-Type", tc.contentType)
			rec := httptest.NewRecorder()
			front.ServeHTTP(rec, req)
			require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			seen := <-got
			require.JSONEq(t, `{"a":"1,2","b":"x"}`, string(seen["Query"]))
			require.Equal(t, byte('{'), seen["Query"][0], "Query must be a JSON object: %s", seen["Query"])
			require.Equal(t, tc.wantBody, string(seen["Body"]))
		})
	}
}

// TestHTTPFrontForwardJoinsRepeatedQueryValues: the host rebuilds a
// forwarded request's query from its query collection, one value per name,
// repeated values joined with commas.
func TestHTTPFrontForwardJoinsRepeatedQueryValues(t *testing.T) {
	t.Parallel()
	got := make(chan url.Values, 1)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Query()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(fake.Close)
	front := newHTTPFront("api", []*httpRoute{route(t, `{"route":"{*path}"}`, true)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	rec := httptest.NewRecorder()
	front.ServeHTTP(rec, httptest.NewRequest("GET", "/api/x?a=1&a=2&b=x%20y", nil))
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Equal(t, url.Values{"a": {"1,2"}, "b": {"x y"}}, <-got)
}

// TestHTTPFrontStreamsOnlyWhenProxying: a handler that sends one event,
// then waits, reaches the client at once through proxying (YARP copies as
// it reads) and not at all through forwarding (the host's HttpClient reads
// the whole answer first) until the handler ends.
func TestHTTPFrontStreamsOnlyWhenProxying(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    HTTPMode
		streams bool
	}{{ModeProxy, true}, {ModeForward, false}} {
		t.Run(map[HTTPMode]string{ModeProxy: "proxy", ModeForward: "forward"}[tc.mode], func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "id: 1\nevent: x\ndata: {}\n\n")
				w.(http.Flusher).Flush()
				<-release
				_, _ = io.WriteString(w, "id: 2\nevent: x\ndata: {}\n\n")
			}))
			t.Cleanup(fake.Close)
			front := newHTTPFront("api", []*httpRoute{routeIn(t, `{"route":"{*path}"}`, tc.mode)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
			emu := httptest.NewServer(front)
			t.Cleanup(emu.Close)

			got := make(chan string, 2)
			go func() {
				resp, err := http.Get(emu.URL + "/api/fleet/events/stream?a=1&a=2")
				if err != nil {
					got <- "error: " + err.Error()
					return
				}
				defer resp.Body.Close()
				buf := make([]byte, 256)
				for {
					n, err := resp.Body.Read(buf)
					if n > 0 {
						got <- string(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
			if tc.streams {
				require.Equal(t, "id: 1\nevent: x\ndata: {}\n\n", <-got, "the first event before the handler ended")
				close(release)
				require.Equal(t, "id: 2\nevent: x\ndata: {}\n\n", <-got)
				return
			}
			select {
			case b := <-got:
				t.Fatalf("forwarding passed %q on before the handler ended", b)
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			require.Equal(t, "id: 1\nevent: x\ndata: {}\n\nid: 2\nevent: x\ndata: {}\n\n", <-got)
		})
	}
}

// TestHTTPFrontProxyKeepsTheRequest: proxying hands the query on as sent
// (repeated values included) and streams a chunked body, unlike forwarding.
func TestHTTPFrontProxyKeepsTheRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		query url.Values
		body  string
	}
	got := make(chan seen, 1)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.Query(), string(b)}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(fake.Close)
	front := newHTTPFront("api", []*httpRoute{routeIn(t, `{"route":"{*path}"}`, ModeProxy)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	emu := httptest.NewServer(front)
	t.Cleanup(emu.Close)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL+"/api/x?a=1&a=2", io.MultiReader(strings.NewReader(`{"a":1}`)))
	require.NoError(t, err)
	resp, err := emu.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, seen{url.Values{"a": {"1", "2"}}, `{"a":1}`}, <-got)
}

// TestHTTPFrontProxiedChunkedBodyOverTheLimitIs413: a chunked body past
// the host's 100 MB is the client's fault, answered 413 as the host does,
// not a 502 blaming the handler (which read what it was sent).
func TestHTTPFrontProxiedChunkedBodyOverTheLimitIs413(t *testing.T) {
	t.Parallel()
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(fake.Close)
	front := newHTTPFront("api", []*httpRoute{routeIn(t, `{"route":"{*path}"}`, ModeProxy)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	emu := httptest.NewServer(front)
	t.Cleanup(emu.Close)
	body := io.MultiReader(io.LimitReader(zeros{}, maxRequestBytes+1)) // length unknown: sent chunked
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL+"/api/upload", body)
	require.NoError(t, err)
	resp, err := emu.Client().Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(b))
}

// TestHTTPFrontProxyEndsAtFunctionTimeout: a proxied request whose
// function runs past functionTimeout is cancelled and answered 500, as the
// host gives up on the invocation.
func TestHTTPFrontProxyEndsAtFunctionTimeout(t *testing.T) {
	t.Parallel()
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // runs until the host gives up on it
	}))
	t.Cleanup(fake.Close)
	front := newHTTPFront("api", []*httpRoute{routeIn(t, `{"route":"{*path}"}`, ModeProxy)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	front.timeout = 50 * time.Millisecond
	emu := httptest.NewServer(front)
	t.Cleanup(emu.Close)
	resp, err := emu.Client().Get(emu.URL + "/api/slow")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, string(b))
	require.Contains(t, string(b), "functionTimeout")
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// writeCounter counts the writes made on the connections it dials.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// called is a handler's "called" for a test to wait on.
type called struct{ ch chan struct{} }

func (s called) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.ch:
	case <-time.After(within):
		t.Fatalf("%s: not within %s", what, within)
	}
}

// TestHTTPFrontSendsARequestInOneWrite: a request with a small declared
// body reaches the handler in one write, its headers and body together,
// proxied or forwarded (net/http flushes the headers of a body it does not
// know to be in memory on their own, and ReverseProxy wraps every body: a
// second packet for the handler to wake up to, on every API request). A
// chunked body still streams through the proxy, and a body shorter than
// its declared length is the client's error (400), not the handler's.
func TestHTTPFrontSendsARequestInOneWrite(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("y", 600)
	for _, mode := range []HTTPMode{ModeProxy, ModeForward} {
		got := make(chan string, 1)
		entered := called{make(chan struct{}, 1)}
		fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered.ch <- struct{}{}
			b, _ := io.ReadAll(r.Body)
			got <- r.Header.Get("Expect") + string(b)
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(fake.Close)
		front := newHTTPFront("api", []*httpRoute{routeIn(t, `{"route":"{*path}"}`, mode)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
		var writes atomic.Int64
		counted := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return writeCounter{c, &writes}, nil
		}}
		t.Cleanup(counted.CloseIdleConnections)
		front.proxy.Transport = counted
		emu := httptest.NewServer(front)
		t.Cleanup(emu.Close)

		type sample struct {
			name    string
			body    string
			chunked bool
			expect  bool
			writes  int64 // -1: more than one
		}
		cases := []sample{
			{"a declared body", body, false, false, 1},
			{"a declared body after Expect: 100-continue", body, false, true, 1},
		}
		if mode == ModeProxy {
			// Streamed as it arrives: the headers in a write of their own,
			// then the body. The host forwards no chunked body, and reads
			// any declared one whole.
			cases = append(cases,
				sample{"a chunked body", body, true, false, -1})
		}
		for _, tc := range cases {
			name := fmt.Sprintf("mode %d, %s", mode, tc.name)
			writes.Store(0)
			var rd io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				rd = io.MultiReader(rd) // no length known: chunked
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL+"/api/x", rd)
			require.NoError(t, err, name)
			if tc.expect {
				req.Header.Set("Expect", "100-continue")
			}
			resp, err := emu.Client().Do(req)
			require.NoError(t, err, name)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode, name)
			entered.wait(t, name)
			require.Equal(t, tc.body, <-got, name+": the body arrives whole, and an answered expectation is not passed on")
			if tc.writes < 0 {
				require.Greater(t, writes.Load(), int64(1), name+": writes to the handler")
				continue
			}
			require.Equal(t, tc.writes, writes.Load(), name+": writes to the handler")
		}

		if mode == ModeProxy {
			// A declared body over the limit streams: the handler is called
			// before the client has sent the rest of it.
			big := strings.Repeat("y", proxyReadsBodyFirst+1)
			pr, pw := io.Pipe()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL+"/api/x", pr)
			require.NoError(t, err)
			req.ContentLength = int64(len(big))
			done := make(chan error, 1)
			go func() {
				resp, err := emu.Client().Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			_, err = io.WriteString(pw, big[:1024])
			require.NoError(t, err)
			entered.wait(t, "the handler called before the body's end")
			_, err = io.WriteString(pw, big[1024:])
			require.NoError(t, err)
			require.NoError(t, pw.Close())
			require.NoError(t, <-done)
			require.Equal(t, big, <-got)
		}

		conn, err := net.Dial("tcp", strings.TrimPrefix(emu.URL, "http://"))
		require.NoError(t, err)
		_, err = io.WriteString(conn, "POST /api/x HTTP/1.1\r\nHost: emu\r\nContent-Length: 10\r\n\r\nabc")
		require.NoError(t, err)
		require.NoError(t, conn.(*net.TCPConn).CloseWrite())
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		resp.Body.Close()
		conn.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "mode %d: a body shorter than declared", mode)
	}
}

// BenchmarkHTTPFrontProxy is one API request through the emulator's proxy
// (client -> emulator -> handler and back) with a job-sized answer; the
// allocations are those of all three, the client's and the fake handler's
// included.
func BenchmarkHTTPFrontProxy(b *testing.B) {
	answer := bytes.Repeat([]byte("x"), 1500)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = w.Write(answer)
	}))
	b.Cleanup(fake.Close)
	front := newHTTPFront("api", []*httpRoute{routeIn(b, `{"route":"{*path}"}`, ModeProxy)}, readyChild(strings.TrimPrefix(fake.URL, "http://")))
	emu := httptest.NewServer(front)
	b.Cleanup(emu.Close)
	body := bytes.Repeat([]byte("y"), 600)
	client := emu.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(emu.URL+"/api/fleet/jobs", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestFailedInvocationLogsAreDropped: the host checks an invocation's
// status before it reads the body (EnsureSuccessStatusCode in
// DefaultHttpWorkerService), so the Logs of a non-2xx answer never reach
// the function's logs; a handler must log the reason itself (to stdout).
// The emulator must not show it more than the host would, or a handler
// that reports failures only in Logs looks fine here and is silent in
// Azure.
func TestFailedInvocationLogsAreDropped(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"Outputs":{},"Logs":["only-in-logs"],"ReturnValue":null}`, `not an envelope`, ``} {
		fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, body)
		}))
		addr := strings.TrimPrefix(fake.URL, "http://")
		res, status, err := invokeBody(t.Context(), fake.Client(), addr, "fn", []byte(`{"Data":{},"Metadata":{}}`))
		fake.Close()
		require.Error(t, err, "body %q", body)
		require.Equal(t, http.StatusInternalServerError, status)
		require.Equal(t, "status 500", err.Error(), "body %q", body)
		require.Nil(t, res, "the host reads nothing of a failed invocation's answer")
	}
}
