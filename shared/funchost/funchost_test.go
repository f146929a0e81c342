package funchost_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/funchost"
)

// envelope reads a testdata sample: an invocation as the host POSTs it.
func envelope(t *testing.T, name string) *funchost.Invocation {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	var inv funchost.Invocation
	require.NoError(t, json.Unmarshal(b, &inv), name)
	return &inv
}

// wire round-trips a result through JSON, as the host receives it.
func wire(t *testing.T, res *funchost.Result) map[string]json.RawMessage {
	t.Helper()
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var out map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func TestTimer(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 11, 2, 10, 15, 0, 0, time.UTC)
	tests := []struct {
		name      string
		file      string // a testdata envelope; its Data.timer is decoded
		raw       string // or this payload
		pastDue   bool
		noStatus  bool
		last      time.Time
		wantErr   string
		checkNext bool
	}{
		{name: "on time", file: "timer.json", last: time.Date(2026, 11, 2, 10, 14, 45, 3187300, time.UTC), checkNext: true},
		{name: "past due", file: "timer_past_due.json", pastDue: true, last: time.Date(2026, 11, 2, 7, 59, 45, 3187300, time.UTC), checkNext: true},
		// A timer that never fired: the host writes DateTime.MinValue with
		// no offset.
		{name: "first run", file: "timer_first_run.json", last: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), checkNext: true},
		{name: "no schedule monitor", raw: `{"Schedule":{"AdjustForDST":true},"ScheduleStatus":null,"IsPastDue":false}`, noStatus: true},
		{name: "string encoded", raw: `"{\"Schedule\":{\"AdjustForDST\":true},\"IsPastDue\":true}"`, pastDue: true, noStatus: true},
		{name: "bad timestamp", raw: `{"ScheduleStatus":{"Last":"yesterday"},"IsPastDue":false}`, wantErr: "ScheduleStatus.Last"},
		{name: "not an object", raw: `[1,2]`, wantErr: "timer payload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := json.RawMessage(tc.raw)
			if tc.file != "" {
				raw = envelope(t, tc.file).Data["timer"]
			}
			info, err := funchost.Timer(raw)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.pastDue, info.IsPastDue)
			if tc.noStatus {
				require.Nil(t, info.ScheduleStatus)
				return
			}
			require.NotNil(t, info.ScheduleStatus)
			require.True(t, info.Schedule.AdjustForDST)
			require.True(t, tc.last.Equal(info.ScheduleStatus.Last), "Last = %s", info.ScheduleStatus.Last)
			if tc.checkNext {
				require.True(t, next.Equal(info.ScheduleStatus.Next), "Next = %s", info.ScheduleStatus.Next)
				require.False(t, info.ScheduleStatus.LastUpdated.IsZero())
			}
		})
	}
}

func TestTimerFunc(t *testing.T) {
	t.Parallel()
	errStore := errors.New("store unavailable")
	tests := []struct {
		name     string
		inv      *funchost.Invocation
		n        int
		runErr   error
		wantLogs []string
		wantErr  error
		wantRan  bool
	}{
		{name: "on time", inv: envelope(t, "timer.json"), n: 3, wantRan: true, wantLogs: []string{"reaped: 3"}},
		{name: "past due", inv: envelope(t, "timer_past_due.json"), n: 0, wantRan: true,
			wantLogs: []string{"timer is past due: the previous occurrence was missed", "reaped: 0"}},
		{name: "first run", inv: envelope(t, "timer_first_run.json"), n: 1, wantRan: true, wantLogs: []string{"reaped: 1"}},
		{name: "task fails", inv: envelope(t, "timer.json"), runErr: errStore, wantRan: true, wantErr: errStore},
		{name: "no timer binding", inv: &funchost.Invocation{Data: map[string]json.RawMessage{"other": json.RawMessage(`{}`)}},
			wantErr: funchost.ErrBadPayload},
		{name: "undecodable timer", inv: &funchost.Invocation{Data: map[string]json.RawMessage{"timer": json.RawMessage(`{"IsPastDue":"maybe"}`)}},
			wantErr: funchost.ErrBadPayload},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ran := false
			f := funchost.TimerFunc("timer", "reaped", nil, func(context.Context) (int, error) {
				ran = true
				return tc.n, tc.runErr
			})
			res, err := f(t.Context(), tc.inv)
			require.Equal(t, tc.wantRan, ran)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Nil(t, res)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantLogs, res.Logs)
			out := wire(t, res)
			require.JSONEq(t, `{}`, string(out["Outputs"]))
			require.JSONEq(t, `{"reaped":`+jsonInt(tc.n)+`}`, string(out["ReturnValue"]))
		})
	}
}

