package coord_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/blob"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// t0 is when every test starts; nothing here reads the wall clock.
var t0 = time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)

// newFakeClock is the injected clock, standing at t0 until a test moves it.
func newFakeClock() *clocktest.Clock { return clocktest.New(t0) }

// openStore opens the real SQLite store on a fresh file.
func openStore(t testing.TB) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet.db")
	return openStoreAt(t, path), path
}

// openStoreAt opens another handle on path: a second process's worth of
// connections on the same file.
func openStoreAt(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// Defaults every env uses: product p1 owns repos notes and api.
const (
	prod = "p1"
	repo = "notes"
)

// baseCaps are what a default factory advertises; the default job needs
// engine:claude (and, implicitly, repo:notes).
var baseCaps = []string{"os:linux", "engine:claude", "has:git"}

type env struct {
	toks  sync.Map // factory id -> *fleet.Token, of factories enrolled by factory()
	t     testing.TB
	ctx   context.Context
	raw   *sqlite.Store
	store store.Store // what the coordinator runs on (raw, or a decorator)
	path  string
	clock *clocktest.Clock
	c     *coord.Coordinator
}

type envOpt func(*envOptions)

type envOptions struct {
	cfg   coord.Config
	wrap  func(store.Store) store.Store
	pub   coord.Publisher
	blobs blob.Store
	deps  func(*coord.Deps)
}

// withDeps adjusts the coordinator's dependencies (a webhook, a logger).
func withDeps(fn func(*coord.Deps)) envOpt { return func(o *envOptions) { o.deps = fn } }

// withBlobs gives the coordinator a blob store for artifacts.
func withBlobs(b blob.Store) envOpt { return func(o *envOptions) { o.blobs = b } }

func withConfig(cfg coord.Config) envOpt { return func(o *envOptions) { o.cfg = cfg } }

// withPublisher attaches a dispatch transport.
func withPublisher(p coord.Publisher) envOpt { return func(o *envOptions) { o.pub = p } }

func withStore(wrap func(store.Store) store.Store) envOpt {
	return func(o *envOptions) { o.wrap = wrap }
}

// countingStore counts the env's store operations in *into.
func countingStore(into **storecount.Store) envOpt {
	return withStore(func(s store.Store) store.Store {
		*into = storecount.New(s)
		return *into
	})
}

// newEnv is a coordinator on a fresh SQLite file with product p1 declared.
func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	var o envOptions
	for _, fn := range opts {
		fn(&o)
	}
	raw, path := openStore(t)
	// context.Background, not t.Context: for a cancellable context the
	// SQLite driver starts a watcher goroutine per statement, which makes
	// the write-heavy races here several times slower.
	e := &env{t: t, ctx: context.Background(), raw: raw, store: raw, path: path, clock: newFakeClock()}
	if o.wrap != nil {
		e.store = o.wrap(raw)
	}
	deps := coord.Deps{Store: e.store, Publisher: o.pub, Blobs: o.blobs}
	if o.deps != nil {
		o.deps(&deps)
	}
	e.c = e.newCoord(o.cfg, deps)
	_, err := e.c.PutProduct(e.ctx, prod, "Product one", []string{repo, "api"})
	require.NoError(t, err)
	return e
}

// peer is a second coordinator on the same file through its own store
// handle: another process, with its own caches.
func (e *env) peer() *coord.Coordinator {
	return e.newCoord(e.c.Config(), coord.Deps{Store: openStoreAt(e.t, e.path)})
}

// withPublisher replaces the coordinator by one on the same store with a
// dispatch transport: a process restarted with a bus configured.
func (e *env) withPublisher(p coord.Publisher) {
	e.c = e.newCoord(e.c.Config(), coord.Deps{Store: e.store, Publisher: p})
}

// newCoord builds a coordinator on the env's clock.
func (e *env) newCoord(cfg coord.Config, deps coord.Deps) *coord.Coordinator {
	e.t.Helper()
	deps.Clock = e.clock
	c, err := coord.New(cfg, deps)
	require.NoError(e.t, err)
	return c
}

// manifest builds a manifest from front-matter lines; repo notes and
// capability engine:claude unless the lines say otherwise.
func manifest(lines ...string) []byte {
	front := strings.Join(lines, "\n")
	if !strings.Contains(front, "repo:") {
		front = "repo: " + repo + "\n" + front
	}
	if !strings.Contains(front, "capabilities:") {
		front += "\ncapabilities: [engine:claude]"
	}
	if !strings.Contains(front, "title:") {
		front += "\ntitle: a job"
	}
	return []byte("---\n" + front + "\n---\nDo the thing.\n")
}

// submit creates a job in p1 and requires it to be new.
func (e *env) submit(lines ...string) *fleet.Job {
	e.t.Helper()
	j, created, err := e.c.Submit(e.ctx, prod, manifest(lines...))
	require.NoError(e.t, err)
	require.True(e.t, created)
	return j
}

