package hostemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/funchost"
)

// httpRoute is one httpTrigger function's route.
type httpRoute struct {
	fn       *Function
	binding  Binding
	out      string   // name of the http output binding
	methods  []string // upper case; empty = all
	segments []string // the route template split on "/"
	mode     HTTPMode
}

// match reports whether path (below the route prefix) matches the template,
// and the route parameters.
func (r *httpRoute) match(method string, segs []string) (map[string]string, bool) {
	if len(r.methods) > 0 && !slices.Contains(r.methods, method) {
		return nil, false
	}
	params := map[string]string{}
	for i, t := range r.segments {
		if strings.HasPrefix(t, "{*") && strings.HasSuffix(t, "}") {
			params[strings.TrimSuffix(t[2:], "}")] = strings.Join(segs[i:], "/")
			return params, true
		}
		if i >= len(segs) {
			return nil, false
		}
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			name, _, _ := strings.Cut(t[1:len(t)-1], ":")
			params[name] = segs[i]
			continue
		}
		if !strings.EqualFold(t, segs[i]) {
			return nil, false
		}
	}
	return params, len(segs) == len(r.segments)
}

func newHTTPRoute(fn *Function, trig Binding, get Settings, mode HTTPMode) (*httpRoute, error) {
	r := &httpRoute{fn: fn, binding: trig, mode: mode}
	if !fn.HTTPOnly() {
		r.mode = ModeEnvelope
	}
	route, err := get.String(trig, "route", fn.Name)
	if err != nil {
		return nil, err
	}
	r.segments = strings.Split(strings.Trim(route, "/"), "/")
	methods, err := get.StringList(trig, "methods")
	if err != nil {
		return nil, err
	}
	for _, m := range methods {
		r.methods = append(r.methods, strings.ToUpper(m))
	}
	for _, b := range fn.Bindings {
		if strings.EqualFold(b.Type, "http") && strings.EqualFold(b.Direction, "out") {
			r.out = b.Name
		}
	}
	return r, nil
}

// httpFront serves the app's HTTP triggers.
type httpFront struct {
	status func() Status
	// runTimer runs the named timer function once (the admin API's
	// POST /admin/functions/{name}); found is false when no timer has it.
	runTimer func(ctx context.Context, name string) (found bool, err error)
	prefix   string
	routes   []*httpRoute
	child    *Child
	proxy    *httputil.ReverseProxy
	client   *http.Client
	// timeout is functionTimeout, for the requests the proxy hands on (0:
	// none); client carries it for the envelopes.
	timeout time.Duration
}

func newHTTPFront(prefix string, routes []*httpRoute, child *Child) *httpFront {
	h := &httpFront{prefix: prefix, routes: routes, child: child, client: &http.Client{Transport: handlerTransport}} // New bounds it at functionTimeout
	h.proxy = &httputil.ReverseProxy{
		Transport: handlerTransport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			addr, _ := pr.In.Context().Value(addrKey{}).(string)
			pr.SetURL(&url.URL{Scheme: "http", Host: addr})
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			if b, ok := pr.In.Body.(heldBody); ok {
				pr.Out.Body = io.NopCloser(b.Reader)
			}
		},
		// No FlushInterval: ReverseProxy flushes every write by itself for
		// a text/event-stream and for an answer of unknown length, which is
		// every stream; an answer of known length goes out in one write.
		// (-1 here armed a timer per answer that flushed the headers on
		// their own, a goroutine and a packet more per request.)
		BufferPool: copyBuffers{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil {
				writeHostError(w, http.StatusInternalServerError, "the function ran past functionTimeout and was cancelled")
				return
			}
			// A body past the limit is the client's doing (the host answers
			// 413), not the handler's.
			if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
				writeHostError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit))
				return
			}
			writeHostError(w, http.StatusBadGateway, "the function handler did not answer: "+err.Error())
		},
	}
	return h
}

type addrKey struct{}

// copyBuffers lends the proxy its copy buffers: without a pool it
// allocates 32 KiB for every answer it copies.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (copyBuffers) Get() []byte  { return copyBufferPool.Get().(*[32 << 10]byte)[:] }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put((*[32 << 10]byte)(b)) }

// handlerTransport carries every request to the handler. The default keeps
// two idle connections per host, so under load most requests would open a
// new loopback connection; the handler is one host, so keep many.
var handlerTransport = &http.Transport{
	DialContext:         dialAnswerFirst,
	MaxIdleConns:        512,
	MaxIdleConnsPerHost: 256,
	IdleConnTimeout:     90 * time.Second,
	DisableCompression:  true,
}

