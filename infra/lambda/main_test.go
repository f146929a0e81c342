package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/local/hostemu"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

const token = "fop_lambda-test-operator-token-0123456789"

// testApp is the Lambda handler over a real app on a temp SQLite store, and
// the coordinator behind it. Leases last a nanosecond, so a claimed job is at
// once the reaper's.
func testApp(t *testing.T) (*handler, *coord.Coordinator) {
	t.Helper()
	a, h, err := open(t.Context(), config.Lookup{Values: map[string]string{
		config.DataDir: t.TempDir(), config.OperatorToken: token, config.LogLevel: "error", config.LeaseTTL: "1ns",
	}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	h.getenv = func(string) string { return "" }
	return h, a.Coord
}

// httpEvent is an API Gateway HTTP API payload 2.0 event as the gateway
// sends it: lower-case header names, cookies split out, the query raw.
func httpEvent(method, rawPath, rawQuery string, headers map[string]string, body string, b64 bool) events.APIGatewayV2HTTPRequest {
	h := map[string]string{
		"accept": "*/*", "host": "r3pmxmplak.execute-api.eu-west-1.amazonaws.com", "user-agent": "curl/8.5.0",
		"x-amzn-trace-id": "Root=1-6745f1c3-1f2e3d4c5b6a798877665544", "x-forwarded-for": "203.0.113.7",
		"x-forwarded-port": "443", "x-forwarded-proto": "https",
	}
	for k, v := range headers {
		h[k] = v
	}
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "ANY /api/{proxy+}", RawPath: rawPath, RawQueryString: rawQuery,
		Headers: h, Body: body, IsBase64Encoded: b64,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: "ANY /api/{proxy+}", AccountID: "123456789012", Stage: "$default", RequestID: "JKJaXmPLvHcESHA=",
			APIID: "r3pmxmplak", DomainName: "r3pmxmplak.execute-api.eu-west-1.amazonaws.com", DomainPrefix: "r3pmxmplak",
			Time: "02/Nov/2026:10:15:00 +0000", TimeEpoch: 1793009700000,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: rawPath, Protocol: "HTTP/1.1",
				SourceIP: "203.0.113.7", UserAgent: "curl/8.5.0"},
		},
	}
}

func invoke(t *testing.T, h *handler, ev any) events.APIGatewayV2HTTPResponse {
	t.Helper()
	payload, err := json.Marshal(ev)
	require.NoError(t, err)
	out, err := h.Invoke(t.Context(), payload)
	require.NoError(t, err)
	var res events.APIGatewayV2HTTPResponse
	require.NoError(t, json.Unmarshal(out, &res))
	return res
}