// job reads a job fresh from the store.
func (e *env) job(id string) *fleet.Job {
	e.t.Helper()
	j, err := e.c.GetJob(e.ctx, prod, id)
	require.NoError(e.t, err)
	return j
}

// rawJob is the stored document, byte for byte.
func (e *env) rawJob(id string) store.Item {
	e.t.Helper()
	it, err := e.raw.Read(e.ctx, store.Jobs, prod, id)
	require.NoError(e.t, err)
	return it
}

type factoryOpt func(*catalog.EnrollRequest, *catalog.Heartbeat)

func kind(k fleet.FactoryKind) factoryOpt {
	return func(r *catalog.EnrollRequest, _ *catalog.Heartbeat) { r.Kind = k }
}

func caps(cs ...string) factoryOpt {
	return func(r *catalog.EnrollRequest, hb *catalog.Heartbeat) { r.Capabilities, hb.Capabilities = cs, cs }
}

func products(ps ...string) factoryOpt {
	return func(r *catalog.EnrollRequest, _ *catalog.Heartbeat) { r.Products = ps }
}

// repos are the repos the factory's heartbeat says it has checked out.
func repos(rs ...string) factoryOpt {
	return func(_ *catalog.EnrollRequest, hb *catalog.Heartbeat) { hb.Repos = rs }
}

// factory enrolls a factory (baseCaps, 4 seats, every product unless
// products() says otherwise) and heartbeats once with its capabilities and
// repo notes. It returns the factory's token.
func (e *env) factory(id string, opts ...factoryOpt) *fleet.Token {
	e.t.Helper()
	req := catalog.EnrollRequest{FactoryID: id, Capabilities: baseCaps, SeatLimit: 4}
	hb := catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}}
	for _, o := range opts {
		o(&req, &hb)
	}
	_, secret, err := e.c.Enroll(e.ctx, req)
	require.NoError(e.t, err)
	tok, err := e.c.AuthenticateFactory(e.ctx, secret)
	require.NoError(e.t, err)
	_, err = e.c.Heartbeat(e.ctx, tok, hb)
	require.NoError(e.t, err)
	e.toks.Store(id, tok)
	return tok
}

// beat heartbeats as tok's factory with its default report: it is alive
// now (health is derived from silence on every read).
func (e *env) beat(tok *fleet.Token) {
	e.t.Helper()
	_, err := e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}})
	require.NoError(e.t, err)
}

// as is a claim by factory id with the token factory() enrolled it with.
func (e *env) as(id string) coord.ClaimRequest {
	e.t.Helper()
	tok, ok := e.toks.Load(id)
	require.True(e.t, ok, "factory %s was not enrolled by env.factory", id)
	return coord.ClaimRequest{Token: tok.(*fleet.Token)}
}

// claim polls for work as factoryID and requires a job.
func (e *env) claim(factoryID string) *protocol.Claimed {
	e.t.Helper()
	cl, err := e.c.Claim(e.ctx, e.as(factoryID))
	require.NoError(e.t, err)
	require.NotNil(e.t, cl, "factory %s found no job to claim", factoryID)
	return cl
}

// events lists a job's events; every type must be one fleet.EventTypes
// lists (the list the API publishes).
func (e *env) events(id string) []fleet.Event {
	e.t.Helper()
	evs, err := e.c.Events(e.ctx, prod, id, 0, 0)
	require.NoError(e.t, err)
	for _, ev := range evs {
		require.Contains(e.t, fleet.EventTypes, ev.Type, "event %d of job %s", ev.Seq, id)
	}
	return evs
}

func eventTypes(evs []fleet.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev.Type)
	}
	return out
}

// requireContiguous checks the events are seq 1..n in order.
func requireContiguous(t *testing.T, evs []fleet.Event) {
	t.Helper()
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Seq, "event %d (%s) out of sequence", i, ev.Type)
	}
}

func (e *env) queueVersion() int64 {
	e.t.Helper()
	qs, err := e.c.QueueState(e.ctx, prod)
	require.NoError(e.t, err)
	return qs.Version
}

func ptr[T any](v T) *T { return &v }

// requireCode checks err is a fleet error of code (and field, when given).
func requireCode(t *testing.T, err error, code fleet.Code, field string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, fleet.CodeOf(err), "error: %v", err)
	if field != "" {
		var fe *fleet.Error
		require.ErrorAs(t, err, &fe)
		require.Equal(t, field, fe.Field, "error: %v", err)
	}
}

// recordingPublisher is the fake dispatch transport: it records what it was
// asked to publish and fails while fail is set.
type recordingPublisher struct {
	mu       sync.Mutex
	msgs     []protocol.DispatchMessage
	controls []protocol.ControlMessage
	fail     error
}

// PublishControl makes the fake a coord.ControlPublisher too.
func (p *recordingPublisher) PublishControl(_ context.Context, m protocol.ControlMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.controls = append(p.controls, m)
	return nil
}