func jsonInt(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestDocuments(t *testing.T) {
	t.Parallel()
	batch := envelope(t, "cosmos_batch.json").Data["documents"]
	tests := []struct {
		name    string
		raw     json.RawMessage
		ids     []string
		wantErr string
	}{
		{name: "double encoded batch", raw: batch, ids: []string{"j018f2b6c1a3b7e21d0c4", "j018f2b6c1a3b7e21d0c5"}},
		{name: "empty batch", raw: envelope(t, "cosmos_empty.json").Data["documents"], ids: nil},
		{name: "plain array", raw: json.RawMessage(`[{"id":"a"},{"id":"b"}]`), ids: []string{"a", "b"}},
		{name: "encoded once", raw: json.RawMessage(`"[{\"id\":\"a\"}]"`), ids: []string{"a"}},
		{name: "null", raw: json.RawMessage(`null`), ids: nil},
		{name: "absent", raw: nil, ids: nil},
		{name: "an object", raw: json.RawMessage(`{"id":"a"}`), wantErr: "want a JSON array"},
		{name: "a plain string", raw: json.RawMessage(`"not json"`), wantErr: "want a JSON array"},
		{name: "broken string", raw: json.RawMessage(`"[{\"id\":`), wantErr: "decode string value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			docs, err := funchost.Documents(tc.raw)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var ids []string
			for _, d := range docs {
				var doc struct {
					ID string `json:"id"`
				}
				require.NoError(t, json.Unmarshal(d, &doc))
				ids = append(ids, doc.ID)
			}
			require.Equal(t, tc.ids, ids)
		})
	}

	t.Run("system properties and escapes survive", func(t *testing.T) {
		t.Parallel()
		docs, err := funchost.Documents(batch)
		require.NoError(t, err)
		var first struct {
			Title string `json:"title"`
			ETag  string `json:"_etag"`
			LSN   int    `json:"_lsn"`
		}
		require.NoError(t, json.Unmarshal(docs[0], &first))
		require.Equal(t, `Fix "flaky" test`, first.Title)
		require.Equal(t, `"0100c4a2-0000-0d00-0000-6745f1c30000"`, first.ETag)
		require.Equal(t, 41, first.LSN)
	})
}

func TestEncodeDocuments(t *testing.T) {
	t.Parallel()
	docs, err := funchost.Documents(envelope(t, "cosmos_batch.json").Data["documents"])
	require.NoError(t, err)
	tests := []struct {
		name string
		docs []json.RawMessage
		want int
	}{
		{name: "batch", docs: docs, want: 2},
		{name: "nil", docs: nil, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			enc := funchost.EncodeDocuments(tc.docs)
			// The host's shape: a JSON string holding a JSON string.
			var once string
			require.NoError(t, json.Unmarshal(enc, &once))
			var twice string
			require.NoError(t, json.Unmarshal([]byte(once), &twice), "want a string inside the string")
			require.True(t, strings.HasPrefix(twice, "["))
			back, err := funchost.Documents(enc)
			require.NoError(t, err)
			require.Len(t, back, tc.want)
			for i := range back {
				require.JSONEq(t, string(tc.docs[i]), string(back[i]))
			}
		})
	}
}

// echo answers with what it received, so a test sees the request HTTPFunc
// rebuilt from the envelope.
type echoed struct {
	Method        string `json:"method"`
	Path          string `json:"path"`
	Query         string `json:"query"`
	ContentType   string `json:"contentType"`
	ContentLength int64  `json:"contentLength"`
	Authorization string `json:"authorization"`
	Body          []byte `json:"body"`
}

var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("Vary", "Authorization")
	w.Header().Add("Vary", "X-Product-Id")
	status := http.StatusOK
	if r.Method == http.MethodPost {
		w.Header().Set("Location", "/api/echo/1")
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(echoed{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), ContentLength: r.ContentLength,
		Authorization: r.Header.Get("Authorization"), Body: body})
})

