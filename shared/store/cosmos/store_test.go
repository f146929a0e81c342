package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/stretchr/testify/require"
)

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"no endpoint", Config{Database: "d"}, "Endpoint is required"},
		{"no database", Config{Endpoint: "https://a.documents.azure.com:443/"}, "Database is required"},
		{"no host", Config{Endpoint: "https:///x", Database: "d"}, "has no host"},
		{"bad scheme", Config{Endpoint: "ftp://a/", Database: "d"}, "scheme must be https"},
		{"http outside the emulator", Config{Endpoint: "http://a:8081/", Database: "d", Key: EmulatorKey}, "only allowed for the emulator"},
		{"http on the emulator", Config{Endpoint: "http://localhost:8081/", Database: "d", Emulator: true}, ""},
		{"emulator over https", Config{Endpoint: "https://localhost:8081/", Database: "d", Emulator: true}, ""},
		{"user-assigned managed identity", Config{Endpoint: "https://a.documents.azure.com:443/", Database: "d", ClientID: "00000000-0000-0000-0000-000000000001"}, ""},
		{"default credential", Config{Endpoint: "https://a.documents.azure.com:443/", Database: "d"}, ""},
		{"bad key", Config{Endpoint: "https://a.documents.azure.com:443/", Database: "d", Key: "not base64!"}, "account key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			s.Close()
		})
	}
}

func TestCredentialChoice(t *testing.T) {
	const endpoint = "https://a.documents.azure.com:443/"
	tests := []struct {
		name string
		cfg  Config
		want any // the credential's type; nil for key auth
	}{
		{"user-assigned managed identity", Config{Endpoint: endpoint, Database: "d", ClientID: "00000000-0000-0000-0000-000000000001"}, &azidentity.ManagedIdentityCredential{}},
		{"developer", Config{Endpoint: endpoint, Database: "d"}, &azidentity.DefaultAzureCredential{}},
		{"emulator key", Config{Endpoint: "https://localhost:8081/", Database: "d", Emulator: true, ClientID: "ignored"}, nil},
		{"account key", Config{Endpoint: endpoint, Database: "d", Key: EmulatorKey}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg)
			require.NoError(t, err)
			defer s.Close()
			if tt.want == nil {
				require.Nil(t, s.cfg.Credential)
				require.NotEmpty(t, s.cfg.Key)
				return
			}
			require.IsType(t, tt.want, s.cfg.Credential)
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Endpoint: "https://localhost:8081/", Database: "d", Emulator: true}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, EmulatorKey, c.Key, "the emulator gets the well-known key")
	require.Equal(t, DefaultOperationTimeout, c.OperationTimeout)
	require.Equal(t, DefaultThrottleRetries, c.ThrottleRetries)
	require.Equal(t, DefaultUnavailableRetries, c.UnavailableRetries)
	require.Equal(t, DefaultMaxRetryAfter, c.MaxRetryAfter)
	require.Equal(t, DefaultPageSize, c.PageSize)

	c, err = Config{Endpoint: "https://a/", Database: "d", ThrottleRetries: -1, UnavailableRetries: -1}.withDefaults()
	require.NoError(t, err)
	require.Zero(t, c.ThrottleRetries, "negative disables")
	require.Zero(t, c.UnavailableRetries, "negative disables")
	require.Empty(t, c.Key, "no key outside the emulator unless configured")
}

// TestEmulatorTransportIsOnlyForTheEmulator: certificate checks are skipped
// only with Config.Emulator.
func TestEmulatorTransportIsOnlyForTheEmulator(t *testing.T) {
	tr := emulatorTransport().Transport.(*http.Transport)
	require.True(t, tr.TLSClientConfig.InsecureSkipVerify)

	c, err := Config{Endpoint: "https://a/", Database: "d", Key: EmulatorKey}.withDefaults()
	require.NoError(t, err)
	require.False(t, c.Emulator)
	require.Nil(t, c.Transport, "a keyed non-emulator config keeps the SDK's verifying transport")
}

