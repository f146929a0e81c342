package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	blobfs "github.com/gigafactory/fleet/shared/blob/fs"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/runlog"
	runlogfs "github.com/gigafactory/fleet/shared/runlog/fs"
	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/store/storecount"
	"github.com/gigafactory/fleet/shared/syncbuf"
)

// Operator tokens every fixture configures.
const (
	rootToken      = "root-operator-token-000000000001"          // every product
	p1Token        = "p1-operator-token-0000000000000001"        // p1 only
	otherToken     = "other-operator-token-00000000000001"       // product "other" only
	multiToken     = "multi-operator-token-00000000000001"       // p1 and other
	elsewhereToken = "elsewhere-operator-token-000000001"        // other and p3
	junkToken      = "fft_this-token-was-never-issued-by-anyone" // looks like a factory token
)

// faultyStore fails reads with an unclassified error while failing is set,
// to reach the 500 path.
type faultyStore struct {
	store.Store
	mu      sync.Mutex
	failing bool
	// loseEvents fails every write of an event (unavailable).
	loseEvents bool
	// failQueries fails every query with an unclassified error.
	failQueries bool
}

func (s *faultyStore) setFailQueries(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failQueries = v
}

func (s *faultyStore) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	s.mu.Lock()
	failing := s.failQueries
	s.mu.Unlock()
	if failing {
		return store.Page{}, fmt.Errorf("disk on fire under /var/lib/secret-path")
	}
	return s.Store.Query(ctx, container, q)
}

func (s *faultyStore) setLoseEvents(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseEvents = v
}

func (s *faultyStore) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	s.mu.Lock()
	lose := s.loseEvents && container == store.Events
	s.mu.Unlock()
	if lose {
		return "", store.ErrUnavailable
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

func (s *faultyStore) setFailing(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = v
}

func (s *faultyStore) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	s.mu.Lock()
	failing := s.failing
	s.mu.Unlock()
	if failing {
		return store.Item{}, fmt.Errorf("disk on fire under /var/lib/secret-path")
	}
	return s.Store.Read(ctx, container, pk, id)
}

type fixture struct {
	t      testing.TB
	url    string
	store  *sqlite.Store
	faulty *faultyStore
	// counts counts the coordinator's store calls.
	counts *storecount.Store
	coord  *coord.Coordinator
	clock  *clocktest.Clock
	logs   *syncbuf.Buffer
	// logLevel is the level of logs, debug unless a test raises it.
	logLevel *slog.LevelVar
	blobs    *blobfs.Store
	// runlogs keeps the runs' live output.
	runlogs *runlogfs.Store
}

// testArtifactMax is the fixtures' artifact size limit.
const testArtifactMax = 1 << 20

// testLogMax is the fixtures' cap on a run's log: four segments of 64 bytes.
const testLogMax = 256

type fixtureOption func(*Config)

// testWebhookSecret signs the GitHub webhook deliveries of the tests.
const testWebhookSecret = "github-webhook-secret-of-the-tests"

func withMaxBody(n int64) fixtureOption { return func(c *Config) { c.MaxBodyBytes = n } }

func buffered(c *Config) { c.Buffered = true }

// newFixture serves the API over a real coordinator on a fresh SQLite store
// in a temp dir, with a fake clock.
func newFixture(t testing.TB, opts ...fixtureOption) *fixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	faulty := &faultyStore{Store: st}
	clk := clocktest.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	blobs, err := blobfs.Open(filepath.Join(t.TempDir(), "blobs"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = blobs.Close() })
	counts := storecount.New(faulty)
	runlogs, err := runlogfs.Open(filepath.Join(t.TempDir(), "runlogs"), runlog.Limits{MaxBytes: testLogMax, Segments: 4})
	require.NoError(t, err)
	c, err := coord.New(coord.Config{ArtifactMaxBytes: testArtifactMax}, coord.Deps{Store: counts, Clock: clk, Blobs: blobs, RunLogs: runlogs})
	require.NoError(t, err)
	logs := &syncbuf.Buffer{}
	// Debug, so the tests see every access line (routine answers are
	// logged at debug); a test may raise it.
	logLevel := &slog.LevelVar{}
	logLevel.Set(slog.LevelDebug)
	cfg := Config{
		OperatorTokens: []OperatorToken{
			{Name: "root", Token: rootToken},
			{Name: "p1-op", Token: p1Token, Products: []string{"p1"}},
			{Name: "other-op", Token: otherToken, Products: []string{"other"}},
			{Name: "multi-op", Token: multiToken, Products: []string{"p1", "other"}},
			{Name: "elsewhere-op", Token: elsewhereToken, Products: []string{"other", "p3"}},
		},
		Logger:              slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: logLevel})),
		Timers:              clk,
		GitHubWebhookSecret: []byte(testWebhookSecret),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(New(c, cfg))
	t.Cleanup(srv.Close)
	return &fixture{t: t, url: srv.URL, store: st, faulty: faulty, counts: counts, coord: c, clock: clk, logs: logs, logLevel: logLevel, blobs: blobs, runlogs: runlogs}
}

