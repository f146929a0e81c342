// Package cosmos is the store.Store backend on Azure Cosmos DB for NoSQL,
// through the azcosmos SDK (v1.5.0, gateway mode).
//
// Shape: the containers and partition keys of store.Containers (Terraform
// creates them in production; EnsureContainers creates them on the emulator).
// Rev is the document's _etag and every CAS write sends it as If-Match, so
// the primary replica decides races. Bodies read back without Cosmos's system
// properties (see body.go). Queries are single-partition, or plain
// cross-partition filters (see BuildQuery). The change feed is read per feed
// range in latest-version mode, its continuation carrying every range's
// position (see changefeed.go).
//
// Failure handling: 429 and 449 are retried inside the SDK pipeline after the
// server's Retry-After; a 503 on a read is retried by the store; every call
// runs under a deadline (Config.OperationTimeout when the caller set none);
// errors map to coord's store errors (errors.go); a client whose first
// contact with the account failed is replaced rather than left failing for
// the SDK's five-minute refresh interval (Store.reconnect). Request charges
// are summed per operation kind (Stats).
package cosmos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/retry"
)

// Store is a store.Store on one Cosmos DB database. It is safe for
// concurrent use; create one per process and Close it on shutdown.
type Store struct {
	cfg        Config
	containers map[string]*container // store.Containers by name
	sessions   *sessionTokens
	stats      statsRecorder

	// conn is the SDK client in use; reconnect replaces it (see there).
	conn atomic.Pointer[conn]
	// accountSeen is set once the account metadata was fetched: from then
	// on the SDK client has a topology and needs no rebuilding.
	accountSeen   atomic.Bool
	reconnectMu   sync.Mutex
	lastReconnect time.Time

	// unavailable is how reads retry a 503 (see run).
	unavailable retry.Policy
	// sleep waits between 503 retries; tests replace it so they never sleep.
	sleep retry.Sleeper
}

var _ store.Store = (*Store)(nil)

// container is one of store.Containers.
type container struct {
	def     store.Container
	pkField string // the partition key path without its leading '/'
}

// conn is one SDK client and the database and container clients on it.
type conn struct {
	client *azcosmos.Client
	db     *azcosmos.DatabaseClient
	colls  map[string]*azcosmos.ContainerClient
}

func (cn *conn) coll(c *container) *azcosmos.ContainerClient { return cn.colls[c.def.Name] }

// New builds a Store from cfg. It sends no request: the first operation
// fetches the account's topology, and a wrong endpoint or credential shows up
// there as an error.
func New(cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Key == "" && cfg.Credential == nil {
		// Made once, so that a replaced client (reconnect) keeps the
		// credential's token cache.
		if cfg.Credential, err = newCredential(cfg.ClientID); err != nil {
			return nil, err
		}
	}
	s := &Store{cfg: cfg, containers: map[string]*container{}, sessions: newSessionTokens(),
		unavailable: unavailablePolicy(cfg), sleep: retry.On(clock.System{})}
	for _, def := range store.Containers {
		field := strings.TrimPrefix(def.PartitionKey, "/")
		if !fieldName.MatchString(field) {
			return nil, fmt.Errorf("cosmos: container %s: partition key %q is not a top-level field", def.Name, def.PartitionKey)
		}
		s.containers[def.Name] = &container{def: def, pkField: field}
	}
	cn, err := s.connect()
	if err != nil {
		return nil, err
	}
	s.conn.Store(cn)
	return s, nil
}

// connect builds an SDK client and its database and container clients.
func (s *Store) connect() (*conn, error) {
	client, err := newClient(s.cfg, observerPolicy{sessions: s.sessions, accountSeen: &s.accountSeen})
	if err != nil {
		return nil, err
	}
	db, err := client.NewDatabase(s.cfg.Database)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cosmos: database %q: %w", s.cfg.Database, err)
	}
	cn := &conn{client: client, db: db, colls: map[string]*azcosmos.ContainerClient{}}
	for name := range s.containers {
		cc, err := db.NewContainer(name)
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("cosmos: container %s: %w", name, err)
		}
		cn.colls[name] = cc
	}
	return cn, nil
}

