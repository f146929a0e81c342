package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/retry"
)

// draw returns a Rand that always draws r.
func draw(r float64) func() float64 { return func() float64 { return r } }

func TestDelay(t *testing.T) {
	t.Parallel()
	doubling := retry.Policy{Initial: 30 * time.Second, Max: 30 * time.Minute}
	spread := retry.Policy{Initial: 200 * time.Millisecond, Max: 30 * time.Second, Jitter: retry.Jitter{Min: 0.8, Max: 1.2}}
	tests := []struct {
		name string
		p    retry.Policy
		n    int
		want time.Duration
	}{
		{"first failure waits Initial", doubling, 1, 30 * time.Second},
		{"n below 1 counts as 1", doubling, 0, 30 * time.Second},
		{"negative n counts as 1", doubling, -3, 30 * time.Second},
		{"doubles per failure", doubling, 3, 2 * time.Minute},
		{"last step below the cap", doubling, 6, 16 * time.Minute},
		{"capped at Max", doubling, 7, 30 * time.Minute},
		{"stays capped after many failures", doubling, 1 << 20, 30 * time.Minute},
		{"Initial above Max is capped", retry.Policy{Initial: time.Hour, Max: time.Minute}, 1, time.Minute},
		{"no Max grows without cap", retry.Policy{Initial: time.Second}, 11, 1024 * time.Second},
		{"no Max saturates instead of overflowing", retry.Policy{Initial: time.Second}, 1 << 20, math.MaxInt64},
		{"multiplier", retry.Policy{Initial: time.Second, Multiplier: 3}, 3, 9 * time.Second},
		{"multiplier 1 is a constant wait", retry.Policy{Initial: time.Second, Multiplier: 1}, 50, time.Second},
		{"zero Initial waits nothing", retry.Policy{Max: time.Minute}, 5, 0},
		{"negative Initial waits nothing", retry.Policy{Initial: -time.Second}, 2, 0},
		{"jitter low end", with(spread, draw(0)), 1, 160 * time.Millisecond},
		{"jitter middle", with(spread, draw(0.5)), 2, 400 * time.Millisecond},
		{"jitter high end", with(spread, draw(0.999)), 1, 239_920_000},
		{"jitter capped after it is drawn", with(spread, draw(0.999)), 8, 30 * time.Second},
		{"jitter below the cap near it", with(spread, draw(0)), 8, 20_480 * time.Millisecond},
		// 250ms × 2^7 = 32s passes Max, but × 0.8 it would not: growth goes
		// on (to 64s) as an uncapped schedule's would, and the draw is capped.
		{"growth past Max until no draw can fall below it", retry.Policy{Initial: 250 * time.Millisecond, Max: 30 * time.Second,
			Jitter: retry.Jitter{Min: 0.8, Max: 1.2}, Rand: draw(0)}, 9, 30 * time.Second},
		{"jitter far past the cap", with(spread, draw(0)), 1 << 20, 30 * time.Second},
		{"additive jitter", retry.Policy{Initial: time.Second, Jitter: retry.Jitter{Min: 1, Max: 1.5}, Rand: draw(0.5)}, 2, 2500 * time.Millisecond},
		{"empty jitter range draws nothing", retry.Policy{Initial: time.Second, Jitter: retry.Jitter{Min: 2, Max: 2}, Rand: func() float64 { panic("drawn") }}, 1, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Delay(tt.n))
		})
	}
}

func with(p retry.Policy, r func() float64) retry.Policy {
	p.Rand = r
	return p
}

func TestDelayJitterStaysInRange(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Initial: time.Second, Jitter: retry.Jitter{Min: 0.8, Max: 1.2}}
	for range 1000 {
		d := p.Delay(1)
		require.GreaterOrEqual(t, d, 800*time.Millisecond)
		require.Less(t, d, 1200*time.Millisecond)
	}
}

// hintErr carries a server's hint the way an HTTP client's error would.
type hintErr struct{ after time.Duration }

func (e hintErr) Error() string             { return "busy" }
func (e hintErr) RetryAfter() time.Duration { return e.after }

func TestWait(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Initial: time.Second, Max: 10 * time.Second}
	plain := errors.New("boom")
	tests := []struct {
		name string
		p    retry.Policy
		err  error
		n    int
		want time.Duration
	}{
		{"no hint: the schedule", p, plain, 3, 4 * time.Second},
		{"hint replaces the schedule", p, retry.After(plain, 250*time.Millisecond), 3, 250 * time.Millisecond},
		{"hint found down the chain", p, fmt.Errorf("get: %w", hintErr{7 * time.Second}), 1, 7 * time.Second},
		{"hint capped at Max", p, hintErr{time.Hour}, 1, 10 * time.Second},
		{"hint uncapped without Max", retry.Policy{Initial: time.Second}, hintErr{time.Hour}, 1, time.Hour},
		{"zero hint is no hint", p, hintErr{0}, 2, 2 * time.Second},
		{"negative hint is no hint", p, hintErr{-time.Second}, 2, 2 * time.Second},
		{"nil error: the schedule", p, nil, 1, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Wait(tt.err, tt.n))
		})
	}
}

