package httpapi

import (
	"net/http"
	"sync"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Caps on long-lived requests (API.md, "Limits on long-lived requests").
//
// Every live stream and every long poll holds a goroutine, a subscription
// and a connection (two behind the Functions host or its emulator) for up
// to MaxStream. Without a bound, one token could open thousands of them:
// 10,500 streams from one factory token ran the stack out of file
// descriptors and stalled every other product's heartbeats. So each counts
// against a cap per principal (one token cannot crowd out the others) and
// one per process (all tokens together cannot exhaust the process). Past
// either the answer is 429 throttled, given after authentication and
// before any store read or subscription: a refused request costs no more
// than a rejected token.
//
// The caps are per process: where the platform runs several instances of
// the app, a principal may hold the per-principal cap on each of them.

// Cap defaults.
const (
	DefaultMaxStreamsPerPrincipal = 32
	DefaultMaxStreams             = 2048
	// streamRetryAfter is the Retry-After of a refused stream, in seconds. A
	// slot frees only when a stream of the same principal (or of anyone,
	// for the process cap) ends, which takes longer than a store throttle
	// takes to clear; retrying every second would only cost authentications.
	streamRetryAfter = 5
)

// longLived says which requests of a route count against the caps.
type longLived int

const (
	shortLived longLived = iota
	// alwaysLong: every request (the …/stream routes).
	alwaysLong
	// longWithWait: requests with a ?wait= above zero (the long polls).
	longWithWait
)

// counts reports whether r, on a route of kind l, is long-lived. A ?wait=
// that does not parse is left to the handler, which answers 400 naming it
// before it opens anything.
func (l longLived) counts(r *http.Request) bool {
	switch l {
	case alwaysLong:
		return true
	case longWithWait:
		d, err := waitParam(r)
		return err == nil && d > 0
	}
	return false
}

// streamCaps counts the long-lived requests in flight.
type streamCaps struct {
	perPrincipal int
	total        int

	mu    sync.Mutex
	open  map[string]int
	inUse int
}

func newStreamCaps(perPrincipal, total int) *streamCaps {
	if perPrincipal <= 0 {
		perPrincipal = DefaultMaxStreamsPerPrincipal
	}
	if total <= 0 {
		total = DefaultMaxStreams
	}
	return &streamCaps{perPrincipal: perPrincipal, total: total, open: map[string]int{}}
}

// retryAfter is an error whose answer tells the client when to retry,
// instead of the default of its code (writeError).
type retryAfter struct {
	error
	seconds int
}

func (e retryAfter) Unwrap() error { return e.error }

// errStreamCap is the refusal: 429 throttled, retry after streamRetryAfter.
func errStreamCap(format string, args ...any) error {
	return retryAfter{error: fleet.Errorf(fleet.CodeThrottled, format, args...), seconds: streamRetryAfter}
}

// acquire takes a slot for principal key, or refuses with errStreamCap.
// release gives the slot back; it is safe to call once.
func (c *streamCaps) acquire(key string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.open[key] >= c.perPrincipal:
		return nil, errStreamCap("this token already holds %d open streams and long polls, the most one principal may hold (FLEET_MAX_STREAMS_PER_PRINCIPAL); close one or retry after the Retry-After delay", c.perPrincipal)
	case c.inUse >= c.total:
		return nil, errStreamCap("the server holds %d open streams and long polls, its limit (FLEET_MAX_STREAMS); retry after the Retry-After delay", c.total)
	}
	c.open[key]++
	c.inUse++
	var once sync.Once
	return func() { once.Do(func() { c.release(key) }) }, nil
}

func (c *streamCaps) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inUse--
	if c.open[key]--; c.open[key] <= 0 {
		delete(c.open, key)
	}
}
