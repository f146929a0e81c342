// Package httpapi serves the /fleet REST contract (API.md) over coord, on
// net/http. The same handler runs behind the Functions host (which forwards
// /api/*) and in the local stack.
//
// # Routes
//
// Every route lives under /api and is declared once, in the route table
// (routes.go): the mux and the OpenAPI document served at
// GET /api/openapi.json are both built from it.
//
// # Authentication
//
// Every route but GET /api/healthz and GET /api/openapi.json takes
// "Authorization: Bearer <token>". The OpenAPI document is public because it
// is the contract itself and holds nothing secret; tools fetch it unauthenticated.
//
// Operator tokens come from Config (see ParseOperatorTokens for the
// FLEET_OPERATOR_TOKEN syntax) and are compared in constant time against
// every configured token. Factory tokens are the ones enrollment issues; only
// strings with the factory token prefix are looked up in the store, so a
// flood of junk tokens costs no store reads. Missing, malformed, unknown and
// revoked tokens all get 401 unauthenticated; unknown and revoked ones get
// the same message, so a caller cannot tell which.
//
// # Authorisation
//
// Each route admits operators, factories, or both (see access). Routes that
// act as a factory (heartbeat, claim, accept, fail, patch, lease renew and
// release) need a factory token: an operator has no lease to fence with and
// gets 403. A factory may rotate or revoke only its own token. A principal
// scoped to products gets 403 for an x-product-id outside its scope, for a job
// of another product, and for a factory or product it does not cover. Every
// check runs before any write, so a rejected request changes nothing.
//
// # Products
//
// Product-scoped requests name their product with x-product-id. Without it, a
// principal scoped to exactly one product uses that one (so it gets 404 for a
// job of another product, as if the job did not exist). Otherwise job routes
// find the job across products and check the caller's scope against the
// job's product; accept and fail may also name it in the body (productId),
// which saves that lookup. Submitting and listing jobs, and the queue state,
// need a product: 400 naming x-product-id.
//
// # Errors
//
// Every error is {"error": {"code", "message", "field"}} with the status of
// API.md. Two codes are added: method_not_allowed (405, with Allow) and
// internal (500, whose message only quotes the request id; the cause is
// logged). Request bodies are decoded strictly: unknown or repeated fields,
// wrong types, trailing data and bodies over MaxBodyBytes are rejected with
// the field named. A body without Content-Type is read as JSON, except by
// submit, which takes two kinds and so needs to be told. A Content-Type the
// route does not take is 400 naming Content-Type (not 415: clients branch on
// the code, and this is one more kind of bad input).
package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Config configures the API.
type Config struct {
	// OperatorTokens are the accepted operator tokens. Entries with an empty
	// Token are ignored; with none, no operator can authenticate.
	OperatorTokens []OperatorToken
	// Logger receives the access log and errors; nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes caps a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Timers pace the live event streams (keep-alives, their end); nil is
	// the wall clock.
	Timers clock.Timers
	// KeepAlive is the interval of a stream's keep-alive comment; 0 means
	// DefaultKeepAlive.
	KeepAlive time.Duration
	// MaxStream ends a stream after this long (its client resumes); 0 means
	// DefaultMaxStream.
	MaxStream time.Duration
	// Buffered says responses reach the client only when complete (a front
	// door that cannot stream): a live stream then ends as soon as it has
	// sent an event, so a client reconnecting with Last-Event-ID long-polls
	// instead of waiting on a stream that never flushes.
	Buffered bool
	// MaxStreamsPerPrincipal and MaxStreams cap the streams and long polls
	// open at once per principal and in the process (streamcap.go); 0
	// means DefaultMaxStreamsPerPrincipal and DefaultMaxStreams.
	MaxStreamsPerPrincipal int
	MaxStreams             int
	// GitHubWebhookSecret verifies POST /fleet/forge/github deliveries
	// (FLEET_GITHUB_WEBHOOK_SECRET_FILE); without one the route is 503.
	GitHubWebhookSecret []byte
	// WebhookBytesInFlight bounds the bytes of webhook deliveries held at
	// once while they are read and verified (bodyBudget); 0 means
	// DefaultWebhookBytesInFlight.
	WebhookBytesInFlight int64
}