// dialAnswerFirst dials the handler with a connection whose failed writes
// do not hide the handler's answer. A handler may answer before it has read
// the whole request (413 on a declared length, 400 on a missing header) and
// then close, resetting the connection while the rest of the body is still
// being sent. net/http's transport then has both the write error and the
// answer, and returns whichever it sees first: the error, about one time in
// ten, made a 502 of the handler's 413. With the write error hidden, the
// transport reads what the handler sent; when the handler sent nothing, the
// read fails in its turn and the error still surfaces.
func dialAnswerFirst(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &answerFirstConn{Conn: c}, nil
}

// answerFirstConn drops writes once one has failed: the peer is gone or
// going, and what it said before leaving is still to be read.
type answerFirstConn struct {
	net.Conn
	failed atomic.Bool
}

func (c *answerFirstConn) Write(p []byte) (int, error) {
	if c.failed.Load() {
		return len(p), nil
	}
	n, err := c.Conn.Write(p)
	if err != nil && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
		c.failed.Store(true)
		return len(p), nil
	}
	return n, err
}

// maxRequestBytes is the host's limit on an HTTP request (100 MB): a larger
// body is refused by the host itself, with 413.
const maxRequestBytes = 100 << 20

// requestBody reads the body the host hands on, whole: the host copies a
// request body only when Content-Length > 0, so a chunked body (no declared
// length) arrives empty. Reading it all before forwarding also means the
// client has finished sending when it gets the handler's answer, whatever
// that answer is.
func requestBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength <= 0 {
		return nil, true
	}
	if r.ContentLength > maxRequestBytes {
		writeHostError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over the host's limit of %d bytes", maxRequestBytes))
		return nil, false
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		writeHostError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return nil, false
	}
	return body, true
}

