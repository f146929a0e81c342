// Package client is fleetctl's HTTP client for the /api/fleet contract
// (API.md). It speaks JSON over HTTP only and links the domain types
// (shared/fleet) for decoding, never the coordinator, so the CLI stays a
// client of the same API every other tool uses.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Client calls one fleet coordinator as one operator.
type Client struct {
	// BaseURL is the coordinator's root, e.g. http://127.0.0.1:7071; the
	// API lives under /api.
	BaseURL string
	// Token is the operator's bearer token. It is only ever put in the
	// Authorization header, never in a URL or an error.
	Token string
	// Product is sent as x-product-id when set.
	Product string
	HTTP    *http.Client
}

// Request is one API call.
type Request struct {
	Method string
	// Path is below /api/fleet, e.g. "/jobs/abc"; it may carry a query.
	Path        string
	Query       url.Values
	Body        []byte
	ContentType string // default application/json when Body is set
	// Accept overrides the default application/json (SSE streams).
	Accept string
}

// Response is a successful answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Error is an API error answer ({"error": {...}}) or a transport failure
// (Status 0, Code unavailable).
type Error struct {
	Status  int
	Code    fleet.Code
	Message string
	Field   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d ", e.Status)
	}
	b.WriteString(string(e.Code))
	if e.Field != "" {
		b.WriteString(" (" + e.Field + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// CodeOf is the API error code of err, "" when err is not an *Error.
func CodeOf(err error) fleet.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// URL is the absolute URL of an API path below /api/fleet.
func (c *Client) URL(path string, q url.Values) string {
	u := strings.TrimRight(c.BaseURL, "/") + "/api/fleet" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// Do sends req and returns a 2xx answer, or an *Error.
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	resp, err := c.open(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &Error{Code: fleet.CodeUnavailable, Message: "reading the answer: " + err.Error()}
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// Open sends req and returns the open response of a 2xx answer (for
// streams; the caller closes its body), or an *Error.
func (c *Client) Open(ctx context.Context, req Request) (*http.Response, error) {
	return c.open(ctx, req)
}

func (c *Client) open(ctx context.Context, req Request) (*http.Response, error) {
	return c.openHeader(ctx, req, "", "")
}

// openHeader is open with one extra request header (name "" for none).
func (c *Client) openHeader(ctx context.Context, req Request, name, value string) (*http.Response, error) {
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, c.URL(req.Path, req.Query), body)
	if err != nil {
		return nil, &Error{Code: fleet.CodeInvalid, Message: err.Error()}
	}
	if c.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Product != "" {
		hr.Header.Set("X-Product-Id", c.Product)
	}
	accept := req.Accept
	if accept == "" {
		accept = "application/json"
	}
	hr.Header.Set("Accept", accept)
	if name != "" {
		hr.Header.Set(name, value)
	}
	if req.Body != nil {
		ct := req.ContentType
		if ct == "" {
			ct = "application/json"
		}
		hr.Header.Set("Content-Type", ct)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(hr)
	if err != nil {
		// The URL holds no secret (the token is a header), so naming it
		// helps without leaking anything.
		return nil, &Error{Code: fleet.CodeUnavailable, Message: fmt.Sprintf("%s %s: %v", req.Method, c.URL(req.Path, nil), unwrapURLError(err))}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return nil, decodeError(resp.StatusCode, b)
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// decodeError reads the API's error shape; an answer without it (a proxy's
// HTML page, say) is classified by its status alone.
func decodeError(status int, b []byte) *Error {
	var env struct {
		Error struct {
			Code    fleet.Code `json:"code"`
			Message string     `json:"message"`
			Field   string     `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		return &Error{Status: status, Code: env.Error.Code, Message: env.Error.Message, Field: env.Error.Field}
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &Error{Status: status, Code: codeForStatus(status), Message: msg}
}

func codeForStatus(status int) fleet.Code {
	switch {
	case status == http.StatusUnauthorized:
		return fleet.CodeUnauthenticated
	case status == http.StatusForbidden:
		return fleet.CodeForbidden
	case status == http.StatusNotFound:
		return fleet.CodeNotFound
	case status == http.StatusConflict:
		return fleet.CodeConflict
	case status == http.StatusTooManyRequests:
		return fleet.CodeThrottled
	case status >= 500:
		return fleet.CodeUnavailable
	default:
		return fleet.CodeInvalid
	}
}

// JSON calls the API and decodes the answer into out (when non-nil); it
// returns the raw body too, so `-o json` can print what the server sent,
// fields this client does not know included.
func (c *Client) JSON(ctx context.Context, req Request, out any) ([]byte, error) {
	resp, err := c.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	if out != nil && len(resp.Body) > 0 {
		if err := json.Unmarshal(resp.Body, out); err != nil {
			return nil, &Error{Status: resp.Status, Code: fleet.CodeUnavailable, Message: "undecodable answer: " + err.Error()}
		}
	}
	return resp.Body, nil
}