func TestHTTPEvents(t *testing.T) {
	t.Parallel()
	h, _ := testApp(t)
	auth := map[string]string{"authorization": "Bearer " + token}
	withAuth := func(kv ...string) map[string]string {
		m := map[string]string{"authorization": "Bearer " + token}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	manifest := "---\nrepo: notes\ntitle: %s\ncapabilities: [engine:claude]\n---\nDo the thing.\n"
	jsonManifest, err := json.Marshal(map[string]string{"manifest": strings.Replace(manifest, "%s", "from JSON", 1)})
	require.NoError(t, err)
	named := httpEvent("GET", "/prod/api/healthz", "", nil, "", false)
	named.RequestContext.Stage = "prod"

	steps := []struct {
		name   string
		ev     any
		status int
		check  func(t *testing.T, res events.APIGatewayV2HTTPResponse)
	}{
		{name: "GET healthz", ev: httpEvent("GET", "/api/healthz", "", nil, "", false), status: 200,
			check: func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
				require.JSONEq(t, `{"status":"ok"}`, res.Body)
				require.False(t, res.IsBase64Encoded)
			}},
		{name: "healthz on a named stage", ev: named, status: 200},
		{name: "healthz through a Function URL", status: 200, ev: events.LambdaFunctionURLRequest{
			Version: "2.0", RawPath: "/api/healthz", Headers: map[string]string{"host": "abcdefg.lambda-url.eu-west-1.on.aws"},
			RequestContext: events.LambdaFunctionURLRequestContext{AccountID: "123456789012", RequestID: "b6e1c3a2",
				APIID: "abcdefg", DomainName: "abcdefg.lambda-url.eu-west-1.on.aws", DomainPrefix: "abcdefg",
				HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{Method: "GET", Path: "/api/healthz", Protocol: "HTTP/1.1", SourceIP: "203.0.113.7"}},
		}},
		{name: "PUT product, JSON body", status: 200,
			ev: httpEvent("PUT", "/api/fleet/products/p1", "", withAuth("content-type", "application/json"), `{"name":"Product one","repos":["notes"]}`, false),
			check: func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
				var p fleet.Product
				require.NoError(t, json.Unmarshal([]byte(res.Body), &p))
				require.Equal(t, []string{"notes"}, p.Repos)
			}},
		{name: "POST job, JSON body", status: 201,
			ev: httpEvent("POST", "/api/fleet/jobs", "", withAuth("content-type", "application/json", "x-product-id", "p1"), string(jsonManifest), false),
			check: func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
				var j fleet.Job
				require.NoError(t, json.Unmarshal([]byte(res.Body), &j))
				require.Equal(t, "from JSON", j.Title)
				require.Equal(t, "/api/fleet/jobs/"+j.ID, res.Headers["Location"])
			}},
		{name: "POST job, base64 body", status: 201,
			ev: httpEvent("POST", "/api/fleet/jobs", "", withAuth("content-type", "text/markdown; charset=utf-8", "x-product-id", "p1"),
				base64.StdEncoding.EncodeToString([]byte(strings.Replace(manifest, "%s", "from base64", 1))), true),
			check: func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
				var j fleet.Job
				require.NoError(t, json.Unmarshal([]byte(res.Body), &j))
				require.Equal(t, "from base64", j.Title)
			}},
		{name: "list with a raw query", status: 200,
			ev: httpEvent("GET", "/api/fleet/jobs", "stage=queued&limit=1", withAuth("x-product-id", "p1"), "", false),
			check: func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
				var page struct {
					Items  []fleet.Job
					Cursor string
				}
				require.NoError(t, json.Unmarshal([]byte(res.Body), &page))
				require.Len(t, page.Items, 1, "limit=1 must reach the API")
				require.NotEmpty(t, page.Cursor, "two jobs, one per page")
			}},
		{name: "no token", status: 401, ev: httpEvent("GET", "/api/fleet/jobs", "", map[string]string{"x-product-id": "p1"}, "", false)},
		{name: "unknown query parameter", status: 400, ev: httpEvent("GET", "/api/fleet/jobs", "colour=red", withAuth("x-product-id", "p1"), "", false)},
		{name: "a path that is not one", status: 400, ev: httpEvent("GET", "/api/%zz", "", auth, "", false),
			check: func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
				require.Contains(t, res.Body, `"code":"invalid_argument"`)
			}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			res := invoke(t, h, st.ev)
			require.Equal(t, st.status, res.StatusCode, res.Body)
			require.True(t, strings.HasPrefix(res.Headers["Content-Type"], "application/json"), "Content-Type %q", res.Headers["Content-Type"])
			if st.check != nil {
				st.check(t, res)
			}
		})
	}
}

