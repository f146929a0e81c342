package cosmos

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

const testDB = "fleet"

// fixture is a Store on a fakeCosmos holding every coord container.
type fixture struct {
	t     *testing.T
	fake  *fakeCosmos
	store *Store

	mu     sync.Mutex
	sleeps []time.Duration // waits the store asked for between 503 retries
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	f := newFake(t)
	defs := map[string]string{}
	for _, c := range store.Containers {
		defs[c.Name] = c.PartitionKey
	}
	f.addContainers(testDB, defs)
	fx := &fixture{t: t, fake: f}
	fx.store = fx.open(mod)
	return fx
}

// open builds another Store on the same fake account.
func (fx *fixture) open(mod func(*Config)) *Store {
	fx.t.Helper()
	cfg := Config{
		Endpoint:           fx.fake.endpoint,
		Database:           testDB,
		Key:                EmulatorKey,
		Transport:          fx.fake,
		OperationTimeout:   5 * time.Second,
		ThrottleRetries:    3,
		UnavailableRetries: 2,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	require.NoError(fx.t, err)
	s.sleep = func(ctx context.Context, d time.Duration) error {
		fx.mu.Lock()
		fx.sleeps = append(fx.sleeps, d)
		fx.mu.Unlock()
		return ctx.Err()
	}
	fx.t.Cleanup(s.Close)
	return s
}

func (fx *fixture) recordedSleeps() []time.Duration {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return append([]time.Duration(nil), fx.sleeps...)
}

// stored returns the document as the fake holds it (system properties
// excluded), or nil.
func (fx *fixture) stored(container, pk, id string) map[string]json.RawMessage {
	fx.fake.mu.Lock()
	defer fx.fake.mu.Unlock()
	d := fx.fake.colls[testDB+"/"+container].docs[pk+"\x00"+id]
	if d == nil {
		return nil
	}
	return d.body
}

// Request matchers.

func docRequests(r recorded) bool   { return r.docOp() }
func pointRequests(r recorded) bool { return r.pointOp() }
func queryRequests(r recorded) bool { return r.isQuery() }

func method(m string) func(recorded) bool {
	return func(r recorded) bool { return r.pointOp() && r.Method == m }
}

func creates(r recorded) bool {
	return r.pointOp() && r.Method == http.MethodPost && r.Header.Get("x-ms-documentdb-is-upsert") == ""
}

func upserts(r recorded) bool {
	return r.pointOp() && r.Method == http.MethodPost && r.Header.Get("x-ms-documentdb-is-upsert") != ""
}

func changeFeedRequests(r recorded) bool { return r.isChangeFeed() }

func onContainer(name string, m func(recorded) bool) func(recorded) bool {
	return func(r recorded) bool {
		return strings.Contains(r.Path, "/colls/"+name+"/") && m(r)
	}
}

func status(code int, header ...string) canned {
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return canned{status: code, header: h, body: `{"code":"Canned","message":"canned response"}`}
}
