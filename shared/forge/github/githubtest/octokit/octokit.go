// Package octokit validates HTTP traffic and webhook payloads against
// GitHub's own OpenAPI descriptions, as published on npm: @octokit/openapi
// (the REST API, OpenAPI 3.0) and @octokit/openapi-webhooks (the webhook
// payloads, OpenAPI 3.1), installed by `make octokit` into a cache folder.
// The GitHub adapter's tests send every request through it and read every
// answer through it, and check every webhook payload the tests send: a
// test double GitHub's description rejects is a test bug.
//
// It is test support: nothing the fleet ships imports it.
package octokit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Dir is where `make octokit` installs the packages: $OCTOKIT_DIR, else
// ~/.cache/fleet-octokit.
func Dir() string {
	if d := os.Getenv("OCTOKIT_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "fleet-octokit")
}

// RESTPath and WebhooksPath are the descriptions of api.github.com.
func RESTPath() string {
	return filepath.Join(Dir(), "node_modules", "@octokit", "openapi", "generated", "api.github.com.json")
}

func WebhooksPath() string {
	return filepath.Join(Dir(), "node_modules", "@octokit", "openapi-webhooks", "generated", "api.github.com.json")
}

// Need skips the test when the descriptions are not installed, except
// under CI=true, where it fails.
func Need(t testing.TB) {
	t.Helper()
	for _, p := range []string{RESTPath(), WebhooksPath()} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("GitHub's OpenAPI description is not installed (make octokit): %v", err)
			}
			t.Skipf("GitHub's OpenAPI description is not installed (make octokit): %v", err)
		}
	}
}

// Operations are the REST paths the GitHub adapter calls.
var Operations = []string{
	"/repos/{owner}/{repo}",
	"/repos/{owner}/{repo}/pulls",
	"/repos/{owner}/{repo}/pulls/{pull_number}",
	"/repos/{owner}/{repo}/pulls/{pull_number}/merge",
	"/repos/{owner}/{repo}/git/ref/{ref}",
	"/repos/{owner}/{repo}/git/refs/{ref}",
	"/repos/{owner}/{repo}/commits/{ref}/check-runs",
	"/repos/{owner}/{repo}/commits/{ref}/status",
	"/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments",
}

// REST validates requests and responses against the REST description.
type REST struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	restOnce sync.Once
	rest     *REST
	restErr  error
)

// LoadREST reads the REST description once per process (it is 13 MB:
// about ten seconds).
func LoadREST() (*REST, error) {
	restOnce.Do(func() {
		l := openapi3.NewLoader()
		doc, err := l.LoadFromFile(RESTPath())
		if err != nil {
			restErr = fmt.Errorf("octokit: load %s: %w", RESTPath(), err)
			return
		}
		// Route on the paths alone: the double serves on loopback, not
		// on the description's server. Only the operations the adapter
		// uses are routed (the full description has paths a router
		// cannot tell apart, e.g. /orgs/{org}/attestations/{…}).
		doc.Servers = openapi3.Servers{{URL: "/"}}
		kept := openapi3.NewPaths()
		for _, p := range Operations {
			item := doc.Paths.Value(p)
			if item == nil {
				restErr = fmt.Errorf("octokit: GitHub's description has no path %s", p)
				return
			}
			kept.Set(p, item)
		}
		doc.Paths = kept
		r, err := legacy.NewRouter(doc, openapi3.DisableExamplesValidation(), openapi3.DisableSchemaDefaultsValidation(),
			openapi3.DisableSchemaPatternValidation(), openapi3.DisableSchemaFormatValidation())
		if err != nil {
			restErr = fmt.Errorf("octokit: route %s: %w", RESTPath(), err)
			return
		}
		rest = &REST{doc: doc, router: r}
	})
	return rest, restErr
}

// Doc is the loaded description.
func (r *REST) Doc() *openapi3.T { return r.doc }

var validateOpts = &openapi3filter.Options{
	AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	IncludeResponseStatus: true,
	MultiError:            true,
}

// Check validates one exchange: the request (with its body) and the
// response the server gave. Every operation the fleet uses declares its
// statuses, so an undeclared status is an error too.
func (r *REST) Check(req *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) error {
	route, params, err := r.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: no such operation in GitHub's description: %w", req.Method, req.URL.Path, err)
	}
	ctx := context.Background()
	req2 := req.Clone(ctx)
	req2.Body = io.NopCloser(bytes.NewReader(reqBody))
	in := &openapi3filter.RequestValidationInput{Request: req2, PathParams: params, Route: route, Options: validateOpts}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		return fmt.Errorf("request %s %s: %w", req.Method, req.URL.Path, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header,
		Body: io.NopCloser(bytes.NewReader(respBody)), Options: validateOpts}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("response %d to %s %s: %w", status, req.Method, req.URL.Path, err)
	}
	return nil
}

// Middleware validates every exchange through next and reports each
// failure to fail (a test's Errorf).
func (r *REST) Middleware(next http.Handler, fail func(format string, args ...any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			fail("read request: %v", err)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, req)
		if err := r.Check(req, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			fail("GitHub's description rejects: %v", err)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// Webhooks validates payloads against the webhooks description.
type Webhooks struct {
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

var (
	hooksOnce sync.Once
	hooks     *Webhooks
	hooksErr  error
)

// LoadWebhooks reads the webhooks description once per process.
func LoadWebhooks() (*Webhooks, error) {
	hooksOnce.Do(func() {
		f, err := os.Open(WebhooksPath())
		if err != nil {
			hooksErr = err
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			hooksErr = fmt.Errorf("octokit: read %s: %w", WebhooksPath(), err)
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource("https://octokit.test/webhooks.json", doc); err != nil {
			hooksErr = err
			return
		}
		hooks = &Webhooks{compiler: c, compiled: map[string]*jsonschema.Schema{}}
	})
	return hooks, hooksErr
}

// Validate checks payload against the schema of webhook (the
// description's name, e.g. "pull-request-review-submitted").
func (w *Webhooks) Validate(webhook string, payload []byte) error {
	w.mu.Lock()
	s, ok := w.compiled[webhook]
	if !ok {
		var err error
		s, err = w.compiler.Compile("https://octokit.test/webhooks.json#/components/schemas/webhook-" + webhook)
		if err != nil {
			w.mu.Unlock()
			return fmt.Errorf("octokit: compile the schema of %s: %w", webhook, err)
		}
		w.compiled[webhook] = s
	}
	w.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return err
	}
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			b, _ := json.Marshal(ve.BasicOutput())
			return fmt.Errorf("webhook %s: GitHub's description rejects the payload: %s", webhook, b)
		}
		return err
	}
	return nil
}