// reconnect replaces a client whose first contact with the account failed.
//
// azcosmos v1.5.0 fetches the account topology on the first request and,
// when that fails, answers every request for the next five minutes
// (its refresh interval) with the same cached error without trying again.
// One transient failure at a cold start — the managed identity endpoint not
// ready yet, a DNS blip, a 503 — would fail every call for five minutes. A
// fresh client retries the fetch, so until the account was reached once, a
// failed call replaces the client (at most once a second).
func (s *Store) reconnect(failed *conn) {
	if s.accountSeen.Load() {
		return
	}
	s.reconnectMu.Lock()
	defer s.reconnectMu.Unlock()
	if s.conn.Load() != failed || time.Since(s.lastReconnect) < time.Second {
		return // another call replaced it already, or did so a moment ago
	}
	cn, err := s.connect()
	if err != nil {
		return // configuration errors surfaced in New; keep the old client
	}
	s.lastReconnect = time.Now()
	s.conn.Store(cn)
	// Closing only drops the old client's reference to the caches shared
	// per endpoint, which the new client holds too; calls still running on
	// the old client finish normally.
	failed.client.Close()
}

// newCredential is the Entra ID credential: the user-assigned managed
// identity with that client id (the Functions app's identity, which holds
// the data-plane role), or DefaultAzureCredential (az login, workload or
// system-assigned identity) for developers.
func newCredential(clientID string) (azcore.TokenCredential, error) {
	var (
		cred azcore.TokenCredential
		err  error
	)
	if clientID != "" {
		cred, err = azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
			ID: azidentity.ClientID(clientID),
		})
	} else {
		cred, err = azidentity.NewDefaultAzureCredential(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("cosmos: credential: %w", err)
	}
	return cred, nil
}

// newClient builds the SDK client: key auth when a key is configured,
// cfg.Credential otherwise.
func newClient(cfg Config, observer observerPolicy) (*azcosmos.Client, error) {
	maxRetries := int32(cfg.ThrottleRetries)
	if maxRetries == 0 {
		maxRetries = -1 // azcore reads 0 as "default (3)"; negative means none
	}
	transport := cfg.Transport
	if transport == nil && cfg.Emulator {
		transport = emulatorTransport()
	}
	opts := &azcosmos.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Retry: policy.RetryOptions{
				MaxRetries: maxRetries,
				// Used only when a retried answer carries no Retry-After
				// (449 does not); 429 always does.
				RetryDelay:    50 * time.Millisecond,
				MaxRetryDelay: cfg.MaxRetryAfter,
				ShouldRetry:   shouldRetry,
			},
			PerRetryPolicies: []policy.Policy{observer},
			Transport:        transport,
		},
		PreferredRegions: cfg.PreferredRegions,
	}
	if cfg.Key != "" {
		key, err := azcosmos.NewKeyCredential(cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("cosmos: account key: %w", err)
		}
		c, err := azcosmos.NewClientWithKey(cfg.Endpoint, key, opts)
		if err != nil {
			return nil, fmt.Errorf("cosmos: client for %s: %w", cfg.Endpoint, err)
		}
		return c, nil
	}
	c, err := azcosmos.NewClient(cfg.Endpoint, cfg.Credential, opts)
	if err != nil {
		return nil, fmt.Errorf("cosmos: client for %s: %w", cfg.Endpoint, err)
	}
	return c, nil
}

// emulatorTransport skips certificate verification: the emulator serves a
// self-signed certificate generated at its start. Config.Emulator is the
// only way to get here.
func emulatorTransport() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // the emulator's certificate is self-signed; only with Config.Emulator
	}
	return &http.Client{Transport: t}
}

// Close releases the client's shared caches. The Store must not be used
// afterwards.
func (s *Store) Close() { s.conn.Load().client.Close() }

// Stats returns the request units and call counts per operation kind.
func (s *Store) Stats() Stats { return s.stats.snapshot() }

func (s *Store) container(name string) (*container, error) {
	c, ok := s.containers[name]
	if !ok {
		return nil, fmt.Errorf("unknown container %q (not in store.Containers)", name)
	}
	return c, nil
}

// run executes one store operation: it applies the operation deadline,
// attaches a tracker for request charges, retries 503s when the operation is
// a read, maps the error, and records stats.
func (s *Store) run(ctx context.Context, kind opKind, where string, read bool, fn func(context.Context, *conn) error) error {
	parent := ctx
	cancel := context.CancelFunc(func() {})
	own := false
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, s.cfg.OperationTimeout)
		own = true
	}
	defer cancel()
	t := &tracker{}
	if err := parent.Err(); err != nil {
		// The caller gave up already: send nothing, so that no canceled
		// write can happen after the caller saw its error.
		s.stats.record(kind, 0, 0, true)
		return classify(kind.String(), where, err, t, false)
	}
	ctx = withTracker(ctx, t)

	cn := s.conn.Load()
	p := s.unavailable
	if !read {
		p.Attempts = 1
	}
	// A deadline during a wait ends the retries with the 503, the better
	// report (retry.Do returns the operation's last error).
	err := retry.Do(ctx, s.sleep, p, func(ctx context.Context) error {
		err := fn(ctx, cn)
		return retry.After(err, serverRetryAfter(err))
	})
	charge, throttled, _, _ := t.snapshot()
	if err != nil {
		s.reconnect(cn)
		ownDeadline := own && parent.Err() == nil && ctx.Err() != nil
		err = classify(kind.String(), where, err, t, ownDeadline)
	}
	s.stats.record(kind, charge, throttled, err != nil)
	return err
}

