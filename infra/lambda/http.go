package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// errBadRequest marks a request the API cannot even be given.
var errBadRequest = errors.New("bad request")

// serveHTTP runs one API Gateway HTTP API (payload 2.0) or Function URL
// request through h and returns the response in the same payload format.
// The response is buffered: Lambda's buffered invoke mode has no streaming.
func serveHTTP(ctx context.Context, h http.Handler, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	req, err := newRequest(ctx, ev)
	if errors.Is(err, errBadRequest) {
		// The client's fault, answered in the API's error format.
		body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "invalid_argument", "message": err.Error()}})
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadRequest,
			Headers: map[string]string{"Content-Type": "application/json"}, Body: string(body)}, nil
	}
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	w := newResponseBuffer()
	h.ServeHTTP(w, req)
	return w.response(), nil
}

// newRequest rebuilds the client's request from the event: the path and
// query as the client sent them (rawPath, rawQueryString), headers, cookies
// (which payload 2.0 moves out of the headers) and the body.
func newRequest(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	path := ev.RawPath
	if path == "" {
		path = "/"
	}
	// On a named stage the stage is the first path segment; the API's
	// routes start at /api.
	if st := ev.RequestContext.Stage; st != "" && st != "$default" {
		if rest, ok := strings.CutPrefix(path, "/"+st); ok && (rest == "" || rest[0] == '/') {
			path = rest
			if path == "" {
				path = "/"
			}
		}
	}
	// Parsed as net/http parses a request line: "//x" stays a path, and
	// escapes such as %2F keep their meaning.
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, fmt.Errorf("%w: path %q: %v", errBadRequest, path, err)
	}
	u.RawQuery = ev.RawQueryString

	var body []byte
	if ev.Body != "" {
		if ev.IsBase64Encoded {
			if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
				return nil, fmt.Errorf("http event: body is marked base64 but is not: %w", err)
			}
		} else {
			body = []byte(ev.Body)
		}
	}
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		return nil, fmt.Errorf("http event: requestContext.http.method is empty")
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("http event: %w", err)
	}
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	req.Host = req.Header.Get("Host")
	if req.Host == "" {
		req.Host = ev.RequestContext.DomainName
	}
	req.URL.Host = req.Host
	req.URL.Scheme = "https"
	req.RequestURI = u.RequestURI()
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Length", strconv.Itoa(len(body)))
	if ip := ev.RequestContext.HTTP.SourceIP; ip != "" {
		req.RemoteAddr = net.JoinHostPort(ip, "0")
	}
	return req, nil
}

// responseBuffer is an http.ResponseWriter that keeps the whole response.
type responseBuffer struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func newResponseBuffer() *responseBuffer { return &responseBuffer{header: http.Header{}} }

func (w *responseBuffer) Header() http.Header { return w.header }

func (w *responseBuffer) WriteHeader(status int) {
	if w.wroteHeader || status < 200 {
		// Informational answers (103 Early Hints) cannot be relayed.
		return
	}
	w.status, w.wroteHeader = status, true
}

func (w *responseBuffer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.body.Write(p)
}

// Flush hands nothing on: the answer leaves whole once the handler
// returns. It exists because the API's streams flush after each send and
// end when a flush fails; behind this front door they know the answer is
// buffered (app.WithBufferedResponses) and end themselves once they have
// sent something, so a stream with nothing new must wait, not end at its
// first flush with an empty answer (its client would reconnect at once,
// over and over).
func (w *responseBuffer) Flush() {}

// response maps the buffered answer to payload 2.0: Set-Cookie goes to
// cookies (payload 2.0 has no repeated headers), other repeated headers are
// comma-joined, and a body that is not text travels base64-encoded.
func (w *responseBuffer) response() events.APIGatewayV2HTTPResponse {
	status := w.status
	if !w.wroteHeader {
		status = http.StatusOK
	}
	body := w.body.Bytes()
	if w.header.Get("Content-Type") == "" && len(body) > 0 {
		// What net/http would have sent.
		w.header.Set("Content-Type", http.DetectContentType(body))
	}
	res := events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{}}
	for k, vs := range w.header {
		if k == "Set-Cookie" {
			res.Cookies = append(res.Cookies, vs...)
			continue
		}
		res.Headers[k] = strings.Join(vs, ",")
	}
	if isText(w.header.Get("Content-Type")) && utf8.Valid(body) {
		res.Body = string(body)
	} else {
		res.Body, res.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	return res
}

// isText reports whether a content type is text the gateway may carry as a
// string.
func isText(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/x-www-form-urlencoded":
		return true
	}
	return false
}