func TestPointOperationsRoundTrip(t *testing.T) {
	fx := newFixture(t, nil)
	s, ctx := fx.store, context.Background()

	rev1, err := s.Create(ctx, store.Jobs, "p1", "j1", []byte(`{"stage":"queued","attempts":0}`))
	require.NoError(t, err)
	require.NotEmpty(t, rev1)

	it, err := s.Read(ctx, store.Jobs, "p1", "j1")
	require.NoError(t, err)
	require.Equal(t, store.Item{ID: "j1", PartitionKey: "p1", Rev: rev1, Body: it.Body}, it)
	require.JSONEq(t, `{"stage":"queued","attempts":0}`, string(it.Body), "system properties and added fields are stripped")

	rev2, err := s.Replace(ctx, store.Jobs, "p1", "j1", []byte(`{"stage":"running","attempts":0}`), rev1)
	require.NoError(t, err)
	require.NotEqual(t, rev1, rev2)

	_, err = s.Replace(ctx, store.Jobs, "p1", "j1", []byte(`{"stage":"lost"}`), rev1)
	require.ErrorIs(t, err, store.ErrPrecondition, "stale revision")

	n, err := s.Increment(ctx, store.Jobs, "p1", "j1", "attempts", 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	n, err = s.Increment(ctx, store.Jobs, "p1", "j1", "dispatchEpoch", 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a missing field starts at delta")

	it, err = s.Read(ctx, store.Jobs, "p1", "j1")
	require.NoError(t, err)
	require.JSONEq(t, `{"stage":"running","attempts":2,"dispatchEpoch":1}`, string(it.Body))

	_, err = s.Create(ctx, store.Jobs, "p1", "j1", []byte(`{}`))
	require.ErrorIs(t, err, store.ErrExists)

	_, err = s.Upsert(ctx, store.Jobs, "p1", "j2", []byte(`{"stage":"queued"}`))
	require.NoError(t, err)
	rev, err := s.Upsert(ctx, store.Jobs, "p1", "j2", []byte(`{"stage":"done"}`))
	require.NoError(t, err)

	require.ErrorIs(t, s.Delete(ctx, store.Jobs, "p1", "j2", `"stale"`), store.ErrPrecondition)
	require.NoError(t, s.Delete(ctx, store.Jobs, "p1", "j2", rev))
	require.ErrorIs(t, s.Delete(ctx, store.Jobs, "p1", "j2", ""), store.ErrNotFound)
	_, err = s.Read(ctx, store.Jobs, "p1", "j2")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Increment(ctx, store.Jobs, "p1", "j2", "attempts", 1)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Replace(ctx, store.Jobs, "p1", "j2", []byte(`{}`), rev)
	require.ErrorIs(t, err, store.ErrNotFound)

	_, err = s.Read(ctx, store.Jobs, "other", "j1")
	require.ErrorIs(t, err, store.ErrNotFound, "the same id in another partition is another document")
}

// TestEveryPointOperationSendsThePartitionKey: Cosmos routes point
// operations by the x-ms-documentdb-partitionkey header; a missing or wrong
// one is a 400 or, worse, another document.
func TestEveryPointOperationSendsThePartitionKey(t *testing.T) {
	fx := newFixture(t, nil)
	s, ctx := fx.store, context.Background()

	rev, err := s.Create(ctx, store.Runs, "job-7", "r1", []byte(`{"n":1}`))
	require.NoError(t, err)
	_, err = s.Read(ctx, store.Runs, "job-7", "r1")
	require.NoError(t, err)
	rev, err = s.Replace(ctx, store.Runs, "job-7", "r1", []byte(`{"n":2}`), rev)
	require.NoError(t, err)
	_, err = s.Increment(ctx, store.Runs, "job-7", "r1", "n", 1)
	require.NoError(t, err)
	_, err = s.Upsert(ctx, store.Runs, "job-7", "r2", []byte(`{}`))
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, store.Runs, "job-7", "r2", ""))
	_, err = s.Read(ctx, store.Runs, "job-7", "absent")
	require.ErrorIs(t, err, store.ErrNotFound)
	_ = rev

	points := fx.fake.requests(pointRequests)
	methods := map[string]bool{}
	for _, r := range points {
		methods[r.Method] = true
		require.Equal(t, `["job-7"]`, r.Header.Get("x-ms-documentdb-partitionkey"), "%s %s", r.Method, r.Path)
	}
	require.Equal(t, map[string]bool{"GET": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true}, methods)
}