// refuse records and returns an argument error found before any request.
func (s *Store) refuse(kind opKind, where string, err error) error {
	s.stats.record(kind, 0, 0, true)
	return invalid(kind.String(), where, err)
}

// unavailablePolicy is how a read retries a 503, UnavailableRetries times:
// after the server's Retry-After when it sent one, otherwise after an
// exponential backoff with ±20% jitter (so a fleet of processes does not
// return in lockstep), capped by MaxRetryAfter.
func unavailablePolicy(cfg Config) retry.Policy {
	return retry.Policy{
		Initial:   cfg.UnavailableBackoff,
		Max:       cfg.MaxRetryAfter,
		Jitter:    retry.Jitter{Min: 0.8, Max: 1.2},
		Attempts:  cfg.UnavailableRetries + 1,
		Retryable: func(err error) bool { return isStatus(err, http.StatusServiceUnavailable) },
	}
}

// serverRetryAfter is the delay a failed response asked for; 0 when it
// asked none.
func serverRetryAfter(err error) time.Duration {
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.RawResponse != nil {
		return retryAfter(re.RawResponse.Header)
	}
	return 0
}

// retryAfter reads a server-requested delay: x-ms-retry-after-ms (Cosmos) or
// Retry-After in seconds.
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("x-ms-retry-after-ms"); v != "" {
		if ms, err := time.ParseDuration(v + "ms"); err == nil {
			return ms
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if sec, err := time.ParseDuration(v + "s"); err == nil {
			return sec
		}
	}
	return 0
}

func isStatus(err error, status int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == status
}

func where(container, pk, id string) string {
	return fmt.Sprintf("%s pk=%q id=%q", container, pk, id)
}

// point resolves and validates the arguments of a point operation.
func (s *Store) point(kind opKind, containerName, pk, id string) (*container, error) {
	c, err := s.container(containerName)
	if err != nil {
		return nil, s.refuse(kind, where(containerName, pk, id), err)
	}
	if err := validateID(id); err != nil {
		return nil, s.refuse(kind, where(containerName, pk, id), err)
	}
	return c, nil
}

// write resolves a point write and prepares its body.
func (s *Store) write(kind opKind, containerName, pk, id string, body []byte) (*container, []byte, error) {
	c, err := s.point(kind, containerName, pk, id)
	if err != nil {
		return nil, nil, err
	}
	doc, err := prepareBody(body, id, c.pkField, pk)
	if err != nil {
		return nil, nil, s.refuse(kind, where(containerName, pk, id), err)
	}
	return c, doc, nil
}

// revOf returns a write response's ETag. An empty one would later turn a CAS
// into an unconditional write, so it is an error.
func revOf(resp azcosmos.ItemResponse) (string, error) {
	if resp.ETag == "" {
		return "", errors.New("response carries no ETag")
	}
	return string(resp.ETag), nil
}

// Create writes a new document; ErrExists when the id is taken in the
// partition.
func (s *Store) Create(ctx context.Context, containerName, pk, id string, body []byte) (string, error) {
	c, doc, err := s.write(opCreate, containerName, pk, id, body)
	if err != nil {
		return "", err
	}
	var rev string
	err = s.run(ctx, opCreate, where(containerName, pk, id), false, func(ctx context.Context, cn *conn) error {
		resp, err := cn.coll(c).CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), doc, nil)
		if err != nil {
			return err
		}
		rev, err = revOf(resp)
		return err
	})
	return rev, err
}

// Read returns one document; ErrNotFound when absent.
func (s *Store) Read(ctx context.Context, containerName, pk, id string) (store.Item, error) {
	c, err := s.point(opRead, containerName, pk, id)
	if err != nil {
		return store.Item{}, err
	}
	var item store.Item
	err = s.run(ctx, opRead, where(containerName, pk, id), true, func(ctx context.Context, cn *conn) error {
		resp, err := cn.coll(c).ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), id, nil)
		if err != nil {
			return err
		}
		d, err := decodeDoc(resp.Value, c.pkField)
		if err != nil {
			return fmt.Errorf("stored document: %w", err)
		}
		rev := string(resp.ETag)
		if rev == "" {
			rev = d.etag
		}
		item = store.Item{ID: id, PartitionKey: pk, Rev: rev, Body: d.body}
		return nil
	})
	return item, err
}

