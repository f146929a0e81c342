package funchost

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HTTPRequest is an httpTrigger payload when the host does not forward the
// request: Data.<name> = {Url, Method, Query, Headers, Params, Identities,
// Body}. Body is present only when the request had one.
type HTTPRequest struct {
	URL        string              `json:"Url"`
	Method     string              `json:"Method"`
	Query      map[string]string   `json:"Query"`
	Headers    map[string][]string `json:"Headers"`
	Params     map[string]string   `json:"Params"`
	Identities json.RawMessage     `json:"Identities,omitempty"`
	Body       json.RawMessage     `json:"Body,omitempty"`
}

// httpRequestWire is HTTPRequest as the host writes it: Query, Headers and
// Params are JSON objects (GetQueryCollectionAsJObject in the host's
// HttpRequestExtensions), Query never absent.
type httpRequestWire struct {
	URL        string              `json:"Url"`
	Method     string              `json:"Method"`
	Query      map[string]string   `json:"Query"`
	Headers    map[string][]string `json:"Headers"`
	Params     map[string]string   `json:"Params"`
	Identities json.RawMessage     `json:"Identities,omitempty"`
	Body       json.RawMessage     `json:"Body,omitempty"`
}

// MarshalJSON writes the request as the host does, so the local emulator
// hands the handler the same shapes Azure does.
func (hr HTTPRequest) MarshalJSON() ([]byte, error) {
	q := hr.Query
	if q == nil {
		q = map[string]string{}
	}
	return json.Marshal(httpRequestWire{URL: hr.URL, Method: hr.Method, Query: q, Headers: hr.Headers,
		Params: hr.Params, Identities: hr.Identities, Body: hr.Body})
}