// TestServeHTTPTranslation checks the mapping both ways against a handler
// that reports what it got and answers with what payload 2.0 must encode.
func TestServeHTTPTranslation(t *testing.T) {
	t.Parallel()
	png := []byte{0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff}
	var got *http.Request
	var gotBody []byte
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		gotBody, _ = io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/api/image":
			w.Header().Set("Content-Type", "image/png")
			http.SetCookie(w, &http.Cookie{Name: "a", Value: "1", Path: "/"})
			http.SetCookie(w, &http.Cookie{Name: "b", Value: "2", HttpOnly: true})
			w.Header().Add("Vary", "Accept")
			w.Header().Add("Vary", "Cookie")
			_, _ = w.Write(png)
		case "/api/sniffed":
			_, _ = w.Write([]byte("<html><body>hi</body></html>"))
		case "/api/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte("héllo"))
		}
	})

	t.Run("binary body, cookies, repeated headers", func(t *testing.T) {
		ev := httpEvent("POST", "/api/image", "x=1&x=2&y=%C3%A9", map[string]string{"content-type": "application/octet-stream"},
			base64.StdEncoding.EncodeToString(png), true)
		ev.Cookies = []string{"session=abc", "theme=dark"}
		res, err := serveHTTP(t.Context(), h, ev)
		require.NoError(t, err)
		require.Equal(t, 200, res.StatusCode)
		require.True(t, res.IsBase64Encoded)
		body, err := base64.StdEncoding.DecodeString(res.Body)
		require.NoError(t, err)
		require.Equal(t, png, body)
		require.Equal(t, []string{"a=1; Path=/", "b=2; HttpOnly"}, res.Cookies)
		require.NotContains(t, res.Headers, "Set-Cookie")
		require.Equal(t, "Accept,Cookie", res.Headers["Vary"])

		require.Equal(t, "POST", got.Method)
		require.Equal(t, png, gotBody)
		require.Equal(t, int64(len(png)), got.ContentLength)
		require.Equal(t, []string{"1", "2"}, got.URL.Query()["x"])
		require.Equal(t, "é", got.URL.Query().Get("y"))
		require.Equal(t, "/api/image?x=1&x=2&y=%C3%A9", got.RequestURI)
		require.Equal(t, "session=abc; theme=dark", got.Header.Get("Cookie"))
		c, err := got.Cookie("theme")
		require.NoError(t, err)
		require.Equal(t, "dark", c.Value)
		require.Equal(t, "r3pmxmplak.execute-api.eu-west-1.amazonaws.com", got.Host)
		require.Equal(t, "203.0.113.7:0", got.RemoteAddr)
		require.Equal(t, "curl/8.5.0", got.Header.Get("User-Agent"))
	})

	t.Run("text body and status", func(t *testing.T) {
		res, err := serveHTTP(t.Context(), h, httpEvent("GET", "/api/other", "", nil, "", false))
		require.NoError(t, err)
		require.Equal(t, http.StatusTeapot, res.StatusCode)
		require.False(t, res.IsBase64Encoded)
		require.Equal(t, "héllo", res.Body)
		require.Empty(t, gotBody)
	})

	t.Run("content type sniffed as net/http would", func(t *testing.T) {
		res, err := serveHTTP(t.Context(), h, httpEvent("GET", "/api/sniffed", "", nil, "", false))
		require.NoError(t, err)
		require.Equal(t, "text/html; charset=utf-8", res.Headers["Content-Type"])
		require.False(t, res.IsBase64Encoded)
	})

	t.Run("no body", func(t *testing.T) {
		res, err := serveHTTP(t.Context(), h, httpEvent("DELETE", "/api/empty", "", nil, "", false))
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, res.StatusCode)
		require.Empty(t, res.Body)
		require.False(t, res.IsBase64Encoded)
	})

	t.Run("escaped path and no host header", func(t *testing.T) {
		ev := httpEvent("GET", "/api/fleet/jobs/a%2Fb", "", nil, "", false)
		delete(ev.Headers, "host")
		_, err := serveHTTP(t.Context(), h, ev)
		require.NoError(t, err)
		require.Equal(t, "/api/fleet/jobs/a/b", got.URL.Path)
		require.Equal(t, "/api/fleet/jobs/a%2Fb", got.URL.EscapedPath())
		require.Equal(t, "r3pmxmplak.execute-api.eu-west-1.amazonaws.com", got.Host, "falls back to the domain name")
	})

	t.Run("body marked base64 that is not", func(t *testing.T) {
		_, err := serveHTTP(t.Context(), h, httpEvent("POST", "/api/x", "", nil, "%%%", true))
		require.ErrorContains(t, err, "base64")
	})
}