func writeHostError(w http.ResponseWriter, status int, msg string) {
	code := "unavailable"
	switch status {
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusRequestEntityTooLarge:
		code = "too_large"
	case http.StatusBadRequest:
		code = "invalid_argument"
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (h *httpFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/admin/host/status" && r.Method == http.MethodGet && h.status != nil {
		body, _ := json.Marshal(h.status())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/admin/functions/"); ok && r.Method == http.MethodPost && h.runTimer != nil {
		// The host's admin API for non-HTTP functions (there behind the
		// master key). The host answers 202 at once; here the answer waits
		// for the run, so a caller knows when its cost has been incurred.
		found, err := h.runTimer(r.Context(), name)
		switch {
		case !found:
			writeHostError(w, http.StatusNotFound, "no timer function "+name)
		case err != nil:
			writeHostError(w, http.StatusServiceUnavailable, err.Error())
		default:
			w.WriteHeader(http.StatusAccepted)
		}
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	rest, ok := strings.CutPrefix(path, h.prefix)
	if h.prefix != "" && (!ok || (rest != "" && rest[0] != '/')) {
		writeHostError(w, http.StatusNotFound, "no function serves "+r.URL.Path)
		return
	}
	segs := strings.Split(strings.Trim(rest, "/"), "/")
	for _, rt := range h.routes {
		params, ok := rt.match(r.Method, segs)
		if !ok {
			continue
		}
		// Requests wait for a restarting handler rather than fail at once.
		waitCtx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		addr, err := h.child.Addr(waitCtx)
		cancel()
		if err != nil {
			writeHostError(w, http.StatusServiceUnavailable, "the function handler is not running: "+err.Error())
			return
		}
		if rt.mode == ModeProxy {
			h.proxyRequest(w, r, addr)
			return
		}
		body, ok := requestBody(w, r)
		if !ok {
			return
		}
		if rt.mode == ModeForward {
			// The host's HttpClient reads the whole answer before it
			// replies: a stream arrives only when it has ended.
			buf := &bufferedResponse{header: http.Header{}}
			h.forward(buf, r, addr, body)
			buf.writeTo(w)
			return
		}
		h.envelope(w, r, rt, params, addr, body)
		return
	}
	writeHostError(w, http.StatusNotFound, "no function serves "+r.Method+" "+r.URL.Path)
}

// hostQuery is the request's query as the host's query collection gives
// it: one value per name, repeated values joined with commas.
func hostQuery(u *url.URL) map[string]string {
	query := map[string]string{}
	for k, vs := range u.Query() {
		query[k] = strings.Join(vs, ",")
	}
	return query
}

// The headers the host adds to what it hands a custom handler
// (azure-functions-host src/WebJobs.Script/Workers/Http/HttpWorkerConstants.cs).
const (
	headerHostVersion  = "X-Azure-Functions-HostVersion"
	headerInvocationID = "X-Azure-Functions-InvocationId"
	// hostUserAgent is the product token DefaultHttpWorkerService.AddHeaders
	// appends to the User-Agent of a forwarded request (and of an envelope
	// invocation); proxying (AddProxyingHeaders) leaves the client's alone.
	hostUserAgent = "Azure-Functions-Host"
	// emulatedHostVersion is the host version the emulator reports.
	emulatedHostVersion = "4.1037.0"
)

// newInvocationID is a fresh invocation id, a GUID as the host's.
func newInvocationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// bounded is ctx ending at functionTimeout, with the handler's address.
func (h *httpFront) bounded(ctx context.Context, addr string) (context.Context, context.CancelFunc) {
	ctx = context.WithValue(ctx, addrKey{}, addr)
	if h.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, h.timeout)
}

// forward hands the request to the handler at its original path, with the
// body read by requestBody.
func (h *httpFront) forward(w http.ResponseWriter, r *http.Request, addr string, body []byte) {
	ctx, cancel := h.bounded(r.Context(), addr)
	defer cancel()
	out := r.Clone(ctx)
	// AddHeaders: the host version, the invocation id, and its product
	// token after the client's User-Agent (ToHttpRequestMessage copies the
	// client's headers first, then UserAgent.ParseAdd appends).
	out.Header.Set(headerHostVersion, emulatedHostVersion)
	out.Header.Set(headerInvocationID, newInvocationID())
	out.Header.Set("User-Agent", strings.TrimSpace(r.Header.Get("User-Agent")+" "+hostUserAgent+"/"+emulatedHostVersion))
	out.TransferEncoding = nil
	out.ContentLength = int64(len(body))
	out.Body = http.NoBody
	out.GetBody = heldGetBody(body)
	if len(body) > 0 {
		out.Body = holdBody(body)
	}
	// The emulator has read the body, which answered any expectation.
	out.Header.Del("Expect")
	// The host rebuilds the query from its query collection (AddQueryString
	// over GetQueryCollectionAsDictionary): one value per name.
	q := url.Values{}
	for k, v := range hostQuery(r.URL) {
		q.Set(k, v)
	}
	out.URL.RawQuery = q.Encode()
	h.proxy.ServeHTTP(w, out)
}

// proxyRequest hands the request on as it came (YARP keeps the path, the
// query and the body) and copies the answer as it arrives: a
// text/event-stream or any answer of unknown length is flushed write by
// write, so it reaches the client event by event. YARP streams every body;
// here a small one with a declared length is read first (heldBody), which
// only the handler's reads can tell, and one shorter than it declared is
// the host's 400 rather than the handler's failure.
func (h *httpFront) proxyRequest(w http.ResponseWriter, r *http.Request, addr string) {
	if r.ContentLength > maxRequestBytes {
		writeHostError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over the host's limit of %d bytes", maxRequestBytes))
		return
	}
	ctx, cancel := h.bounded(r.Context(), addr)
	defer cancel()
	out := r.WithContext(ctx)
	out.Header = r.Header.Clone()
	// AddProxyingHeaders: these two, overriding what the client sent; the
	// User-Agent stays the client's.
	out.Header.Set(headerHostVersion, emulatedHostVersion)
	out.Header.Set(headerInvocationID, newInvocationID())
	if r.ContentLength > 0 && r.ContentLength <= proxyReadsBodyFirst {
		// A small declared body is read first and goes out with its
		// headers (heldBody); a large or chunked one streams as YARP
		// streams it.
		body, ok := requestBody(w, r)
		if !ok {
			return
		}
		out.Body, out.GetBody = holdBody(body), heldGetBody(body)
		// Reading the body has answered any expectation.
		out.Header.Del("Expect")
	} else {
		out.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	}
	h.proxy.ServeHTTP(w, out)
}

// heldBody is a request body the emulator has read whole. ReverseProxy
// wraps any body it is handed, and net/http's transport sends the headers
// of a body it does not know to be in memory in a write of their own
// (transfer.go, FlushHeaders): two packets for the handler to wake up to
// and read on every request, where one would do. The proxy's Rewrite hands
// the transport the *bytes.Reader itself instead.
type heldBody struct{ *bytes.Reader }

func holdBody(b []byte) heldBody { return heldBody{bytes.NewReader(b)} }

func (heldBody) Close() error { return nil }

// heldGetBody lets the transport send a held body again on a fresh
// connection when a kept-alive one turned out closed before anything was
// written.
func heldGetBody(b []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

// proxyReadsBodyFirst is the largest declared body the proxy reads before
// forwarding (above: an API request's JSON is a few KiB).
const proxyReadsBodyFirst = 64 << 10

// bufferedResponse holds a whole answer, as the host's forwarding mode
// does, and writes it out once the handler has finished.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// Flush does nothing: nothing leaves before the end.
func (b *bufferedResponse) Flush() {}

func (b *bufferedResponse) writeTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}

// envelope invokes an HTTP function without forwarding: the request becomes
// Data.<trigger>, the response comes from Outputs.<http out>.
func (h *httpFront) envelope(w http.ResponseWriter, r *http.Request, rt *httpRoute, params map[string]string, addr string, body []byte) {
	query := hostQuery(r.URL)
	scheme := "http"
	req := funchost.HTTPRequest{
		URL: scheme + "://" + r.Host + r.URL.RequestURI(), Method: r.Method, Query: query,
		Headers: map[string][]string(r.Header.Clone()), Params: params, Identities: json.RawMessage("[]"),
	}
	if len(body) > 0 {
		// Text is taken as UTF-8, invalid bytes replaced, as the host's
		// ReadAsStringAsync does.
		text := string(body)
		if funchost.Base64Body(r.Header.Get("Content-Type")) {
			text = base64.StdEncoding.EncodeToString(body)
		}
		req.Body, _ = json.Marshal(text)
	}
	reqJSON, _ := json.Marshal(req)
	inv := funchost.Invocation{
		Data:     map[string]json.RawMessage{rt.binding.Name: reqJSON},
		Metadata: map[string]json.RawMessage{},
	}
	res, status, err := invoke(r.Context(), h.client, addr, rt.fn.Name, &inv)
	if err != nil {
		writeHostError(w, http.StatusInternalServerError, fmt.Sprintf("function %s failed (%d): %v", rt.fn.Name, status, err))
		return
	}
	var out funchost.HTTPResponse
	if raw, ok := res.Outputs[rt.out]; ok {
		if err := json.Unmarshal(raw, &out); err != nil {
			writeHostError(w, http.StatusInternalServerError, "function "+rt.fn.Name+" returned a malformed http output: "+err.Error())
			return
		}
	}
	code, err := strconv.Atoi(out.StatusCode)
	if err != nil || code < 100 {
		code = http.StatusOK
	}
	for k, v := range out.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(out.Body))
}

