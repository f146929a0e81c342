package httpapi

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/gigafactory/fleet/shared/fleet"
)

// DefaultWebhookBytesInFlight is the default of Config.WebhookBytesInFlight:
// two of GitHub's largest deliveries at once, and room besides. Real
// deliveries are a few kilobytes.
const DefaultWebhookBytesInFlight = 64 << 20

// bodyBudgetRetryAfter is the Retry-After of a body refused by a budget, in
// seconds: the bodies holding it end as fast as their senders send them.
const bodyBudgetRetryAfter = 1

// bodyBudget bounds the bytes of request bodies held at once by a route that
// must read a whole body before it knows who sent it. The GitHub webhook
// has no bearer: it can check a delivery's signature only once it has read
// up to 25 MB of it, so without a bound anyone who can reach the route
// could make the process hold 25 MB per connection. A body that does not
// fit is refused (429 throttled, Retry-After) before it is read further; a
// body of unknown length is counted as its buffer grows.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// take counts n more bytes, or reports false and counts nothing when they
// would not fit.
func (b *bodyBudget) take(n int64) bool {
	for {
		cur := b.used.Load()
		if cur+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// read reads r's whole body, at most limit bytes (over it, 413), counting
// what it holds against the budget until release is called. A body that
// ends early is 400.
func (b *bodyBudget) read(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	if r.ContentLength > limit {
		return nil, nil, &http.MaxBytesError{Limit: limit}
	}
	var held int64
	release = func() { b.used.Add(-held) }
	grow := func(n int) error {
		if !b.take(int64(n)) {
			return retryAfter{error: fleet.Errorf(fleet.CodeThrottled,
				"the deliveries being read hold all %d bytes this route may hold at once: retry later", b.max), seconds: bodyBudgetRetryAfter}
		}
		held += int64(n)
		return nil
	}
	fail := func(err error) ([]byte, func(), error) {
		release()
		if errors.As(err, new(retryAfter)) {
			return nil, nil, err
		}
		return nil, nil, bodyReadError(err)
	}
	if r.ContentLength >= 0 {
		// The length is known: count it all at once, and allocate it once.
		if err := grow(int(r.ContentLength)); err != nil {
			return fail(err)
		}
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return fail(err)
		}
		return body, release, nil
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	// Real deliveries are a few kilobytes: a first block of 4 KiB holds
	// most, and a body that grows past it doubles its buffer.
	const first = 4 << 10
	if err := grow(first); err != nil {
		return fail(err)
	}
	body = make([]byte, 0, first)
	for {
		if len(body) == cap(body) {
			// One byte past the limit lets MaxBytesReader say it was passed.
			next := min(2*cap(body), int(limit)+1)
			if err := grow(next - cap(body)); err != nil {
				return fail(err)
			}
			body = append(make([]byte, 0, next), body...)
		}
		n, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if errors.Is(err, io.EOF) {
			return body, release, nil
		}
		if err != nil {
			return fail(err)
		}
	}
}