// UnmarshalJSON reads Query, Headers and Params either as objects or as
// JSON-encoded strings: current hosts write objects, older ones wrote Query
// string-encoded (GetQueryCollectionAsString). A header may carry one value
// or a list.
func (hr *HTTPRequest) UnmarshalJSON(b []byte) error {
	var raw struct {
		URL        string          `json:"Url"`
		Method     string          `json:"Method"`
		Query      json.RawMessage `json:"Query"`
		Headers    json.RawMessage `json:"Headers"`
		Params     json.RawMessage `json:"Params"`
		Identities json.RawMessage `json:"Identities"`
		Body       json.RawMessage `json:"Body"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*hr = HTTPRequest{URL: raw.URL, Method: raw.Method, Identities: raw.Identities, Body: raw.Body}
	if err := decodeObject("Query", raw.Query, &hr.Query); err != nil {
		return err
	}
	if err := decodeObject("Params", raw.Params, &hr.Params); err != nil {
		return err
	}
	var headers map[string]json.RawMessage
	if err := decodeObject("Headers", raw.Headers, &headers); err != nil {
		return err
	}
	if len(headers) > 0 {
		hr.Headers = make(map[string][]string, len(headers))
	}
	for name, v := range headers {
		var one string
		if err := json.Unmarshal(v, &one); err == nil {
			hr.Headers[name] = []string{one}
			continue
		}
		var many []string
		if err := json.Unmarshal(v, &many); err != nil {
			return fmt.Errorf("header %q: want a string or a list of strings", name)
		}
		hr.Headers[name] = many
	}
	return nil
}

// decodeObject decodes a JSON object that may arrive string-encoded; an
// absent, null or empty value leaves dst alone.
func decodeObject(field string, raw json.RawMessage, dst any) error {
	inner, err := Unwrap(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if len(inner) == 0 || string(inner) == "null" || string(inner) == `""` {
		return nil
	}
	if err := json.Unmarshal(inner, dst); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// HTTPResponse is the http output binding: Outputs.<name>.
type HTTPResponse struct {
	StatusCode string            `json:"statusCode"`
	Body       string            `json:"body"`
	Headers    map[string]string `json:"headers"`
}

// Base64Body reports whether the host hands a body of this content type
// over base64-encoded: only application/octet-stream and multipart/*
// (IsMediaTypeOctetOrMultipart in the host); every other body arrives as the
// text the host read from it.
func Base64Body(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/octet-stream" || strings.Contains(mt, "multipart/")
}

// Request rebuilds the *http.Request an envelope describes.
func (hr *HTTPRequest) Request(ctx context.Context) (*http.Request, error) {
	u, err := url.Parse(hr.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: Url %q: %v", ErrBadPayload, hr.URL, err)
	}
	var body []byte
	if len(hr.Body) > 0 && string(hr.Body) != "null" {
		var s string
		if err := json.Unmarshal(hr.Body, &s); err == nil {
			body = []byte(s)
			if ct := firstHeader(hr.Headers, "Content-Type"); Base64Body(ct) {
				if b, err := base64.StdEncoding.DecodeString(s); err == nil {
					body = b
				}
			}
		} else {
			// The host may hand a JSON body over already parsed.
			body = hr.Body
		}
	}
	method := strings.ToUpper(hr.Method)
	if method == "" {
		method = http.MethodGet
	}
	r, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	for k, vs := range hr.Headers {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.RequestURI = u.RequestURI()
	return r, nil
}

func firstHeader(h map[string][]string, name string) string {
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// HTTPFunc adapts an http.Handler to an httpTrigger function in envelope
// mode: the request comes from Data.<in>, the response goes to Outputs.<out>.
func HTTPFunc(h http.Handler, in, out string) Func {
	return func(ctx context.Context, inv *Invocation) (*Result, error) {
		raw, ok := inv.Data[in]
		if !ok {
			return nil, fmt.Errorf("%w: no %q in Data", ErrBadPayload, in)
		}
		var hr HTTPRequest
		if err := json.Unmarshal(raw, &hr); err != nil {
			inner, uerr := Unwrap(raw)
			if uerr != nil || json.Unmarshal(inner, &hr) != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrBadPayload, in, err)
			}
		}
		req, err := hr.Request(ctx)
		if err != nil {
			return nil, err
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		headers := map[string]string{}
		for k, vs := range rec.Header() {
			headers[k] = strings.Join(vs, ", ")
		}
		res := HTTPResponse{StatusCode: strconv.Itoa(rec.Code), Body: rec.Body.String(), Headers: headers}
		return &Result{Outputs: map[string]any{out: res}, Logs: []string{}}, nil
	}
}

// EndRequestsOnShutdown makes srv's Shutdown end the requests still in
// flight grace after it began: http.Server.Shutdown waits for every active
// connection, and a stream (SSE, a long poll) never ends by itself, so an
// open console tab or `fleetctl top` would hold a Ctrl-C for as long as the
// stream's time limit. Short requests get grace to finish; streams see
// their context end and return, and their clients reconnect elsewhere.
//
// Connections that never sent a request are closed then too: Shutdown
// takes one for busy until it is 5 s old (net/http, issue 22682), and a
// client's pool opens such spare connections under load (a dial that lost
// the race to a connection freed meanwhile), so a Ctrl-C took 5 s more.
func EndRequestsOnShutdown(srv *http.Server, grace time.Duration) {
	base, end := context.WithCancel(context.Background())
	srv.BaseContext = func(net.Listener) context.Context { return base }
	var (
		mu     sync.Mutex
		unused = map[net.Conn]struct{}{}
	)
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if st == http.StateNew {
			unused[c] = struct{}{}
		} else {
			delete(unused, c)
		}
	}
	srv.RegisterOnShutdown(func() {
		time.AfterFunc(grace, func() {
			end()
			mu.Lock()
			defer mu.Unlock()
			for c := range unused {
				_ = c.Close()
			}
		})
	})
}

// ShutdownGrace is how long requests in flight may run on once a server
// shuts down (EndRequestsOnShutdown).
const ShutdownGrace = 300 * time.Millisecond