// Replace overwrites a document if its _etag is still ifRev (If-Match);
// ErrPrecondition when it changed, ErrNotFound when it is gone. An empty
// ifRev is refused: it would make the write unconditional, and a CAS that
// silently stops being one is how double claims happen. Use Upsert for an
// unconditional write.
func (s *Store) Replace(ctx context.Context, containerName, pk, id string, body []byte, ifRev string) (string, error) {
	if ifRev == "" {
		return "", s.refuse(opReplace, where(containerName, pk, id), errors.New("ifRev is empty: Replace is a compare-and-swap; use Upsert to write unconditionally"))
	}
	c, doc, err := s.write(opReplace, containerName, pk, id, body)
	if err != nil {
		return "", err
	}
	etag := azcore.ETag(ifRev)
	var rev string
	err = s.run(ctx, opReplace, where(containerName, pk, id), false, func(ctx context.Context, cn *conn) error {
		resp, err := cn.coll(c).ReplaceItem(ctx, azcosmos.NewPartitionKeyString(pk), id, doc, &azcosmos.ItemOptions{IfMatchEtag: &etag})
		if err != nil {
			return err
		}
		rev, err = revOf(resp)
		return err
	})
	return rev, err
}

// Upsert writes a document whether or not it exists.
func (s *Store) Upsert(ctx context.Context, containerName, pk, id string, body []byte) (string, error) {
	c, doc, err := s.write(opUpsert, containerName, pk, id, body)
	if err != nil {
		return "", err
	}
	var rev string
	err = s.run(ctx, opUpsert, where(containerName, pk, id), false, func(ctx context.Context, cn *conn) error {
		resp, err := cn.coll(c).UpsertItem(ctx, azcosmos.NewPartitionKeyString(pk), doc, nil)
		if err != nil {
			return err
		}
		rev, err = revOf(resp)
		return err
	})
	return rev, err
}

// Delete removes a document, only at revision ifRev when it is set
// (If-Match); ErrNotFound when absent, ErrPrecondition when it changed.
func (s *Store) Delete(ctx context.Context, containerName, pk, id, ifRev string) error {
	c, err := s.point(opDelete, containerName, pk, id)
	if err != nil {
		return err
	}
	var opts *azcosmos.ItemOptions
	if ifRev != "" {
		etag := azcore.ETag(ifRev)
		opts = &azcosmos.ItemOptions{IfMatchEtag: &etag}
	}
	return s.run(ctx, opDelete, where(containerName, pk, id), false, func(ctx context.Context, cn *conn) error {
		_, err := cn.coll(c).DeleteItem(ctx, azcosmos.NewPartitionKeyString(pk), id, opts)
		return err
	})
}

// Increment adds delta to an integer top-level field with a Cosmos patch
// "incr" operation, atomic on the server, and returns the new value read
// from the patched document. A missing field is created with value delta
// (Cosmos patch semantics). ErrNotFound when the document is absent.
func (s *Store) Increment(ctx context.Context, containerName, pk, id, field string, delta int64) (int64, error) {
	return s.increment(ctx, containerName, pk, id, field, "", delta)
}

// IncrementIfEqual is Increment with a filter predicate: the service applies
// the patch only while guard equals field on the document (one atomic
// write) and answers 412 otherwise, which is ErrPrecondition. An absent
// field compares as undefined, so it never matches.
func (s *Store) IncrementIfEqual(ctx context.Context, containerName, pk, id, field, guard string, delta int64) (int64, error) {
	if guard == "" {
		return 0, s.refuse(opIncrement, where(containerName, pk, id), errors.New("no guard field"))
	}
	return s.increment(ctx, containerName, pk, id, field, guard, delta)
}

