package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/retry"
)

// Header names of the contract.
const (
	HeaderProduct     = "X-Product-Id"
	HeaderRequestID   = "X-Request-Id"
	HeaderLastEventID = "Last-Event-ID"
	// HeaderPrefer carries PreferMinimal (RFC 7240); the answer then says
	// HeaderPreferenceApplied when it honoured it.
	HeaderPrefer            = "Prefer"
	HeaderPreferenceApplied = "Preference-Applied"
	// PreferMinimal asks for 204 instead of the resource, on the routes that
	// take it (the holder's PATCH): a factory that moves its job along has
	// no use for the whole job back.
	PreferMinimal = "return=minimal"
)

// Client defaults.
const (
	DefaultAttempts = 4
	DefaultBackoff  = 250 * time.Millisecond
	DefaultTimeout  = 30 * time.Second
	// maxAnswer bounds a JSON answer read whole.
	maxAnswer = 8 << 20
)

// Config configures a Client.
type Config struct {
	// BaseURL is the coordinator's root, e.g. http://127.0.0.1:7071; the
	// API lives under /api.
	BaseURL string
	// Token is the bearer token. It is only ever put in the Authorization
	// header, never in a URL or an error.
	Token string
	// Product is sent as x-product-id on calls that name no product of
	// their own.
	Product string
	// HTTPClient sends the requests; nil is one with DefaultTimeout. Streams
	// and uploads use its transport without the whole-request timeout.
	HTTPClient *http.Client
	// Attempts is how many times a request that is safe to repeat is tried
	// when the network fails or the API answers 429 or 5xx; 0 means
	// DefaultAttempts, 1 never retries.
	Attempts int
	// Backoff is the first retry delay; it doubles with jitter, and a
	// longer Retry-After wins. 0 means DefaultBackoff.
	Backoff time.Duration
	// Timers paces the waits between tries; nil is the wall clock.
	Timers clock.Timers
}

// Client calls the /fleet API. It is safe for concurrent use.
type Client struct {
	base    string // .../api/fleet
	root    string // .../api
	token   string
	product string
	http    *http.Client
	long    *http.Client // no whole-request timeout: streams, uploads
	timers  clock.Timers
	// policy paces the retries of requests that are safe to repeat.
	policy retry.Policy
}

// New returns a client for cfg.
func New(cfg Config) *Client {
	c := &Client{token: cfg.Token, product: cfg.Product, http: cfg.HTTPClient, timers: cfg.Timers}
	c.root = strings.TrimRight(cfg.BaseURL, "/") + "/api"
	c.base = c.root + "/fleet"
	if c.http == nil {
		c.http = &http.Client{Timeout: DefaultTimeout}
	}
	c.long = c.http
	if c.http.Timeout != 0 {
		long := *c.http
		long.Timeout = 0
		c.long = &long
	}
	if c.timers == nil {
		c.timers = clock.System{}
	}
	// Exponential from Backoff with up to half of it again as jitter, so
	// that clients that failed together do not retry together; a server's
	// Retry-After wins (*Error is a retry.Hinted).
	c.policy = retry.Policy{Initial: cmp.Or(cfg.Backoff, DefaultBackoff), Jitter: retry.Jitter{Min: 1, Max: 1.5},
		Attempts: cmp.Or(max(cfg.Attempts, 0), DefaultAttempts), Retryable: transient}
	return c
}

// Request is one call of the API.
type Request struct {
	Method string
	// Path is below /api/fleet, e.g. "/jobs/abc".
	Path  string
	Query url.Values
	// Product is sent as x-product-id; "" means the client's default
	// (see Exact).
	Product string
	// Exact sends Product as it is, none when it is "": a job route whose
	// job may be of any product the token sees.
	Exact bool
	// Body is sent as is; JSON unless ContentType says otherwise.
	Body        []byte
	ContentType string
	// Open, instead of Body, opens a body of the given length for each try
	// (a file streamed from disk).
	Open func() (io.ReadCloser, int64, error)
	// Accept overrides the default application/json.
	Accept string
	// Header holds more request headers (Last-Event-ID, Idempotency-Key,
	// Prefer).
	Header http.Header
	// Retry says repeating the request is safe: a transient failure is
	// tried again, up to the client's Attempts.
	Retry bool
}

// JSONBody encodes v as a request body.
func JSONBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}