// TestCASWritesSendIfMatch: every conditional write carries the revision as
// If-Match, and only conditional writes carry one.
func TestCASWritesSendIfMatch(t *testing.T) {
	tests := []struct {
		name    string
		op      func(s *Store, rev string) error
		match   func(recorded) bool
		ifMatch bool
	}{
		{
			name: "replace",
			op: func(s *Store, rev string) error {
				_, err := s.Replace(context.Background(), store.Jobs, "p", "j", []byte(`{"v":2}`), rev)
				return err
			},
			match:   method(http.MethodPut),
			ifMatch: true,
		},
		{
			name:    "conditional delete",
			op:      func(s *Store, rev string) error { return s.Delete(context.Background(), store.Jobs, "p", "j", rev) },
			match:   method(http.MethodDelete),
			ifMatch: true,
		},
		{
			name:  "unconditional delete",
			op:    func(s *Store, _ string) error { return s.Delete(context.Background(), store.Jobs, "p", "j", "") },
			match: method(http.MethodDelete),
		},
		{
			name: "upsert",
			op: func(s *Store, _ string) error {
				_, err := s.Upsert(context.Background(), store.Jobs, "p", "j", []byte(`{}`))
				return err
			},
			match: upserts,
		},
		{
			name: "increment",
			op: func(s *Store, _ string) error {
				_, err := s.Increment(context.Background(), store.Jobs, "p", "j", "v", 1)
				return err
			},
			match: method(http.MethodPatch),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, nil)
			rev, err := fx.store.Create(context.Background(), store.Jobs, "p", "j", []byte(`{"v":1}`))
			require.NoError(t, err)
			require.Empty(t, fx.fake.requests(creates)[0].Header.Get("If-Match"), "create is not conditional")

			require.NoError(t, tt.op(fx.store, rev))
			reqs := fx.fake.requests(tt.match)
			require.Len(t, reqs, 1)
			if tt.ifMatch {
				require.Equal(t, rev, reqs[0].Header.Get("If-Match"))
			} else {
				require.Empty(t, reqs[0].Header.Get("If-Match"))
			}
		})
	}
}

func TestReplaceRefusesAnEmptyRevision(t *testing.T) {
	fx := newFixture(t, nil)
	_, err := fx.store.Replace(context.Background(), store.Jobs, "p", "j", []byte(`{}`), "")
	require.ErrorContains(t, err, "compare-and-swap")
	require.Empty(t, fx.fake.requests(docRequests), "nothing sent")
}

// TestStatusMapping: service answers map to the store's errors, and only
// reads are retried on 503.
func TestStatusMapping(t *testing.T) {
	tests := []struct {
		name     string
		match    func(recorded) bool
		resp     canned
		op       func(context.Context, *Store) error
		want     error
		requests int // requests matching match, retries included
	}{
		{
			name: "412 on replace", match: method(http.MethodPut), resp: status(412),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Replace(ctx, store.Jobs, "p", "seed", []byte(`{}`), `"rev"`)
				return err
			},
			want: store.ErrPrecondition, requests: 1,
		},
		{
			name: "412 on conditional delete", match: method(http.MethodDelete), resp: status(412),
			op:   func(ctx context.Context, s *Store) error { return s.Delete(ctx, store.Jobs, "p", "seed", `"rev"`) },
			want: store.ErrPrecondition, requests: 1,
		},
		{
			name: "409 on create", match: creates, resp: status(409),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Create(ctx, store.Jobs, "p", "new", []byte(`{}`))
				return err
			},
			want: store.ErrExists, requests: 1,
		},
		{
			name: "404 on read", match: method(http.MethodGet), resp: status(404),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Read(ctx, store.Jobs, "p", "seed")
				return err
			},
			want: store.ErrNotFound, requests: 1,
		},
		{
			name: "404 on increment", match: method(http.MethodPatch), resp: status(404),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Increment(ctx, store.Jobs, "p", "seed", "n", 1)
				return err
			},
			want: store.ErrNotFound, requests: 1,
		},
		{
			name: "429 forever on read", match: method(http.MethodGet), resp: status(429, "x-ms-retry-after-ms", "1"),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Read(ctx, store.Jobs, "p", "seed")
				return err
			},
			want: store.ErrThrottled, requests: 4, // ThrottleRetries 3
		},
		{
			name: "429 forever on create", match: creates, resp: status(429, "x-ms-retry-after-ms", "1"),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Create(ctx, store.Jobs, "p", "new", []byte(`{}`))
				return err
			},
			want: store.ErrThrottled, requests: 4, // a 429 was not executed: safe to replay a write
		},
		{
			name: "429 asking longer than MaxRetryAfter", match: method(http.MethodGet), resp: status(429, "x-ms-retry-after-ms", "3600000"),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Read(ctx, store.Jobs, "p", "seed")
				return err
			},
			want: store.ErrThrottled, requests: 1,
		},
		{
			name: "503 forever on read", match: method(http.MethodGet), resp: status(503),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Read(ctx, store.Jobs, "p", "seed")
				return err
			},
			want: store.ErrUnavailable, requests: 3, // UnavailableRetries 2
		},
		{
			name: "503 forever on query", match: queryRequests, resp: status(503),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Query(ctx, store.Jobs, store.Query{PartitionKey: "p"})
				return err
			},
			want: store.ErrUnavailable, requests: 3,
		},
		{
			name: "503 on create is not replayed", match: creates, resp: status(503),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Create(ctx, store.Jobs, "p", "new", []byte(`{}`))
				return err
			},
			want: store.ErrUnavailable, requests: 1,
		},
		{
			name: "503 on increment is not replayed", match: method(http.MethodPatch), resp: status(503),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Increment(ctx, store.Jobs, "p", "seed", "n", 1)
				return err
			},
			want: store.ErrUnavailable, requests: 1,
		},
		{
			// The adapter refuses an oversized body itself; a service 413
			// (its limit lower than ours, or a body grown by a patch) is the
			// same store error.
			name: "413 on replace", match: method(http.MethodPut), resp: status(413),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Replace(ctx, store.Jobs, "p", "seed", []byte(`{}`), `"rev"`)
				return err
			},
			want: store.ErrTooLarge, requests: 1,
		},
		{
			name: "400 has no store meaning", match: method(http.MethodGet), resp: status(400),
			op: func(ctx context.Context, s *Store) error {
				_, err := s.Read(ctx, store.Jobs, "p", "seed")
				return err
			},
			want: nil, requests: 1,
		},
	}
	storeErrs := []error{store.ErrNotFound, store.ErrExists, store.ErrPrecondition, store.ErrThrottled, store.ErrUnavailable, store.ErrTooLarge}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, nil)
			ctx := context.Background()
			_, err := fx.store.Create(ctx, store.Jobs, "p", "seed", []byte(`{"n":1}`))
			require.NoError(t, err)
			fx.fake.reset()
			fx.fake.always(tt.match, tt.resp)

			err = tt.op(ctx, fx.store)
			require.Error(t, err)
			for _, se := range storeErrs {
				require.Equal(t, se == tt.want, errors.Is(err, se), "errors.Is(%v, %v)", err, se)
			}
			var re *azcore.ResponseError
			require.ErrorAs(t, err, &re, "the SDK error stays reachable")
			require.Equal(t, tt.resp.status, re.StatusCode)
			require.NotContains(t, err.Error(), "\n", "one-line message")
			require.Len(t, fx.fake.requests(tt.match), tt.requests)
		})
	}
}