func TestAfter(t *testing.T) {
	t.Parallel()
	base := errors.New("503")
	require.NoError(t, retry.After(nil, time.Second))
	require.Same(t, base, retry.After(base, 0), "no hint leaves the error as it was")
	err := retry.After(base, time.Second)
	require.ErrorIs(t, err, base)
	require.Equal(t, "503", err.Error())
	require.Equal(t, time.Second, retry.Hint(err))
	require.Zero(t, retry.Hint(base))
	require.Zero(t, retry.Hint(nil))
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    retry.Policy
		ok   bool
	}{
		{"zero value", retry.Policy{}, true},
		{"full", retry.Policy{Initial: time.Second, Max: time.Minute, Multiplier: 1.5, Jitter: retry.Jitter{Min: 0.8, Max: 1.2}, Attempts: 3}, true},
		{"negative Initial", retry.Policy{Initial: -1}, false},
		{"negative Max", retry.Policy{Max: -1}, false},
		{"shrinking multiplier", retry.Policy{Multiplier: 0.5}, false},
		{"negative jitter", retry.Policy{Jitter: retry.Jitter{Min: -0.1, Max: 1}}, false},
		{"inverted jitter", retry.Policy{Jitter: retry.Jitter{Min: 1.2, Max: 0.8}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.ok {
				require.NoError(t, tt.p.Validate())
			} else {
				require.Error(t, tt.p.Validate())
			}
		})
	}
}

// script is an operation that fails with errs in turn, then succeeds.
type script struct {
	errs  []error
	calls int
}

func (s *script) call(context.Context) error {
	s.calls++
	if s.calls <= len(s.errs) {
		return s.errs[s.calls-1]
	}
	return nil
}

// recorder is a Sleeper that records the waits and returns at once (or
// ctx's error, as a real sleep would).
type recorder struct{ waits []time.Duration }

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	return ctx.Err()
}

func TestDo(t *testing.T) {
	t.Parallel()
	busy := errors.New("busy")
	fatal := errors.New("fatal")
	p := retry.Policy{Initial: time.Second, Max: 3 * time.Second, Attempts: 4,
		Retryable: func(err error) bool { return !errors.Is(err, fatal) }}
	tests := []struct {
		name      string
		p         retry.Policy
		errs      []error
		wantErr   error
		wantCalls int
		wantWaits []time.Duration
	}{
		{"success first time", p, nil, nil, 1, nil},
		{"succeeds after retries", p, []error{busy, busy}, nil, 3, []time.Duration{time.Second, 2 * time.Second}},
		{"attempts run out: the last error", p, []error{busy, busy, busy, fatal}, fatal, 4, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}},
		{"attempts run out on a retryable error", p, []error{busy, busy, busy, busy, busy}, busy, 4, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}},
		{"not retryable: no retry", p, []error{fatal}, fatal, 1, nil},
		{"hint honoured", p, []error{retry.After(busy, 100*time.Millisecond)}, nil, 2, []time.Duration{100 * time.Millisecond}},
		{"zero Attempts tries once", retry.Policy{Initial: time.Second}, []error{busy}, busy, 1, nil},
		{"nil Retryable retries everything", retry.Policy{Initial: time.Second, Attempts: 2}, []error{fatal}, nil, 2, []time.Duration{time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &script{errs: tt.errs}
			r := &recorder{}
			err := retry.Do(t.Context(), r.sleep, tt.p, s.call)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			require.Equal(t, tt.wantCalls, s.calls)
			require.Equal(t, tt.wantWaits, r.waits)
		})
	}
}

func TestDoStopsWhenContextEndsDuringAWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	busy := errors.New("busy")
	calls := 0
	sleep := func(context.Context, time.Duration) error {
		cancel()
		return context.Canceled
	}
	err := retry.Do(ctx, sleep, retry.Policy{Initial: time.Second, Attempts: 5}, func(context.Context) error {
		calls++
		return busy
	})
	require.ErrorIs(t, err, busy, "the operation's error, not the context's")
	require.Equal(t, 1, calls)
}

// timers records the periods asked of a clocktest clock.
type timers struct {
	*clocktest.Clock
	mu      sync.Mutex
	periods []time.Duration
}

func (tm *timers) NewTicker(d time.Duration) clock.Ticker {
	tm.mu.Lock()
	tm.periods = append(tm.periods, d)
	tm.mu.Unlock()
	return tm.Clock.NewTicker(d)
}

func (tm *timers) last() time.Duration {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.periods[len(tm.periods)-1]
}

// TestDoSleepsOnTheInjectedClock runs Do on a clock that stands still: it
// returns only because the test moves the clock by each wait it asked for.
func TestDoSleepsOnTheInjectedClock(t *testing.T) {
	t.Parallel()
	tm := &timers{Clock: clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	busy := errors.New("busy")
	s := &script{errs: []error{busy, busy, busy}}
	p := retry.Policy{Initial: time.Minute, Attempts: 4}
	done := make(chan error, 1)
	go func() { done <- retry.Do(t.Context(), retry.On(tm), p, s.call) }()
	for _, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute} {
		<-tm.TickerMade()
		require.Equal(t, want, tm.last())
		tm.Advance(want)
	}
	require.NoError(t, <-done)
	require.Equal(t, 4, s.calls)
	require.Equal(t, 7*time.Minute, tm.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), "no wall-clock time")
	require.Zero(t, tm.Tickers(), "every wait's ticker stopped")
}

func TestSleep(t *testing.T) {
	t.Parallel()
	c := clocktest.New(time.Time{})
	require.NoError(t, retry.Sleep(t.Context(), c, 0), "a zero wait returns at once")
	require.NoError(t, retry.Sleep(t.Context(), c, -time.Second), "a negative wait returns at once")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, retry.Sleep(ctx, c, time.Hour), context.Canceled, "an ended context returns at once")
	require.Zero(t, c.Tickers())

	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- retry.Sleep(ctx, c, time.Hour) }()
	<-c.TickerMade()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "the context ends a wait under way")
	require.Zero(t, c.Tickers())
}