// Response is a successful answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// URL is the absolute URL of an API path below /api/fleet.
func (c *Client) URL(path string, q url.Values) string {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// Do sends req and reads a 2xx answer whole; any other answer is an
// *Error.
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	var out *Response
	err := c.retry(ctx, req, func() error {
		resp, err := c.send(ctx, c.http, req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if err != nil {
			return &Error{Code: errCodeUnavailable, Message: "reading the answer: " + err.Error(), Err: err}
		}
		out = &Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
		return nil
	})
	return out, err
}

// JSON calls the API and decodes the answer into out (when non-nil and
// the answer has a body). It returns the raw body too, so a caller can
// show what the server sent, fields this client does not know included.
func (c *Client) JSON(ctx context.Context, req Request, out any) ([]byte, error) {
	resp, err := c.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	if out != nil && len(resp.Body) > 0 && resp.Status != http.StatusNoContent {
		if err := jsonUnmarshal(resp.Body, out); err != nil {
			return nil, &Error{Status: resp.Status, Code: errCodeUnavailable, Message: "undecodable answer: " + err.Error(), Err: err}
		}
	}
	return resp.Body, nil
}

// Open sends req and returns the open 2xx response (a stream or a
// download; the caller closes its body), or an *Error. The client's
// whole-request timeout does not apply: ctx bounds it.
func (c *Client) Open(ctx context.Context, req Request) (*http.Response, error) {
	var out *http.Response
	err := c.retry(ctx, req, func() error {
		resp, err := c.send(ctx, c.long, req)
		out = resp
		return err
	})
	return out, err
}

// call is JSON for the typed methods: in (when non-nil) is the body.
func (c *Client) call(ctx context.Context, req Request, in, out any) (int, error) {
	if in != nil {
		b, err := JSONBody(in)
		if err != nil {
			return 0, err
		}
		req.Body = b
	}
	resp, err := c.Do(ctx, req)
	if err != nil {
		return 0, err
	}
	if out != nil && len(resp.Body) > 0 && resp.Status != http.StatusNoContent {
		if err := jsonUnmarshal(resp.Body, out); err != nil {
			return resp.Status, &Error{Status: resp.Status, Code: errCodeUnavailable, Message: fmt.Sprintf("%s %s: undecodable answer: %v", req.Method, req.Path, err), Err: err}
		}
	}
	return resp.Status, nil
}

// errCodeUnavailable is the code of a request that got no usable answer:
// the caller may try again later.
const errCodeUnavailable = "unavailable"

// retry runs try once or, when req is safe to repeat, by the client's
// retry policy (shared/retry) on its timers.
func (c *Client) retry(ctx context.Context, req Request, try func() error) error {
	p := c.policy
	if !req.Retry {
		p.Attempts = 1
	}
	return retry.Do(ctx, retry.On(c.timers), p, func(context.Context) error { return try() })
}

// transient reports a failure worth retrying: no answer (but not a
// cancelled request), 429, or a 5xx.
func transient(err error) bool {
	e, ok := errors.AsType[*Error](err)
	if !ok {
		return false
	}
	if e.Status == 0 {
		return e.Err != nil && !errors.Is(e.Err, context.Canceled)
	}
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// send makes one try of req with hc: the 2xx response open, or an *Error.
func (c *Client) send(ctx context.Context, hc *http.Client, req Request) (*http.Response, error) {
	var body io.Reader
	length := int64(-1)
	switch {
	case req.Open != nil:
		rc, n, err := req.Open()
		if err != nil {
			return nil, fmt.Errorf("%s %s: open the body: %w", req.Method, req.Path, err)
		}
		body, length = rc, n
	case req.Body != nil:
		body = bytes.NewReader(req.Body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, c.URL(req.Path, req.Query), body)
	if err != nil {
		if rc, ok := body.(io.Closer); ok {
			_ = rc.Close()
		}
		return nil, &Error{Code: "invalid_argument", Message: err.Error()}
	}
	if length >= 0 {
		hr.ContentLength = length
		if length == 0 {
			if rc, ok := body.(io.Closer); ok {
				_ = rc.Close()
			}
			hr.Body = http.NoBody
		}
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	product := req.Product
	if product == "" && !req.Exact {
		product = c.product
	}
	if product != "" {
		hr.Header.Set(HeaderProduct, product)
	}
	accept := req.Accept
	if accept == "" {
		accept = "application/json"
	}
	hr.Header.Set("Accept", accept)
	if req.Body != nil || req.Open != nil {
		ct := req.ContentType
		if ct == "" {
			ct = "application/json"
		}
		hr.Header.Set("Content-Type", ct)
	}
	resp, err := hc.Do(hr)
	if err != nil {
		// The URL holds no secret (the token is a header), so naming it
		// helps without leaking anything.
		return nil, &Error{Code: errCodeUnavailable, Message: fmt.Sprintf("%s %s: %v", req.Method, c.URL(req.Path, nil), unwrapURLError(err)), Err: err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := errorFrom(resp.StatusCode, b, retryAfter(resp.Header.Get("Retry-After"), c.timers.Now()))
	e.Header = resp.Header
	return nil, e
}

func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(s)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// jsonUnmarshal decodes every answer: encoding/json's semantics on
// go-json-experiment's v2 engine, as the coordinator decodes its job
// documents (kernel/codec.go). A factory and fleetctl decode a job on
// nearly every call; the bench's factories spent 14 % of their CPU in
// encoding/json.Unmarshal. TestAnswersDecodeAsEncodingJSON holds it to
// encoding/json's values.
func jsonUnmarshal(b []byte, v any) error { return jsonv1.Unmarshal(b, v) }

// decodeJSON reads an open 2xx answer whole into out.
func decodeJSON(resp *http.Response, out any) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &Error{Code: errCodeUnavailable, Message: "reading the answer: " + err.Error(), Err: err}
	}
	if err := jsonUnmarshal(body, out); err != nil {
		return &Error{Status: resp.StatusCode, Code: errCodeUnavailable, Message: "undecodable answer: " + err.Error(), Err: err}
	}
	return nil
}