// rawResult is the response envelope with outputs kept raw.
type rawResult struct {
	Outputs     map[string]json.RawMessage `json:"Outputs"`
	Logs        []string                   `json:"Logs"`
	ReturnValue json.RawMessage            `json:"ReturnValue"`
}

// invoke POSTs an invocation to the handler. A non-2xx answer is a failed
// invocation, and nothing of it is read: the host checks the status before
// the body (EnsureSuccessStatusCode in DefaultHttpWorkerService), so a
// failed invocation's Logs never reach the function's logs, and the handler
// has to log the reason itself (the emulator passes its stdout on).
func invoke(ctx context.Context, client *http.Client, addr, fn string, inv *funchost.Invocation) (*rawResult, int, error) {
	body, err := json.Marshal(inv)
	if err != nil {
		return nil, 0, err
	}
	return invokeBody(ctx, client, addr, fn, body)
}

// invokeBody is invoke with the invocation already encoded.
func invokeBody(ctx context.Context, client *http.Client, addr, fn string, body []byte) (*rawResult, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/"+fn, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	// ProcessDefaultInvocationRequest calls AddHeaders too.
	req.Header.Set(headerHostVersion, emulatedHostVersion)
	req.Header.Set(headerInvocationID, newInvocationID())
	req.Header.Set("User-Agent", hostUserAgent+"/"+emulatedHostVersion)
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10) // the connection can be reused
		return nil, resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, err
	}
	var res rawResult
	if len(data) == 0 {
		return nil, resp.StatusCode, fmt.Errorf("empty response body")
	}
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("response is not an envelope: %w", err)
	}
	return &res, resp.StatusCode, nil
}