// result is an answered request.
type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// errorOf decodes an error answer.
func (r result) errorOf(t *testing.T) api.ErrorDetail {
	t.Helper()
	var e api.ErrorBody
	require.NoError(t, json.Unmarshal(r.body, &e), "not an error body: %s", r.body)
	return e.Error
}

type reqOption func(*http.Request)

func product(p string) reqOption { return func(r *http.Request) { r.Header.Set("X-Product-Id", p) } }

func contentType(ct string) reqOption {
	return func(r *http.Request) { r.Header.Set("Content-Type", ct) }
}

func header(k, v string) reqOption { return func(r *http.Request) { r.Header.Set(k, v) } }

// call sends one request. body is nil (none), a string or []byte (sent as
// is, JSON unless a content type option says otherwise), or a value to
// encode as JSON. token "" sends no Authorization.
func (f *fixture) call(method, path, token string, body any, opts ...reqOption) result {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		require.NoError(f.t, err)
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	require.NoError(f.t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A live stream does not end by itself: its status and headers
		// are the answer (streams have tests of their own).
		return result{status: resp.StatusCode, header: resp.Header}
	}
	out, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	return result{status: resp.StatusCode, header: resp.Header, body: out}
}

// ok sends a request that must answer want and decodes the answer into v.
func (f *fixture) ok(want int, v any, method, path, token string, body any, opts ...reqOption) result {
	f.t.Helper()
	res := f.call(method, path, token, body, opts...)
	require.Equal(f.t, want, res.status, "%s %s: %s", method, path, res.body)
	if v != nil {
		require.NoError(f.t, json.Unmarshal(res.body, v), "%s", res.body)
	}
	return res
}

func (f *fixture) putProduct(id string, repos ...string) {
	f.t.Helper()
	f.ok(200, nil, "PUT", "/api/fleet/products/"+id, rootToken, map[string]any{"repos": repos})
}

// enroll enrolls a factory and sends its first heartbeat with repos.
func (f *fixture) enroll(id string, products []string, repos ...string) string {
	f.t.Helper()
	var er api.EnrollResponse
	f.ok(201, &er, "POST", "/api/fleet/factories/enroll", rootToken, map[string]any{
		"factoryId": id, "kind": "static", "products": products,
		"capabilities": []string{"os:linux", "engine:claude", "has:git"}, "seatLimit": 4,
	})
	f.ok(200, nil, "POST", "/api/fleet/factories/heartbeat", er.Token, map[string]any{
		"capabilities": []string{"os:linux", "engine:claude", "has:git"}, "repos": repos, "load": 0, "health": "ok",
	})
	return er.Token
}

func (f *fixture) submit(prod, manifest string) *fleet.Job {
	f.t.Helper()
	var j fleet.Job
	f.ok(201, &j, "POST", "/api/fleet/jobs", rootToken, manifest, product(prod), contentType("text/markdown"))
	return &j
}

func (f *fixture) claim(token string) protocol.Claimed {
	f.t.Helper()
	var c protocol.Claimed
	f.ok(200, &c, "POST", "/api/fleet/claim", token, nil)
	return c
}

// heldJob puts product p1 (repo r1), enrolls factory f1 serving it,
// submits a job of manifest("r1", extra...) and has f1 claim it: the job,
// f1's token and the claim.
func (f *fixture) heldJob(extra ...string) (*fleet.Job, string, protocol.Claimed) {
	f.t.Helper()
	f.putProduct("p1", "r1")
	tok := f.enroll("f1", []string{"p1"}, "r1")
	j := f.submit("p1", manifest("r1", extra...))
	c := f.claim(tok)
	require.Equal(f.t, j.ID, c.Job.ID)
	return j, tok, c
}

// manifest builds a Markdown manifest for repo with extra front-matter lines.
func manifest(repo string, extra ...string) string {
	front := "title: Fix the login redirect\nrepo: " + repo + "\ncapabilities: [os:linux, engine:claude]\n"
	for _, e := range extra {
		front += e + "\n"
	}
	return "---\n" + front + "---\nTask body in Markdown, kept verbatim.\n"
}

// snapshot is every document of every container: id, revision and body.
type snapshot map[string]map[string]string

func (f *fixture) snapshot() snapshot {
	f.t.Helper()
	out := snapshotStore(f.t, f.store)
	// The blob store is state too: a refused upload must leave no bytes.
	blobs := map[string]string{}
	require.NoError(f.t, filepath.WalkDir(f.blobs.Dir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == ".lock" {
			return err
		}
		rel, _ := filepath.Rel(f.blobs.Dir(), path)
		blobs[rel] = ""
		return nil
	}))
	out["blobs"] = blobs
	return out
}

// snapshotStore is the snapshot of st, failing tb on a store error.
func snapshotStore(tb testing.TB, st *sqlite.Store) snapshot {
	tb.Helper()
	out := snapshot{}
	for _, c := range store.Containers {
		docs := map[string]string{}
		q := store.Query{}
		for {
			page, err := st.Query(context.Background(), c.Name, q)
			require.NoError(tb, err)
			for _, it := range page.Items {
				docs[it.PartitionKey+"/"+it.ID] = it.Rev + " " + string(it.Body)
			}
			if page.Continuation == "" {
				break
			}
			q.Continuation = page.Continuation
		}
		out[c.Name] = docs
	}
	return out
}
