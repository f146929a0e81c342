package cosmos

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Header names of the Cosmos DB REST protocol the adapter reads or writes
// itself (the SDK keeps its own copies unexported).
const (
	headerRequestCharge = "x-ms-request-charge"
	headerSessionToken  = "x-ms-session-token"
	headerActivityID    = "x-ms-activity-id"
	headerSubstatus     = "x-ms-substatus"
	headerIsQuery       = "x-ms-documentdb-query"
)

// Status codes Cosmos DB uses beyond net/http's names.
const (
	statusRetryWith = 449 // a transient write conflict inside the service; the write was not applied
)

// tracker accumulates what the wire saw during one store operation: every
// attempt the SDK made, retries included. It is reached through the request
// context by observerPolicy. The SDK may finish background work (a topology
// refresh) on a context derived from the operation's after the operation
// returns, hence the mutex.
type tracker struct {
	mu         sync.Mutex
	charge     float64
	throttled  int
	lastStatus int
	lastErr    error
}

type trackerKey struct{}

func withTracker(ctx context.Context, t *tracker) context.Context {
	return context.WithValue(ctx, trackerKey{}, t)
}

func (t *tracker) observe(resp *http.Response, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		// A try the operation's own context ended (its deadline struck
		// during a retry, or before the retry reached the wire) says
		// nothing about the server: the last answer stays what was
		// happening, so a deadline hit while throttled is still throttling.
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		t.lastErr = err
		t.lastStatus = 0
		return
	}
	t.lastErr = nil
	t.lastStatus = resp.StatusCode
	if resp.StatusCode == http.StatusTooManyRequests {
		t.throttled++
	}
	if v := resp.Header.Get(headerRequestCharge); v != "" {
		if f, perr := strconv.ParseFloat(v, 64); perr == nil {
			t.charge += f
		}
	}
}

func (t *tracker) snapshot() (charge float64, throttled, lastStatus int, lastErr error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.charge, t.throttled, t.lastStatus, t.lastErr
}

// observerPolicy sits per retry, next to the transport: it sees every HTTP
// attempt, including the ones the SDK's retry policies absorb. It records
// request charges and statuses into the operation's tracker (so RU figures
// include throttled attempts and a deadline hit while waiting out a 429 is
// still reported as throttling), and it carries session tokens.
type observerPolicy struct {
	sessions    *sessionTokens
	accountSeen *atomic.Bool // set on the first successful account metadata read
}

func (p observerPolicy) Do(req *policy.Request) (*http.Response, error) {
	raw := req.Raw()
	coll, docs := collectionOf(raw.URL.Path)
	if docs && raw.Header.Get(headerSessionToken) == "" && isRead(raw) {
		if tok := p.sessions.get(coll); tok != "" {
			raw.Header.Set(headerSessionToken, tok)
		}
	}
	resp, err := req.Next()
	if t, ok := raw.Context().Value(trackerKey{}).(*tracker); ok {
		t.observe(resp, err)
	}
	if err == nil && docs {
		p.sessions.merge(coll, resp.Header.Get(headerSessionToken))
	}
	if err == nil && resp.StatusCode/100 == 2 && raw.Method == http.MethodGet && strings.Trim(raw.URL.Path, "/") == "" {
		p.accountSeen.Store(true)
	}
	return resp, err
}

// isRead reports requests served by any replica, the ones that need a
// session token to observe this process's own writes.
func isRead(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Header.Get(headerIsQuery) != ""
}

// collectionOf returns the collection link of a request path and whether the
// request addresses documents ("/dbs/d/colls/c/docs[/id]").
func collectionOf(path string) (string, bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) >= 5 && seg[0] == "dbs" && seg[2] == "colls" && seg[4] == "docs" {
		return seg[1] + "/" + seg[3], true
	}
	return "", false
}

// sessionTokens gives this process read-your-own-writes under the account's
// Session consistency (terraform: cosmos_consistency_level = "Session").
// The Go SDK does not track session tokens: without one, a read may be
// served by a replica that has not applied this process's last write yet,
// and a Create followed by a Read could report ErrNotFound. Correctness of
// claims does not depend on it (every CAS is checked by the primary against
// _etag), but callers expect to read what they just wrote.
//
// A session token is "<pkRangeId>:<token>" where the token's global LSN is
// its second '#'-separated field (v2, "-1#123#...") or the whole token
// (v1, "123"). The tracker keeps the newest token per partition key range
// and sends all of a collection's tokens, comma-separated, which is how
// Cosmos accepts a token covering several ranges; the gateway picks the
// range that serves the request.
type sessionTokens struct {
	mu     sync.Mutex
	byColl map[string]map[string]sessionToken
}

type sessionToken struct {
	raw string // "<pkRangeId>:<token>"
	lsn int64
}

func newSessionTokens() *sessionTokens {
	return &sessionTokens{byColl: map[string]map[string]sessionToken{}}
}

func (s *sessionTokens) merge(coll, header string) {
	if header == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ranges := s.byColl[coll]
	if ranges == nil {
		ranges = map[string]sessionToken{}
		s.byColl[coll] = ranges
	}
	for _, part := range strings.Split(header, ",") {
		part = strings.TrimSpace(part)
		rangeID, tok, ok := strings.Cut(part, ":")
		if !ok || rangeID == "" || tok == "" {
			continue
		}
		lsn, ok := sessionLSN(tok)
		if !ok {
			continue
		}
		if cur, exists := ranges[rangeID]; exists && cur.lsn >= lsn {
			continue
		}
		ranges[rangeID] = sessionToken{raw: part, lsn: lsn}
	}
}

func (s *sessionTokens) get(coll string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ranges := s.byColl[coll]
	if len(ranges) == 0 {
		return ""
	}
	parts := make([]string, 0, len(ranges))
	for _, t := range ranges {
		parts = append(parts, t.raw)
	}
	return strings.Join(parts, ",")
}

// sessionLSN extracts the global LSN of a session token (without its range
// prefix).
func sessionLSN(tok string) (int64, bool) {
	fields := strings.Split(tok, "#")
	s := fields[0]
	if len(fields) >= 2 {
		s = fields[1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// shouldRetry is the azcore retry policy's decision. Only answers that prove
// the request was not executed are retried there, with the server's
// Retry-After (x-ms-retry-after-ms) as the delay: 429 (the request-unit
// budget was exceeded before execution) and 449 (RetryWith). Everything else
// — 503, 408, 5xx, transport errors — is left to the SDK's own region-aware
// policy, which retries reads but never writes whose outcome is unknown, and
// to Store.run, which retries 503 on reads.
func shouldRetry(resp *http.Response, err error) bool {
	if err != nil || resp == nil {
		return false
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == statusRetryWith
}