// DefaultMaxBodyBytes is the default body cap: the largest manifest.
const DefaultMaxBodyBytes = fleet.MaxManifestBytes

// Header names, as the contract (shared/api) spells them.
const (
	headerProduct   = api.HeaderProduct
	headerRequestID = api.HeaderRequestID
)

// productField names the product header in errors, as clients write it.
const productField = "x-product-id"

type server struct {
	coord     *coord.Coordinator
	log       *slog.Logger
	maxBody   int64
	operators []operatorKey
	mux       *http.ServeMux
	timers    clock.Timers
	keepAlive time.Duration
	maxStream time.Duration
	buffered  bool
	caps      *streamCaps
	ghSecret  []byte
	// hookBodies bounds the webhook deliveries held before verification.
	hookBodies *bodyBudget
	// openAPIJSON is the package's openAPIJSON (see there).
	openAPIJSON func() ([]byte, error)
}

// New builds the API handler over c.
func New(c *coord.Coordinator, cfg Config) http.Handler {
	s := &server{coord: c, log: cfg.Logger, maxBody: cfg.MaxBodyBytes, operators: operatorKeys(cfg.OperatorTokens), openAPIJSON: openAPIJSON}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	s.timers, s.keepAlive, s.maxStream, s.buffered = cfg.Timers, cfg.KeepAlive, cfg.MaxStream, cfg.Buffered
	if s.timers == nil {
		s.timers = clock.System{}
	}
	if s.keepAlive <= 0 {
		s.keepAlive = DefaultKeepAlive
	}
	if s.maxStream <= 0 {
		s.maxStream = DefaultMaxStream
	}
	s.caps = newStreamCaps(cfg.MaxStreamsPerPrincipal, cfg.MaxStreams)
	s.ghSecret = cfg.GitHubWebhookSecret
	s.hookBodies = &bodyBudget{max: cfg.WebhookBytesInFlight}
	if s.hookBodies.max <= 0 {
		s.hookBodies.max = DefaultWebhookBytesInFlight
	}
	s.mux = http.NewServeMux()
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.pattern, s.endpoint(rt))
	}
	return http.HandlerFunc(s.serveHTTP)
}

// requestState is what the outer layer learns from the inner ones for the
// access log. It lives in the request context as a pointer so handlers
// deeper down can fill it in.
type requestState struct {
	id        string
	principal string
	code      fleet.Code
}

type stateKey struct{}

func stateOf(ctx context.Context) *requestState {
	if st, ok := ctx.Value(stateKey{}).(*requestState); ok {
		return st
	}
	return &requestState{}
}

// serveHTTP is the outermost layer: request id, panic recovery, the
// JSON 404/405 answers the mux would give as text, and the access log.
func (s *server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	st := &requestState{id: requestID(r.Header.Get(headerRequestID))}
	r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	rec := &recorder{ResponseWriter: w}
	rec.Header().Set(headerRequestID, st.id)
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "handler panic", "requestId", st.id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rec.wrote {
				s.writeError(rec, r, fmt.Errorf("panic: %v", v))
			}
		}
		status := rec.status
		if !rec.wrote {
			status = http.StatusOK // net/http's answer to a handler that wrote nothing
		}
		level := accessLevel(status)
		if !s.log.Enabled(r.Context(), level) {
			return
		}
		attrs := []any{"requestId", st.id, "method", r.Method, "path", r.URL.Path, "status", status,
			"durationMs", float64(time.Since(start).Microseconds()) / 1000, "bytes", rec.bytes, "principal", st.principal}
		if st.code != "" {
			attrs = append(attrs, "code", st.code)
		}
		s.log.Log(r.Context(), level, "http request", attrs...)
	}()
	if h, pattern := s.mux.Handler(r); pattern == "" {
		s.unmatched(rec, r, h)
		return
	}
	s.mux.ServeHTTP(rec, r)
}