// increment is both: unconditional when guard is "".
func (s *Store) increment(ctx context.Context, containerName, pk, id, field, guard string, delta int64) (int64, error) {
	c, err := s.point(opIncrement, containerName, pk, id)
	if err != nil {
		return 0, err
	}
	w := where(containerName, pk, id)
	switch {
	case !fieldName.MatchString(field):
		return 0, s.refuse(opIncrement, w, fmt.Errorf("field %q: must match %s", field, fieldName))
	case guard != "" && !fieldName.MatchString(guard):
		return 0, s.refuse(opIncrement, w, fmt.Errorf("guard field %q: must match %s", guard, fieldName))
	case guard != "" && (reservedWords[strings.ToLower(guard)] || reservedWords[strings.ToLower(field)]):
		// The SDK writes the condition into the body unescaped, so the
		// quoted form such a name needs (c["value"]) cannot be sent.
		return 0, s.refuse(opIncrement, w, fmt.Errorf("field %q or guard %q is a Cosmos SQL keyword", field, guard))
	case field == "id" || field == c.pkField || field == addedField || systemFields[field]:
		return 0, s.refuse(opIncrement, w, fmt.Errorf("field %q cannot be incremented", field))
	}
	var ops azcosmos.PatchOperations
	if guard != "" {
		ops.SetCondition("FROM c WHERE " + propertyRef(guard) + " = " + propertyRef(field))
	}
	ops.AppendIncrement("/"+field, delta)
	var n int64
	err = s.run(ctx, opIncrement, w, false, func(ctx context.Context, cn *conn) error {
		resp, err := cn.coll(c).PatchItem(ctx, azcosmos.NewPartitionKeyString(pk), id, ops,
			&azcosmos.ItemOptions{EnableContentResponseOnWrite: true})
		if err != nil {
			return err
		}
		n, err = intField(resp.Value, field)
		return err
	})
	return n, err
}

// Query returns one page of documents matching q. Single-partition queries
// come in id order; cross-partition ones in no defined order (BuildQuery
// says why). Pages the service returns empty but with a continuation (a
// cross-partition query visiting partitions with no match) are drained, so
// an empty page always means the end.
func (s *Store) Query(ctx context.Context, containerName string, q store.Query) (store.Page, error) {
	w := fmt.Sprintf("%s pk=%q", containerName, q.PartitionKey)
	c, err := s.container(containerName)
	if err != nil {
		return store.Page{}, s.refuse(opQuery, w, err)
	}
	if q.Limit < 0 {
		return store.Page{}, s.refuse(opQuery, w, fmt.Errorf("limit %d is negative", q.Limit))
	}
	partitioned := q.PartitionKey != ""
	if strings.ContainsFunc(q.Continuation, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		// Sent as a header, which the HTTP client refuses to write (an
		// error of no kind): no continuation the service issues has one.
		return store.Page{}, s.refuse(opQuery, w, fmt.Errorf("continuation %q is not of a query: %w", q.Continuation, store.ErrBadContinuation))
	}
	stmt, err := BuildQuery(q.Where, partitioned, q.Descending)
	if err != nil {
		return store.Page{}, s.refuse(opQuery, w, err)
	}
	if stmt.MatchesNothing {
		s.stats.record(opQuery, 0, 0, false)
		return store.Page{}, nil
	}
	limit := q.Limit
	if limit == 0 {
		limit = s.cfg.PageSize
	}
	pk := azcosmos.NewPartitionKey() // cross-partition: the empty key
	crossPartition := !partitioned
	if partitioned {
		pk = azcosmos.NewPartitionKeyString(q.PartitionKey)
	}
	var page store.Page
	err = s.run(ctx, opQuery, w, true, func(ctx context.Context, cn *conn) error {
		opts := &azcosmos.QueryOptions{
			QueryParameters: stmt.Params,
			PageSizeHint:    int32(min(limit, 1<<30)),
			// A single-partition query must never fan out: its ORDER BY
			// is only servable within one partition.
			EnableCrossPartitionQuery: &crossPartition,
		}
		if q.Continuation != "" {
			cont := q.Continuation
			opts.ContinuationToken = &cont
		}
		pager := cn.coll(c).NewQueryItemsPager(stmt.Text, pk, opts)
		for first := true; ; first = false {
			resp, err := pager.NextPage(ctx)
			if err != nil {
				// The statement is the builder's and sent without a
				// continuation too: a 400 to the caller's continuation is
				// the service refusing it (garbage, another query's).
				if first && q.Continuation != "" && isStatus(err, http.StatusBadRequest) {
					err = badContinuation{err}
				}
				return err
			}
			items := make([]store.Item, 0, len(resp.Items))
			for _, raw := range resp.Items {
				d, err := decodeDoc(raw, c.pkField)
				if err != nil {
					return fmt.Errorf("stored document: %w", err)
				}
				itemPK := d.pk
				if partitioned {
					itemPK = q.PartitionKey
				}
				items = append(items, store.Item{ID: d.id, PartitionKey: itemPK, Rev: d.etag, Body: d.body})
			}
			if len(items) > 0 || resp.ContinuationToken == nil || *resp.ContinuationToken == "" {
				page = store.Page{Items: items}
				if resp.ContinuationToken != nil {
					page.Continuation = *resp.ContinuationToken
				}
				return nil
			}
		}
	})
	if err != nil {
		return store.Page{}, err
	}
	return page, nil
}
