// Package storefault wraps a store.Store and injects faults into a fraction
// of its calls: errors (store.ErrUnavailable, the store being out of reach)
// and added latency. The chaos campaign (tests/chaos) turns it on in the
// local stack with FLEET_STORE_FAULTS; it is never on by default.
//
// An injected error is returned before the inner store is called, so a
// failed call changed nothing: the fault is a store that could not be
// reached, not one that applied a write and lost the answer.
package storefault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/store"
)

// Config is what to inject: each call fails with probability ErrorRate and,
// independently, is delayed by Latency with probability LatencyRate.
type Config struct {
	ErrorRate   float64
	LatencyRate float64
	Latency     time.Duration
}

// Enabled reports whether the config injects anything.
func (c Config) Enabled() bool { return c.ErrorRate > 0 || (c.LatencyRate > 0 && c.Latency > 0) }

// Parse reads a fault spec: comma-separated "errors:RATE" and
// "latency:RATE:DURATION" terms, rates in [0, 1], e.g.
// "errors:0.02,latency:0.05:50ms". "" or "off" injects nothing.
func Parse(spec string) (Config, error) {
	var c Config
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "off" {
		return c, nil
	}
	seen := map[string]bool{}
	for _, term := range strings.Split(spec, ",") {
		parts := strings.Split(strings.TrimSpace(term), ":")
		kind := parts[0]
		if seen[kind] {
			return Config{}, fmt.Errorf("%q: %s given twice", term, kind)
		}
		seen[kind] = true
		switch {
		case kind == "errors" && len(parts) == 2:
			r, err := rate(parts[1])
			if err != nil {
				return Config{}, fmt.Errorf("%q: %w", term, err)
			}
			c.ErrorRate = r
		case kind == "latency" && len(parts) == 3:
			r, err := rate(parts[1])
			if err != nil {
				return Config{}, fmt.Errorf("%q: %w", term, err)
			}
			d, err := time.ParseDuration(parts[2])
			if err != nil || d <= 0 || d > time.Minute {
				return Config{}, fmt.Errorf("%q: latency must be a Go duration in (0, 1m]", term)
			}
			c.LatencyRate, c.Latency = r, d
		default:
			return Config{}, fmt.Errorf("%q: want errors:RATE or latency:RATE:DURATION", term)
		}
	}
	return c, nil
}

func rate(s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r < 0 || r > 1 {
		return 0, fmt.Errorf("rate %q must be a number in [0, 1]", s)
	}
	return r, nil
}

// ErrInjected is wrapped in every injected error, next to
// store.ErrUnavailable, so a log line tells an injected fault from a real one.
var ErrInjected = fmt.Errorf("storefault: injected fault")

// Counts are the faults injected so far.
type Counts struct {
	Errors int64 `json:"errors"`
	Delays int64 `json:"delays"`
	Calls  int64 `json:"calls"`
}

// Store is a store.Store that injects faults before passing calls on.
type Store struct {
	inner store.Store
	cfg   Config
	sleep func(context.Context, time.Duration) error

	mu  sync.Mutex
	rng *rand.Rand

	errors, delays, calls atomic.Int64
}

var _ store.Store = (*Store)(nil)

// Options are the test seams: the random source and the sleep.
type Options struct {
	// Rand draws in [0, 1); default: a PCG seeded from the clock.
	Rand *rand.Rand
	// Sleep waits d or until ctx ends; default: a timer.
	Sleep func(context.Context, time.Duration) error
}

// New wraps inner.
func New(inner store.Store, cfg Config, o Options) *Store {
	s := &Store{inner: inner, cfg: cfg, rng: o.Rand, sleep: o.Sleep}
	if s.rng == nil {
		now := uint64(time.Now().UnixNano())
		s.rng = rand.New(rand.NewPCG(now, now>>1|1))
	}
	if s.sleep == nil {
		s.sleep = sleepCtx
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() store.Store { return s.inner }

// Snapshot returns the counts so far.
func (s *Store) Snapshot() Counts {
	return Counts{Errors: s.errors.Load(), Delays: s.delays.Load(), Calls: s.calls.Load()}
}

// inject delays and/or fails one call named op.
func (s *Store) inject(ctx context.Context, op string) error {
	s.calls.Add(1)
	s.mu.Lock()
	delay := s.rng.Float64() < s.cfg.LatencyRate
	fail := s.rng.Float64() < s.cfg.ErrorRate
	s.mu.Unlock()
	if delay && s.cfg.Latency > 0 {
		s.delays.Add(1)
		if err := s.sleep(ctx, s.cfg.Latency); err != nil {
			return err
		}
	}
	if fail {
		s.errors.Add(1)
		return fmt.Errorf("%s: %w (%w)", op, store.ErrUnavailable, ErrInjected)
	}
	return nil
}

// Create may fail or be delayed.
func (s *Store) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if err := s.inject(ctx, "create"); err != nil {
		return "", err
	}
	return s.inner.Create(ctx, container, pk, id, body)
}

// Read may fail or be delayed.
func (s *Store) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	if err := s.inject(ctx, "read"); err != nil {
		return store.Item{}, err
	}
	return s.inner.Read(ctx, container, pk, id)
}

// Replace may fail or be delayed.
func (s *Store) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	if err := s.inject(ctx, "replace"); err != nil {
		return "", err
	}
	return s.inner.Replace(ctx, container, pk, id, body, ifRev)
}

// Upsert may fail or be delayed.
func (s *Store) Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if err := s.inject(ctx, "upsert"); err != nil {
		return "", err
	}
	return s.inner.Upsert(ctx, container, pk, id, body)
}

// Delete may fail or be delayed.
func (s *Store) Delete(ctx context.Context, container, pk, id, ifRev string) error {
	if err := s.inject(ctx, "delete"); err != nil {
		return err
	}
	return s.inner.Delete(ctx, container, pk, id, ifRev)
}

// Increment may fail or be delayed.
func (s *Store) Increment(ctx context.Context, container, pk, id, field string, delta int64) (int64, error) {
	if err := s.inject(ctx, "increment"); err != nil {
		return 0, err
	}
	return s.inner.Increment(ctx, container, pk, id, field, delta)
}

// IncrementIfEqual may fail or be delayed, as an increment.
func (s *Store) IncrementIfEqual(ctx context.Context, container, pk, id, field, guard string, delta int64) (int64, error) {
	if err := s.inject(ctx, "increment"); err != nil {
		return 0, err
	}
	return s.inner.IncrementIfEqual(ctx, container, pk, id, field, guard, delta)
}

// Query may fail or be delayed.
func (s *Store) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	if err := s.inject(ctx, "query"); err != nil {
		return store.Page{}, err
	}
	return s.inner.Query(ctx, container, q)
}

// ReadChanges may fail or be delayed.
func (s *Store) ReadChanges(ctx context.Context, container, continuation string, max int) (store.ChangePage, error) {
	if err := s.inject(ctx, "read changes"); err != nil {
		return store.ChangePage{}, err
	}
	return s.inner.ReadChanges(ctx, container, continuation, max)
}

// ChangesHead may fail or be delayed.
func (s *Store) ChangesHead(ctx context.Context, container string) (string, error) {
	if err := s.inject(ctx, "changes head"); err != nil {
		return "", err
	}
	return s.inner.ChangesHead(ctx, container)
}