func TestHTTPFunc(t *testing.T) {
	t.Parallel()
	gz := []byte{0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x00, 0x80, 0x7f, 0xfe, 0x0a, 0x0d}
	post := envelope(t, "http_post_json.json")
	stringEncoded, err := json.Marshal(string(post.Data["req"]))
	require.NoError(t, err)
	tests := []struct {
		name       string
		inv        *funchost.Invocation
		wantStatus string
		want       echoed
		wantErr    error
	}{
		{name: "GET without a body", inv: envelope(t, "http_get.json"), wantStatus: "200",
			want: echoed{Method: "GET", Path: "/api/fleet/jobs", Query: "stage=queued&limit=2", Body: []byte{}}},
		{name: "POST with a JSON body", inv: post, wantStatus: "201",
			want: echoed{Method: "POST", Path: "/api/echo", ContentType: "application/json; charset=utf-8",
				ContentLength: 38, Body: []byte(`{"title":"résumé","repos":["notes"]}`)}},
		{name: "POST with a binary body", inv: envelope(t, "http_post_binary.json"), wantStatus: "201",
			want: echoed{Method: "POST", Path: "/api/echo", ContentType: "application/octet-stream",
				ContentLength: int64(len(gz)), Body: gz}},
		{name: "body handed over parsed", wantStatus: "201",
			inv: &funchost.Invocation{Data: map[string]json.RawMessage{"req": json.RawMessage(
				`{"Url":"http://localhost:7071/api/echo","Method":"post","Query":{},"Headers":{"Content-Type":"application/json"},"Body":{"a":[1,2]}}`)}},
			want: echoed{Method: "POST", Path: "/api/echo", ContentType: "application/json", ContentLength: 11, Body: []byte(`{"a":[1,2]}`)}},
		{name: "whole request string encoded", wantStatus: "201",
			inv: &funchost.Invocation{Data: map[string]json.RawMessage{"req": stringEncoded}},
			want: echoed{Method: "POST", Path: "/api/echo", ContentType: "application/json; charset=utf-8",
				ContentLength: 38, Body: []byte(`{"title":"résumé","repos":["notes"]}`)}},
		{name: "no req binding", inv: &funchost.Invocation{Data: map[string]json.RawMessage{}}, wantErr: funchost.ErrBadPayload},
		{name: "bad Url", wantErr: funchost.ErrBadPayload,
			inv: &funchost.Invocation{Data: map[string]json.RawMessage{"req": json.RawMessage(`{"Url":"http://[::1","Method":"GET"}`)}}},
		{name: "req not an object", wantErr: funchost.ErrBadPayload,
			inv: &funchost.Invocation{Data: map[string]json.RawMessage{"req": json.RawMessage(`[1]`)}}},
	}
	f := funchost.HTTPFunc(echo, "req", "res")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := f(t.Context(), tc.inv)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			out := wire(t, res)
			var outputs map[string]funchost.HTTPResponse
			require.NoError(t, json.Unmarshal(out["Outputs"], &outputs))
			resp, ok := outputs["res"]
			require.True(t, ok, "Outputs.res is missing: %s", out["Outputs"])
			require.Equal(t, tc.wantStatus, resp.StatusCode)
			require.Equal(t, "application/json", resp.Headers["Content-Type"])
			require.Equal(t, "Authorization, X-Product-Id", resp.Headers["Vary"])
			if tc.wantStatus == "201" {
				require.Equal(t, "/api/echo/1", resp.Headers["Location"])
			}
			var got echoed
			require.NoError(t, json.Unmarshal([]byte(resp.Body), &got), resp.Body)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestHTTPRequestWireForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want funchost.HTTPRequest
	}{
		{name: "older host form: Query string encoded",
			in: `{"Url":"http://h/api/x?a=1","Method":"GET","Query":"{\"a\":\"1\"}","Headers":{"Accept":["*/*"]},"Params":{"path":"x"}}`,
			want: funchost.HTTPRequest{URL: "http://h/api/x?a=1", Method: "GET", Query: map[string]string{"a": "1"},
				Headers: map[string][]string{"Accept": {"*/*"}}, Params: map[string]string{"path": "x"}}},
		{name: "objects throughout, one header value",
			in: `{"Url":"http://h/","Method":"GET","Query":{"a":"1"},"Headers":{"Accept":"*/*"},"Params":"{\"path\":\"\"}"}`,
			want: funchost.HTTPRequest{URL: "http://h/", Method: "GET", Query: map[string]string{"a": "1"},
				Headers: map[string][]string{"Accept": {"*/*"}}, Params: map[string]string{"path": ""}}},
		{name: "empty and null parts",
			in:   `{"Url":"http://h/","Method":"GET","Query":"","Headers":null}`,
			want: funchost.HTTPRequest{URL: "http://h/", Method: "GET"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got funchost.HTTPRequest
			require.NoError(t, json.Unmarshal([]byte(tc.in), &got))
			require.Equal(t, tc.want, got)

			// Marshalled, it takes the host's form again and reads back the same.
			b, err := json.Marshal(got)
			require.NoError(t, err)
			var wireForm struct {
				Query json.RawMessage
			}
			require.NoError(t, json.Unmarshal(b, &wireForm))
			require.Equal(t, byte('{'), wireForm.Query[0], "Query must be a JSON object, as the host writes it (GetQueryCollectionAsJObject): %s", b)
			var back funchost.HTTPRequest
			require.NoError(t, json.Unmarshal(b, &back))
			if got.Query == nil {
				back.Query = nil // an absent Query is written as {}
			}
			require.Equal(t, got, back)
		})
	}

	t.Run("bad header value", func(t *testing.T) {
		t.Parallel()
		var got funchost.HTTPRequest
		err := json.Unmarshal([]byte(`{"Url":"http://h/","Headers":{"Accept":7}}`), &got)
		require.ErrorContains(t, err, `header "Accept"`)
	})
}