// TestThrottledThenSuccess: a 429 is retried after the server's
// x-ms-retry-after-ms and the operation succeeds on the second request.
func TestThrottledThenSuccess(t *testing.T) {
	tests := []struct {
		name  string
		match func(recorded) bool
		op    func(context.Context, *Store) error
	}{
		{"read", method(http.MethodGet), func(ctx context.Context, s *Store) error {
			_, err := s.Read(ctx, store.Jobs, "p", "seed")
			return err
		}},
		{"replace", method(http.MethodPut), func(ctx context.Context, s *Store) error {
			it, err := s.Read(ctx, store.Jobs, "p", "seed")
			if err != nil {
				return err
			}
			_, err = s.Replace(ctx, store.Jobs, "p", "seed", []byte(`{"n":2}`), it.Rev)
			return err
		}},
		{"query", queryRequests, func(ctx context.Context, s *Store) error {
			_, err := s.Query(ctx, store.Jobs, store.Query{Where: []store.Cond{store.Eq("n", 1)}})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, nil)
			ctx := context.Background()
			_, err := fx.store.Create(ctx, store.Jobs, "p", "seed", []byte(`{"n":1}`))
			require.NoError(t, err)
			fx.fake.reset()
			fx.fake.on(tt.match, status(429, "x-ms-retry-after-ms", "1"))

			require.NoError(t, tt.op(ctx, fx.store))
			require.Len(t, fx.fake.requests(tt.match), 2)
			st := fx.store.Stats()
			require.EqualValues(t, 1, st.Total().Throttled)
			require.Zero(t, st.Total().Errors)
		})
	}
}

// Test503ThenSuccess: a read answered 503 is retried by the store after the
// server's Retry-After or its own backoff.
func Test503ThenSuccess(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Create(ctx, store.Jobs, "p", "seed", []byte(`{"n":1}`))
	require.NoError(t, err)
	get := method(http.MethodGet)
	fx.fake.on(get, status(503, "x-ms-retry-after-ms", "250"), status(503))

	it, err := fx.store.Read(ctx, store.Jobs, "p", "seed")
	require.NoError(t, err)
	require.Equal(t, "seed", it.ID)
	require.Len(t, fx.fake.requests(get), 3)
	sleeps := fx.recordedSleeps()
	require.Len(t, sleeps, 2)
	require.Equal(t, 250*time.Millisecond, sleeps[0], "the server's Retry-After")
	require.InDelta(t, float64(2*DefaultUnavailableBackoff), float64(sleeps[1]), float64(DefaultUnavailableBackoff), "doubling backoff with jitter")
}

