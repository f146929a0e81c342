package hostemu

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
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
	forward  bool
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

func newHTTPRoute(fn *Function, trig Binding, get Settings, forwarding bool) (*httpRoute, error) {
	r := &httpRoute{fn: fn, binding: trig, forward: forwarding && fn.HTTPOnly()}
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
	prefix string
	routes []*httpRoute
	child  *Child
	proxy  *httputil.ReverseProxy
	client *http.Client
}

func newHTTPFront(prefix string, routes []*httpRoute, child *Child) *httpFront {
	h := &httpFront{prefix: prefix, routes: routes, child: child, client: &http.Client{Timeout: 5 * time.Minute, Transport: handlerTransport}}
	h.proxy = &httputil.ReverseProxy{
		Transport: handlerTransport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			addr, _ := pr.In.Context().Value(addrKey{}).(string)
			pr.SetURL(&url.URL{Scheme: "http", Host: addr})
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeHostError(w, http.StatusBadGateway, "the function handler did not answer: "+err.Error())
		},
	}
	return h
}

type addrKey struct{}

// handlerTransport carries every request to the handler. The default keeps
// two idle connections per host, so under load most requests would open a
// new loopback connection; the handler is one host, so keep many.
var handlerTransport = &http.Transport{
	MaxIdleConns:        512,
	MaxIdleConnsPerHost: 256,
	IdleConnTimeout:     90 * time.Second,
	DisableCompression:  true,
}

func writeHostError(w http.ResponseWriter, status int, msg string) {
	code := "unavailable"
	if status == http.StatusNotFound {
		code = "not_found"
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
		if rt.forward {
			h.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), addrKey{}, addr)))
			return
		}
		h.envelope(w, r, rt, params, addr)
		return
	}
	writeHostError(w, http.StatusNotFound, "no function serves "+r.Method+" "+r.URL.Path)
}

// envelope invokes an HTTP function without forwarding: the request becomes
// Data.<trigger>, the response comes from Outputs.<http out>.
func (h *httpFront) envelope(w http.ResponseWriter, r *http.Request, rt *httpRoute, params map[string]string, addr string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeHostError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return
	}
	query := map[string]string{}
	for k, vs := range r.URL.Query() {
		query[k] = strings.Join(vs, ",")
	}
	scheme := "http"
	req := funchost.HTTPRequest{
		URL: scheme + "://" + r.Host + r.URL.RequestURI(), Method: r.Method, Query: query,
		Headers: map[string][]string(r.Header.Clone()), Params: params, Identities: json.RawMessage("[]"),
	}
	if len(body) > 0 {
		text := string(body)
		if !isText(r.Header.Get("Content-Type"), body) {
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

func isText(contentType string, body []byte) bool {
	ct := strings.ToLower(contentType)
	if strings.HasPrefix(ct, "text/") || strings.Contains(ct, "json") || strings.Contains(ct, "xml") || strings.Contains(ct, "x-www-form-urlencoded") {
		return true
	}
	return ct == "" && !bytes.ContainsRune(body, 0)
}

// rawResult is the response envelope with outputs kept raw.
type rawResult struct {
	Outputs     map[string]json.RawMessage `json:"Outputs"`
	Logs        []string                   `json:"Logs"`
	ReturnValue json.RawMessage            `json:"ReturnValue"`
}

// invoke POSTs an invocation to the handler. A non-2xx answer is a failed
// invocation; its logs make the error.
func invoke(ctx context.Context, client *http.Client, addr, fn string, inv *funchost.Invocation) (*rawResult, int, error) {
	body, err := json.Marshal(inv)
	if err != nil {
		return nil, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/"+fn, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
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
	if resp.StatusCode/100 != 2 {
		return &res, resp.StatusCode, fmt.Errorf("status %d: %s", resp.StatusCode, strings.Join(res.Logs, "; "))
	}
	return &res, resp.StatusCode, nil
}