func TestServer(t *testing.T) {
	t.Parallel()
	errStore := errors.New("store unavailable")
	var seen *funchost.Invocation
	srv := funchost.NewServer(nil, "/api/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	srv.Handle("reaper", func(_ context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		seen = inv
		return &funchost.Result{Outputs: map[string]any{"out": 1}, Logs: []string{"reaped: 1"}, ReturnValue: map[string]int{"reaped": 1}}, nil
	})
	srv.Handle("Quiet", func(context.Context, *funchost.Invocation) (*funchost.Result, error) { return nil, nil })
	srv.Handle("dispatch", func(context.Context, *funchost.Invocation) (*funchost.Result, error) {
		return nil, errStore
	})
	// An http function named as the route prefix: with forwarding the host
	// never invokes it by envelope, and /api is a forwarded request's path.
	srv.Handle("api", func(context.Context, *funchost.Invocation) (*funchost.Result, error) {
		return nil, errors.New("the host forwards http requests; it sends no envelope")
	})
	require.Equal(t, []string{"api", "dispatch", "quiet", "reaper"}, srv.Functions())

	timer, err := os.ReadFile(filepath.Join("testdata", "timer.json"))
	require.NoError(t, err)
	tests := []struct {
		name     string
		method   string
		path     string
		body     string
		status   int
		envelope bool     // the answer must be the Outputs/Logs/ReturnValue envelope
		logs     []string // substrings of Logs, in order
		want     string   // exact JSON, when set
		length   int64    // the request's Content-Length, when not the body's (-1: none sent)
	}{
		{name: "probe", method: "GET", path: "/", status: 200},
		{name: "invocation", method: "POST", path: "/reaper", body: string(timer), status: 200, envelope: true,
			want: `{"Outputs":{"out":1},"Logs":["reaped: 1"],"ReturnValue":{"reaped":1}}`},
		{name: "function names are case-insensitive", method: "POST", path: "/REAPER", body: string(timer), status: 200, envelope: true},
		{name: "nil result is still an envelope", method: "POST", path: "/quiet", body: `{"Data":{},"Metadata":{}}`, status: 200,
			envelope: true, want: `{"Outputs":{},"Logs":[],"ReturnValue":null}`},
		{name: "failed invocation", method: "POST", path: "/dispatch", body: `{"Data":{},"Metadata":{}}`, status: 500,
			envelope: true, logs: []string{"store unavailable"}},
		{name: "malformed envelope", method: "POST", path: "/reaper", body: `{"Data":`, status: 500,
			envelope: true, logs: []string{"decode invocation envelope"}},
		{name: "empty envelope", method: "POST", path: "/reaper", body: ``, status: 500,
			envelope: true, logs: []string{"decode invocation envelope"}},
		{name: "envelope of the wrong shape", method: "POST", path: "/reaper", body: `{"Data":[1]}`, status: 500,
			envelope: true, logs: []string{"decode invocation envelope"}},
		{name: "envelope without a length", method: "POST", path: "/reaper", body: string(timer), length: -1, status: 200, envelope: true,
			want: `{"Outputs":{"out":1},"Logs":["reaped: 1"],"ReturnValue":{"reaped":1}}`},
		{name: "envelope shorter than its length", method: "POST", path: "/reaper", body: string(timer), length: int64(len(timer)) + 10, status: 500,
			envelope: true, logs: []string{"read invocation envelope"}},
		{name: "unknown function", method: "POST", path: "/nope", body: `{}`, status: 404, envelope: true, logs: []string{"no function nope"}},
		{name: "invocations are POSTs", method: "GET", path: "/reaper", status: 404, envelope: true},
		{name: "forwarded request", method: "GET", path: "/api/healthz", status: 200, want: `{"status":"ok"}`},
		// The host forwards a request for the bare prefix at its own path.
		{name: "POST /api is a forwarded request", method: "POST", path: "/api", body: `{"a":1}`, status: 200, want: `{"status":"ok"}`},
		{name: "GET /api is a forwarded request", method: "GET", path: "/api", status: 200, want: `{"status":"ok"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: the cases share seen.
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.length != 0 {
				req.ContentLength = tc.length
			}
			srv.ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			require.NotZero(t, rec.Body.Len(), "the host fails on an empty body")
			if tc.want != "" {
				require.JSONEq(t, tc.want, rec.Body.String())
			}
			if !tc.envelope {
				return
			}
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var env map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &env))
			for _, key := range []string{"Outputs", "Logs", "ReturnValue"} {
				require.Contains(t, env, key)
			}
			require.Equal(t, byte('{'), env["Outputs"][0], "Outputs must be an object")
			var logs []string
			require.NoError(t, json.Unmarshal(env["Logs"], &logs), "Logs must be a list")
			joined := strings.Join(logs, "\n")
			for _, want := range tc.logs {
				require.Contains(t, joined, want)
			}
		})
	}
	require.NotNil(t, seen)
	require.Contains(t, seen.Data, "timer")
	var sys struct{ MethodName string }
	require.NoError(t, json.Unmarshal(seen.Metadata["sys"], &sys))
	require.Equal(t, "reaper", sys.MethodName)
}

func TestServerWithoutForwarding(t *testing.T) {
	t.Parallel()
	srv := funchost.NewServer(nil, "", nil)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/api/healthz", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.True(t, bytes.Contains(rec.Body.Bytes(), []byte(`"Logs":["no function api/healthz"]`)), rec.Body.String())
}

func TestBinaryBodyIsBase64OnTheWire(t *testing.T) {
	t.Parallel()
	// The sample's Body is the base64 of the bytes HTTPFunc must deliver.
	var hr funchost.HTTPRequest
	require.NoError(t, json.Unmarshal(envelope(t, "http_post_binary.json").Data["req"], &hr))
	var b64 string
	require.NoError(t, json.Unmarshal(hr.Body, &b64))
	raw, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	r, err := hr.Request(t.Context())
	require.NoError(t, err)
	got, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	require.Equal(t, raw, got)
	require.Equal(t, int64(len(raw)), r.ContentLength)
	require.Equal(t, "/api/echo", r.URL.Path)
}

// TestBodyIsBase64OnlyForOctetStreamAndMultipart: the host hands a body over
// base64-encoded only for application/octet-stream and multipart/*; every
// other body arrives as the text it read, and must be taken as it is.
func TestBodyIsBase64OnlyForOctetStreamAndMultipart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		contentType string
		want        string
	}{
		{contentType: "application/octet-stream", want: "hello"},
		{contentType: "Application/Octet-Stream", want: "hello"},
		{contentType: "multipart/form-data; boundary=x", want: "hello"},
		{contentType: "multipart/mixed", want: "hello"},
		{contentType: "image/png", want: "aGVsbG8="},
		{contentType: "application/zip", want: "aGVsbG8="},
		{contentType: "text/plain", want: "aGVsbG8="},
		{contentType: "text/markdown", want: "aGVsbG8="},
		{contentType: "", want: "aGVsbG8="},
	}
	for _, tc := range tests {
		t.Run(tc.contentType, func(t *testing.T) {
			t.Parallel()
			hr := funchost.HTTPRequest{URL: "http://h/api/x", Method: "POST", Body: json.RawMessage(`"aGVsbG8="`)}
			if tc.contentType != "" {
				hr.Headers = map[string][]string{"Content-Type": {tc.contentType}}
			}
			r, err := hr.Request(t.Context())
			require.NoError(t, err)
			got, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			require.Equal(t, tc.want == "hello", funchost.Base64Body(tc.contentType))
		})
	}
}

// TestFailedInvocationIsLoggedByTheHandler: the host drops the Logs of a
// non-2xx answer (it checks the status before the body), so the reason for
// a failed invocation reaches the host's logs only through the handler's
// own log (stdout, which the host captures).
func TestFailedInvocationIsLoggedByTheHandler(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	srv := funchost.NewServer(slog.New(slog.NewJSONHandler(&out, nil)), "", nil)
	srv.Handle("dispatch", func(context.Context, *funchost.Invocation) (*funchost.Result, error) {
		return nil, errors.New("store unavailable")
	})
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("POST", "/dispatch", strings.NewReader(`{"Data":{},"Metadata":{}}`)))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, out.String(), `"function":"dispatch"`)
	require.Contains(t, out.String(), "store unavailable", "the reason must be in the handler's log, not only in the Logs the host drops")
	require.Contains(t, out.String(), `"level":"ERROR"`)
}