// TestEveryCallHasADeadline: a caller without a deadline gets
// OperationTimeout; a caller's own deadline is kept.
func TestEveryCallHasADeadline(t *testing.T) {
	fx := newFixture(t, func(c *Config) { c.OperationTimeout = time.Hour })
	before := time.Now()
	_, err := fx.store.Upsert(context.Background(), store.Jobs, "p", "j", []byte(`{}`))
	require.NoError(t, err)
	// The account metadata request runs under the SDK's own 60 s timeout.
	for _, r := range fx.fake.requests(docRequests) {
		require.False(t, r.Deadline.IsZero(), "%s %s has no deadline", r.Method, r.Path)
		require.WithinDuration(t, before.Add(time.Hour), r.Deadline, time.Minute)
	}

	fx.fake.reset()
	deadline := time.Now().Add(7 * time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_, err = fx.store.Read(ctx, store.Jobs, "p", "j")
	require.NoError(t, err)
	reqs := fx.fake.requests(docRequests)
	require.Len(t, reqs, 1)
	require.True(t, reqs[0].Deadline.Equal(deadline), "the caller's deadline is kept")
}

func TestDeadlineMapsToUnavailable(t *testing.T) {
	fx := newFixture(t, func(c *Config) { c.OperationTimeout = 30 * time.Millisecond })
	fx.fake.always(method(http.MethodGet), canned{hang: true})
	_, err := fx.store.Read(context.Background(), store.Jobs, "p", "j")
	require.ErrorIs(t, err, store.ErrUnavailable, "the store's own deadline: the service did not answer")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = fx.store.Read(ctx, store.Jobs, "p", "j")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, store.ErrUnavailable, "the caller gave up, the service did not fail")
}

func TestTransportAndProtocolFailures(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Read(ctx, store.Jobs, "p", "warm-up") // fetches the account topology
	require.ErrorIs(t, err, store.ErrNotFound)

	// A connection reset during a write: the SDK cannot know whether the
	// write happened and does not replay it.
	fx.fake.always(creates, canned{fail: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}})
	_, err = fx.store.Create(ctx, store.Jobs, "p", "j", []byte(`{}`))
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorIs(t, err, syscall.ECONNRESET)
	require.Len(t, fx.fake.requests(creates), 1)

	// A stored document the store cannot decode is a bug, not an outage.
	fx.fake.always(method(http.MethodGet), canned{status: 200, body: `[1]`})
	_, err = fx.store.Read(ctx, store.Jobs, "p", "j")
	require.ErrorContains(t, err, "stored document: body is not a JSON object")
	for _, se := range []error{store.ErrNotFound, store.ErrUnavailable, store.ErrThrottled} {
		require.NotErrorIs(t, err, se)
	}
	require.Len(t, fx.fake.requests(method(http.MethodGet)), 2, "not retried")
}

// TestFailedFirstContactIsRetried: the SDK caches a failed account
// metadata fetch for five minutes; the store replaces the client instead, so
// a transient failure at a cold start costs one call, not five minutes.
func TestFailedFirstContactIsRetried(t *testing.T) {
	tests := []struct {
		name string
		resp canned
	}{
		{"503", status(503)},
		{"connection refused", canned{fail: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}},
		{"401", status(401)},
	}
	account := func(r recorded) bool { return r.Method == http.MethodGet && strings.Trim(r.Path, "/") == "" }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, nil)
			ctx := context.Background()
			fx.fake.on(account, tt.resp)
			_, err := fx.store.Upsert(ctx, store.Jobs, "p", "j", []byte(`{}`))
			require.Error(t, err)
			require.Empty(t, fx.fake.requests(docRequests), "no data request before the topology is known")

			_, err = fx.store.Upsert(ctx, store.Jobs, "p", "j", []byte(`{}`))
			require.NoError(t, err, "the next call fetches the topology again")
			require.Len(t, fx.fake.requests(account), 2)

			// Once the account was reached, failures no longer rebuild.
			before := fx.store.conn.Load()
			fx.fake.always(method(http.MethodGet), status(500))
			_, err = fx.store.Read(ctx, store.Jobs, "p", "j")
			require.Error(t, err)
			require.Same(t, before, fx.store.conn.Load())
		})
	}
}