// scheduled is an EventBridge schedule rule's event.
func scheduled(rule string, at time.Time) events.EventBridgeEvent {
	return events.EventBridgeEvent{
		Version: "0", ID: "89d1a02d-5ec7-412e-82f5-13505f849b41", DetailType: scheduledEvent, Source: "aws.events",
		AccountID: "123456789012", Time: at, Region: "eu-west-1",
		Resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/" + rule}, Detail: json.RawMessage(`{}`),
	}
}

func TestTimerFor(t *testing.T) {
	t.Parallel()
	env := map[string]string{"FLEET_LAMBDA_TIMER_NIGHTLY_GC": "gcsweep", "FLEET_LAMBDA_TIMER_FLEET_PROD_REAPER": "redispatch"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name      string
		resources []string
		want      string
		wantErr   string
	}{
		{name: "rule named after the function", resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/reaper"}, want: "reaper"},
		{name: "suffix names the function", resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/fleet-staging-redispatch"}, want: "redispatch"},
		{name: "variable wins over the suffix", resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/fleet-prod-reaper"}, want: "redispatch"},
		{name: "variable for a free-form name", resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/nightly.gc"}, want: "gcsweep"},
		{name: "rule on a custom bus", resources: []string{"arn:aws:events:eu-west-1:123456789012:rule/fleet-bus/fleet-gcsweep"}, want: "gcsweep"},
		{name: "no rule", resources: []string{"arn:aws:scheduler:eu-west-1:123456789012:schedule/default/x"}, wantErr: "names no rule ARN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := scheduled("", time.Time{})
			ev.Resources = tc.resources
			got, err := timerFor(ev, getenv)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, errUnsupported)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, "FLEET_LAMBDA_TIMER_FLEET_PROD_REAPER_2", envName("fleet.prod-Reaper_2"))
}

// TestEveryTimerFunctionIsWired holds timerFuncs against the app's
// function.json files: a new timer function must be reachable here too.
func TestEveryTimerFunctionIsWired(t *testing.T) {
	t.Parallel()
	fa, err := hostemu.LoadApp(filepath.Join("..", ".."))
	require.NoError(t, err)
	funcs := timerFuncs(nil, nil)
	var timers []string
	for _, fn := range fa.Functions {
		trig, _ := fn.Trigger()
		if !strings.EqualFold(trig.Type, "timerTrigger") {
			continue
		}
		timers = append(timers, fn.Name)
		require.Contains(t, funcs, fn.Name, "timer function %s has no Lambda mapping", fn.Name)
		require.Equal(t, timerBinding, trig.Name, "%s/function.json names its timer binding differently", fn.Name)
	}
	require.Len(t, funcs, len(timers), "timerFuncs has functions the app does not")
}

func TestScheduledEvents(t *testing.T) {
	t.Parallel()
	h, c := testApp(t)
	now := time.Date(2026, 11, 2, 10, 15, 3, 0, time.UTC)
	h.now = func() time.Time { return now }
	ctx := t.Context()

	// A claimed job whose lease (1 ns) has run out: the reaper's work.
	_, err := c.PutProduct(ctx, "p1", "Product one", []string{"notes"})
	require.NoError(t, err)
	caps := []string{"os:linux", "engine:claude"}
	_, secret, err := c.Enroll(ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: caps})
	require.NoError(t, err)
	tok, err := c.AuthenticateFactory(ctx, secret)
	require.NoError(t, err)
	_, err = c.Heartbeat(ctx, tok, catalog.Heartbeat{Capabilities: caps, Repos: []string{"notes"}})
	require.NoError(t, err)
	j, _, err := c.Submit(ctx, "p1", []byte("---\nrepo: notes\ntitle: t\ncapabilities: [engine:claude]\n---\nx\n"))
	require.NoError(t, err)
	claimed, err := c.Claim(ctx, coord.ClaimRequest{Token: tok})
	require.NoError(t, err)
	require.NotNil(t, claimed)

	run := func(t *testing.T, ev events.EventBridgeEvent) (struct {
		Logs        []string
		ReturnValue map[string]int
	}, error) {
		payload, err := json.Marshal(ev)
		require.NoError(t, err)
		out, err := h.Invoke(ctx, payload)
		var res struct {
			Logs        []string
			ReturnValue map[string]int
		}
		if err == nil {
			require.NoError(t, json.Unmarshal(out, &res))
		}
		return res, err
	}

	res, err := run(t, scheduled("fleet-prod-reaper", now.Add(-3*time.Second)))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"reaped": 1}, res.ReturnValue)
	require.Equal(t, []string{"reaped: 1"}, res.Logs)
	after, err := c.GetJob(ctx, "p1", j.ID)
	require.NoError(t, err)
	require.Equal(t, fleet.StageQueued, after.Stage, "the reaper put the job back")

	for _, name := range []string{"redispatch", "gcsweep"} {
		t.Run(name, func(t *testing.T) {
			_, err := run(t, scheduled("fleet-"+name, now))
			require.NoError(t, err)
		})
	}
	t.Run("prune", func(t *testing.T) {
		res, err := run(t, scheduled("fleet-prune", now))
		require.NoError(t, err)
		require.Equal(t, map[string]int{"factories_pruned": 0}, res.ReturnValue, "f1 heartbeat just now")
	})

	t.Run("late event is past due", func(t *testing.T) {
		res, err := run(t, scheduled("reaper", now.Add(-5*time.Minute)))
		require.NoError(t, err)
		require.Equal(t, "timer is past due: the previous occurrence was missed", res.Logs[0])
	})

	t.Run("rule naming no timer", func(t *testing.T) {
		_, err := run(t, scheduled("fleet-nightly", now))
		require.ErrorIs(t, err, errUnsupported)
		require.ErrorContains(t, err, `"nightly"`)
		require.ErrorContains(t, err, "echosweep, forgesweep, gcsweep, prune, reaper, redispatch")
	})
}

func TestUnsupportedEvents(t *testing.T) {
	t.Parallel()
	h := &handler{}
	tests := []struct {
		name    string
		payload string
	}{
		{name: "SQS", payload: `{"Records":[{"messageId":"1","eventSource":"aws:sqs","body":"x"}]}`},
		{name: "REST API (payload 1.0)", payload: `{"resource":"/{proxy+}","path":"/api/healthz","httpMethod":"GET"}`},
		{name: "other EventBridge event", payload: `{"version":"0","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2"}`},
		{name: "not an object", payload: `"ping"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := h.Invoke(t.Context(), []byte(tc.payload))
			require.ErrorIs(t, err, errUnsupported)
		})
	}
}

func TestOpenNeedsOperatorToken(t *testing.T) {
	t.Parallel()
	_, _, err := open(t.Context(), config.Lookup{Values: map[string]string{config.DataDir: t.TempDir(), config.LogLevel: "error"}})
	require.ErrorContains(t, err, config.OperatorToken)
}

// TestResponseBufferFlushes: the buffer takes a flush (a no-op) rather
// than refusing it; the API's streams end at a refused flush, so behind
// this front door a stream with nothing new answered at once, empty,
// instead of waiting for a change (its EventSource reconnected in a loop).
func TestResponseBufferFlushes(t *testing.T) {
	t.Parallel()
	w := newResponseBuffer()
	_, err := w.Write([]byte("data: x\n\n"))
	require.NoError(t, err)
	require.NoError(t, http.NewResponseController(w).Flush())
	require.Equal(t, "data: x\n\n", w.body.String(), "nothing is handed on early")
}