func (p *recordingPublisher) sentControls() []protocol.ControlMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]protocol.ControlMessage(nil), p.controls...)
}

func (p *recordingPublisher) Publish(_ context.Context, m protocol.DispatchMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.msgs = append(p.msgs, m)
	return nil
}

func (p *recordingPublisher) setFail(err error) {
	p.mu.Lock()
	p.fail = err
	p.mu.Unlock()
}

func (p *recordingPublisher) sent() []protocol.DispatchMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]protocol.DispatchMessage(nil), p.msgs...)
}

// hookStore decorates a Store: beforeReplace runs before every Replace of a
// job and may return an error to inject instead of writing. It counts job
// reads and replaces.
type hookStore struct {
	store.Store
	jobReads, jobReplaces atomic.Int64
	mu                    sync.Mutex
	beforeReplace         func(pk, id string) error
	// beforeFactoryReplace is beforeReplace for factory documents.
	beforeFactoryReplace func(pk, id string) error
	// beforeTokenReplace is beforeReplace for token documents.
	beforeTokenReplace func(pk, id string) error
	// afterFactoryRead runs after every read of a factory document.
	afterFactoryRead func(pk, id string) error
	// jobReadIDs lists the id of every job read, in order (under mu).
	jobReadIDs []string
}

// jobReadsOf counts the reads of job id so far.
func (s *hookStore) jobReadsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.jobReadIDs {
		if r == id {
			n++
		}
	}
	return n
}

func (s *hookStore) setBeforeTokenReplace(fn func(pk, id string) error) {
	s.mu.Lock()
	s.beforeTokenReplace = fn
	s.mu.Unlock()
}

func (s *hookStore) setAfterFactoryRead(fn func(pk, id string) error) {
	s.mu.Lock()
	s.afterFactoryRead = fn
	s.mu.Unlock()
}

func (s *hookStore) setBeforeFactoryReplace(fn func(pk, id string) error) {
	s.mu.Lock()
	s.beforeFactoryReplace = fn
	s.mu.Unlock()
}

func (s *hookStore) setBeforeReplace(fn func(pk, id string) error) {
	s.mu.Lock()
	s.beforeReplace = fn
	s.mu.Unlock()
}

func (s *hookStore) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	if container == store.Jobs {
		s.jobReads.Add(1)
	}
	it, err := s.Store.Read(ctx, container, pk, id)
	s.mu.Lock()
	if container == store.Jobs {
		s.jobReadIDs = append(s.jobReadIDs, id)
	}
	hook := s.afterFactoryRead
	s.mu.Unlock()
	if container == store.Factories && hook != nil {
		if herr := hook(pk, id); herr != nil {
			return store.Item{}, herr
		}
	}
	return it, err
}

func (s *hookStore) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	s.mu.Lock()
	var hook func(pk, id string) error
	switch container {
	case store.Jobs:
		s.jobReplaces.Add(1)
		hook = s.beforeReplace
	case store.Factories:
		hook = s.beforeFactoryReplace
	case store.Tokens:
		hook = s.beforeTokenReplace
	}
	s.mu.Unlock()
	if hook != nil {
		if err := hook(pk, id); err != nil {
			return "", err
		}
	}
	return s.Store.Replace(ctx, container, pk, id, body, ifRev)
}

// once wraps fn so it runs on the first call only; later calls return nil.
func once(fn func(pk, id string) error) func(pk, id string) error {
	var done atomic.Bool
	return func(pk, id string) error {
		if done.Swap(true) {
			return nil
		}
		return fn(pk, id)
	}
}

var errInjected = errors.New("injected publish failure")

// snapshotContainers is every document of the given containers: key,
// revision and body.
func (e *env) snapshotContainers(containers ...string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for _, c := range containers {
		q := store.Query{}
		for {
			page, err := e.raw.Query(e.ctx, c, q)
			require.NoError(e.t, err)
			for _, it := range page.Items {
				out[c+"/"+it.PartitionKey+"/"+it.ID] = it.Rev + " " + string(it.Body)
			}
			if page.Continuation == "" {
				break
			}
			q.Continuation = page.Continuation
		}
	}
	return out
}

// docInt reads one integer field of a document whose partition key is its
// id (the ledger, a queue state); ok is false while the field is absent,
// and rev is the document's revision ("" while there is none).
func (e *env) docInt(container, id, field string) (v int64, ok bool, rev string) {
	e.t.Helper()
	it, err := e.raw.Read(e.ctx, container, id, id)
	if errors.Is(err, store.ErrNotFound) {
		return 0, false, ""
	}
	require.NoError(e.t, err)
	var doc map[string]json.RawMessage
	require.NoError(e.t, json.Unmarshal(it.Body, &doc))
	raw, ok := doc[field]
	if ok {
		require.NoError(e.t, json.Unmarshal(raw, &v))
	}
	return v, ok, it.Rev
}