// TestDeadlineWhileThrottledIsThrottled: an operation whose deadline passes
// while it waits out 429s reports the throttling, wherever the deadline
// strikes: during the retry-after wait, or on the retry itself (in flight,
// or as the retry starts and the transport refuses an ended context). The
// retry hangs until the deadline, so the deadline lands on the retry every
// time; before, that try's context error wiped the 429 and the operation
// read as unavailable (1 run in a few hundred under load, when the deadline
// and the retry timer raced).
func TestDeadlineWhileThrottledIsThrottled(t *testing.T) {
	fx := newFixture(t, func(c *Config) {
		c.OperationTimeout = time.Second
		c.ThrottleRetries = 1000
	})
	_, err := fx.store.Read(context.Background(), store.Jobs, "p", "warm-up") // fetches the account topology
	require.ErrorIs(t, err, store.ErrNotFound)
	fx.fake.on(method(http.MethodGet), status(429, "x-ms-retry-after-ms", "20"), canned{hang: true})
	_, err = fx.store.Read(context.Background(), store.Jobs, "p", "j")
	require.ErrorIs(t, err, store.ErrThrottled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestArgumentsRefusedBeforeAnyRequest(t *testing.T) {
	fx := newFixture(t, nil)
	s, ctx := fx.store, context.Background()
	tests := []struct {
		name    string
		op      func() error
		wantErr string
	}{
		{"unknown container", func() error { _, err := s.Read(ctx, "nope", "p", "j"); return err }, "unknown container"},
		{"empty id", func() error { _, err := s.Read(ctx, store.Jobs, "p", ""); return err }, "id is empty"},
		{"id with slash", func() error { _, err := s.Read(ctx, store.Jobs, "p", "a/b"); return err }, "contains one of"},
		{"id with hash", func() error { return s.Delete(ctx, store.Jobs, "p", "a#b", "") }, "contains one of"},
		{"body not an object", func() error { _, err := s.Create(ctx, store.Jobs, "p", "j", []byte(`[1]`)); return err }, "not a JSON object"},
		{"body not JSON", func() error { _, err := s.Upsert(ctx, store.Jobs, "p", "j", []byte(`{`)); return err }, "not JSON"},
		{"body with trailing data", func() error { _, err := s.Upsert(ctx, store.Jobs, "p", "j", []byte(`{} {}`)); return err }, "after the JSON object"},
		{"duplicate field", func() error { _, err := s.Create(ctx, store.Jobs, "p", "j", []byte(`{"a":1,"a":2}`)); return err }, "duplicate field"},
		{"body id differs", func() error { _, err := s.Create(ctx, store.Jobs, "p", "j", []byte(`{"id":"k"}`)); return err }, "does not match id"},
		{"body partition key differs", func() error {
			_, err := s.Create(ctx, store.Jobs, "p", "j", []byte(`{"productId":"q"}`))
			return err
		}, "does not match partition key"},
		{"partition key not a string", func() error {
			_, err := s.Create(ctx, store.Jobs, "p", "j", []byte(`{"productId":1}`))
			return err
		}, "does not match partition key"},
		{"id-partitioned container with pk != id", func() error {
			_, err := s.Create(ctx, store.Factories, "f1", "f2", []byte(`{}`))
			return err
		}, "must equal id"},
		{"reserved field", func() error {
			_, err := s.Create(ctx, store.Jobs, "p", "j", []byte(`{"_fleetAdded":[]}`))
			return err
		}, "reserved"},
		{"increment of a bad field name", func() error {
			_, err := s.Increment(ctx, store.Jobs, "p", "j", "a.b", 1)
			return err
		}, "must match"},
		{"increment of the partition key", func() error {
			_, err := s.Increment(ctx, store.Jobs, "p", "j", "productId", 1)
			return err
		}, "cannot be incremented"},
		{"increment of a system field", func() error {
			_, err := s.Increment(ctx, store.Jobs, "p", "j", "_ts", 1)
			return err
		}, "cannot be incremented"},
		{"negative limit", func() error {
			_, err := s.Query(ctx, store.Jobs, store.Query{Limit: -1})
			return err
		}, "negative"},
		{"bad query field", func() error {
			_, err := s.Query(ctx, store.Jobs, store.Query{Where: []store.Cond{store.Eq("a b", 1)}})
			return err
		}, "must match"},
		{"garbage continuation", func() error {
			_, err := s.ReadChanges(ctx, store.Jobs, "!!", 1)
			return err
		}, "not a cosmos change-feed continuation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, tt.op(), tt.wantErr)
		})
	}
	require.Empty(t, fx.fake.requests(nil), "no request sent for refused arguments")
	require.EqualValues(t, len(tests), s.Stats().Total().Errors)
}

// TestBodies: bodies read back as written, whether or not they carried id
// and the partition key; what Cosmos stores carries both.
func TestBodies(t *testing.T) {
	tests := []struct {
		name      string
		container string
		pk, id    string
		body      string
		stored    string // as the fake holds it
		read      string
	}{
		{
			name: "bare body", container: store.Jobs, pk: "p", id: "j",
			body:   `{"stage":"queued"}`,
			stored: `{"stage":"queued","id":"j","productId":"p","_fleetAdded":["id","productId"]}`,
			read:   `{"stage":"queued"}`,
		},
		{
			name: "complete body", container: store.Jobs, pk: "p", id: "j",
			body:   `{"id":"j","productId":"p","stage":"queued","nested":{"_etag":"kept"}}`,
			stored: `{"id":"j","productId":"p","stage":"queued","nested":{"_etag":"kept"}}`,
			read:   `{"id":"j","productId":"p","stage":"queued","nested":{"_etag":"kept"}}`,
		},
		{
			name: "partitioned on id", container: store.Factories, pk: "f", id: "f",
			body:   `{"host":"h"}`,
			stored: `{"host":"h","id":"f","_fleetAdded":["id"]}`,
			read:   `{"host":"h"}`,
		},
		{
			name: "system properties from an earlier read are dropped", container: store.Jobs, pk: "p", id: "j",
			body:   `{"id":"j","productId":"p","_etag":"\"x\"","_ts":1,"_rid":"r","_self":"s","_attachments":"a"}`,
			stored: `{"id":"j","productId":"p"}`,
			read:   `{"id":"j","productId":"p"}`,
		},
		{
			name: "unicode and big numbers survive", container: store.Runs, pk: "job", id: "r",
			body:   `{"jobId":"job","msg":"h\u00e9 \"q\"","n":12345678901}`,
			stored: `{"jobId":"job","msg":"hé \"q\"","n":12345678901,"id":"r","_fleetAdded":["id"]}`,
			read:   `{"jobId":"job","msg":"hé \"q\"","n":12345678901}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, nil)
			ctx := context.Background()
			_, err := fx.store.Create(ctx, tt.container, tt.pk, tt.id, []byte(tt.body))
			require.NoError(t, err)
			stored, err := json.Marshal(fx.stored(tt.container, tt.pk, tt.id))
			require.NoError(t, err)
			require.JSONEq(t, tt.stored, string(stored))

			it, err := fx.store.Read(ctx, tt.container, tt.pk, tt.id)
			require.NoError(t, err)
			require.JSONEq(t, tt.read, string(it.Body))

			page, err := fx.store.Query(ctx, tt.container, store.Query{PartitionKey: tt.pk})
			require.NoError(t, err)
			require.Len(t, page.Items, 1)
			require.JSONEq(t, tt.read, string(page.Items[0].Body))
			require.Equal(t, it.Rev, page.Items[0].Rev)
			require.Equal(t, tt.pk, page.Items[0].PartitionKey)

			page, err = fx.store.Query(ctx, tt.container, store.Query{})
			require.NoError(t, err)
			require.Len(t, page.Items, 1)
			require.Equal(t, tt.pk, page.Items[0].PartitionKey, "cross-partition items carry their partition key")

			changes, err := fx.store.ReadChanges(ctx, tt.container, "", 10)
			require.NoError(t, err)
			require.Len(t, changes.Items, 1)
			require.JSONEq(t, tt.read, string(changes.Items[0].Body), "no _lsn either")
			require.Equal(t, store.Item{ID: tt.id, PartitionKey: tt.pk, Rev: it.Rev, Body: changes.Items[0].Body}, changes.Items[0])
		})
	}
}

func TestIncrementAsksForTheDocument(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Create(ctx, store.QueueStates, "p", "q", []byte(`{"depth":40}`))
	require.NoError(t, err)
	n, err := fx.store.Increment(ctx, store.QueueStates, "p", "q", "depth", -3)
	require.NoError(t, err)
	require.EqualValues(t, 37, n)

	patches := fx.fake.requests(method(http.MethodPatch))
	require.Len(t, patches, 1)
	require.Empty(t, patches[0].Header.Get("Prefer"), "content response on write: the new value comes from the body")
	require.JSONEq(t, `{"operations":[{"op":"incr","path":"/depth","value":-3}]}`, string(patches[0].Body))

	writes := fx.fake.requests(creates)
	require.Equal(t, "return=minimal", writes[0].Header.Get("Prefer"), "other writes do not ship the document back")
}

// TestSessionTokens: reads carry the session token of this process's last
// write, for read-your-writes under Session consistency.
func TestSessionTokens(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Create(ctx, store.Jobs, "p", "j", []byte(`{}`))
	require.NoError(t, err)
	_, err = fx.store.Read(ctx, store.Jobs, "p", "j")
	require.NoError(t, err)
	_, err = fx.store.Query(ctx, store.Jobs, store.Query{})
	require.NoError(t, err)

	require.Empty(t, fx.fake.requests(creates)[0].Header.Get(headerSessionToken), "writes need none")
	require.Equal(t, "0:-1#1", fx.fake.requests(method(http.MethodGet))[0].Header.Get(headerSessionToken))
	require.Equal(t, "0:-1#1", fx.fake.requests(queryRequests)[0].Header.Get(headerSessionToken))
	_, err = fx.store.Read(ctx, store.Runs, "p", "j")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Empty(t, fx.fake.requests(onContainer(store.Runs, docRequests))[0].Header.Get(headerSessionToken),
		"tokens are per container")
}

func TestSessionTokenMerge(t *testing.T) {
	tests := []struct {
		name    string
		headers []string
		want    []string // any order
	}{
		{"v2 token", []string{"0:-1#10#3=8"}, []string{"0:-1#10#3=8"}},
		{"v1 token", []string{"0:10"}, []string{"0:10"}},
		{"newer replaces older", []string{"0:-1#10", "0:-1#12"}, []string{"0:-1#12"}},
		{"older does not replace newer", []string{"0:-1#12", "0:-1#10"}, []string{"0:-1#12"}},
		{"ranges kept apart", []string{"0:-1#10", "1:-1#4"}, []string{"0:-1#10", "1:-1#4"}},
		{"compound header", []string{"0:-1#10, 1:-1#4", "1:-1#5"}, []string{"0:-1#10", "1:-1#5"}},
		{"garbage ignored", []string{"nonsense", "0:abc", "0:-1#7"}, []string{"0:-1#7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSessionTokens()
			for _, h := range tt.headers {
				s.merge("db/c", h)
			}
			got := s.get("db/c")
			var parts []string
			if got != "" {
				parts = splitTrim(got)
			}
			require.ElementsMatch(t, tt.want, parts)
			require.Empty(t, s.get("db/other"))
		})
	}
}

func splitTrim(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// TestStats: request charges and calls per operation kind, throttled
// attempts and metadata requests included.
func TestStats(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Create(ctx, store.Jobs, "p", "j", []byte(`{}`)) // + account metadata
	require.NoError(t, err)
	fx.fake.on(method(http.MethodGet), status(429, "x-ms-retry-after-ms", "1"))
	_, err = fx.store.Read(ctx, store.Jobs, "p", "j") // 429 + 200
	require.NoError(t, err)
	_, err = fx.store.Read(ctx, store.Jobs, "p", "absent") // 404
	require.ErrorIs(t, err, store.ErrNotFound)

	st := fx.store.Stats()
	require.Equal(t, OpStats{Calls: 1, RequestCharge: 3}, st.Create)
	require.Equal(t, OpStats{Calls: 2, Errors: 1, Throttled: 1, RequestCharge: 4.5}, st.Read)
	require.Equal(t, OpStats{Calls: 3, Errors: 1, Throttled: 1, RequestCharge: 7.5}, st.Total())
}

// TestIncrementIfEqualRefusesKeywords: a Cosmos SQL keyword needs the
// quoted form (c["value"]) in the patch's filter predicate, which the SDK
// would send unescaped inside the JSON body; such a name is refused before
// any request, as bad input and not as a failed condition.
func TestIncrementIfEqualRefusesKeywords(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	for _, c := range []struct{ field, guard string }{{"n", "value"}, {"Select", "g"}} {
		_, err := fx.store.IncrementIfEqual(t.Context(), store.QueueStates, "p1", "p1", c.field, c.guard, 1)
		require.ErrorContains(t, err, "Cosmos SQL keyword")
		require.NotErrorIs(t, err, store.ErrPrecondition)
		require.NotErrorIs(t, err, store.ErrNotFound)
	}
}