// unmatched answers a request no route takes. The mux knows whether the
// path exists under another method (405 with Allow) or not at all (404); its
// own answer is plain text, so it is run into a scratch writer and only
// its status and Allow header are kept.
func (s *server) unmatched(w http.ResponseWriter, r *http.Request, h http.Handler) {
	scratch := &discardWriter{header: http.Header{}}
	h.ServeHTTP(scratch, r)
	if scratch.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", scratch.header.Get("Allow"))
		s.writeError(w, r, fleet.Errorf(codeMethodNotAllowed, "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, scratch.header.Get("Allow")))
		return
	}
	s.writeError(w, r, fleet.Errorf(fleet.CodeNotFound, "no route %s %s; see GET /api/openapi.json", r.Method, r.URL.Path))
}

// handlerFunc is one route's handler. p is nil on public routes. An error
// is written by the caller in the API's error shape, so handlers return
// early on failure and write only successes.
type handlerFunc func(s *server, w http.ResponseWriter, r *http.Request, p *principal) error

// endpoint wraps a route's handler with its authentication, scope,
// query-string and product checks.
func (s *server) endpoint(rt route) http.Handler {
	accepted := rt.queryNames()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authorize(r, rt.access)
		if err == nil {
			_, err = query(r, accepted...)
		}
		if err == nil && p != nil && rt.long.counts(r) {
			// Before the handler reads or subscribes to anything.
			var release func()
			if release, err = s.caps.acquire(p.capKey); err == nil {
				defer release()
			}
		}
		if err == nil && rt.needsProduct {
			_, err = needProduct(r, p)
		}
		if err == nil {
			err = rt.handle(s, w, r, p)
		}
		if err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeJSON writes v with status. v is encoded before anything is sent, so
// an encoding failure can still become a clean 500.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The answer is JSON under nosniff, never HTML: escaping <, > and & as
	// \u003c and so on would only make messages harder to read.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	// Responses carry tokens (enroll, rotate) and live job state; neither
	// belongs in a shared or browser cache.
	h.Set("Cache-Control", "no-store")
	// A declared length: an answer past net/http's 2 KiB buffer would
	// otherwise go out chunked, and a proxy in front (the Functions host)
	// streams a chunked answer write by write.
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// noContent answers 204.
func noContent(w http.ResponseWriter) error {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// requestID keeps a caller's request id when it is a short printable token
// (so it can be quoted in logs as is) and makes one otherwise.
func requestID(in string) string {
	if len(in) > 0 && len(in) <= 128 && strings.IndexFunc(in, func(r rune) bool { return r <= ' ' || r > '~' }) < 0 {
		return in
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// accessLevel is the access log's level for a request answered status: a
// routine answer is logged at debug, as Nomad logs a completed request, a
// refused one at info and a failed one at error. One line per request at
// info was a pipe write on every call of a job's life (and a wake-up of
// whatever reads the log: the Functions host, which records every
// invocation itself, or a terminal) on the dispatch path
// (docs/performance.md).
func accessLevel(status int) slog.Level {
	switch {
	case status >= http.StatusInternalServerError:
		return slog.LevelError
	case status >= http.StatusBadRequest:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// recorder notes the status and size of the response for the access log.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int
	wrote  bool
}

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// discardWriter captures a status and headers and drops the body.
type discardWriter struct {
	header http.Header
	status int
}

func (d *discardWriter) Header() http.Header { return d.header }

func (d *discardWriter) Write(b []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	return len(b), nil
}

func (d *discardWriter) WriteHeader(status int) {
	if d.status == 0 {
		d.status = status
	}
}
