// Package retry is the one backoff rule of the project: how long to wait
// after the n-th failure in a row (Policy.Delay), and a loop that calls an
// operation again after such waits, on the injected clock (Do).
//
// Loops that persist their next attempt (a job's NotBefore, a tracker
// echo's NextAttemptAt) use Delay alone; loops that wait in the process (a
// store's 503 retries, an HTTP client's) use Do.
package retry

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gigafactory/fleet/shared/clock"
)

// DefaultMultiplier is the growth per failure when Policy.Multiplier is
// zero: the delay doubles.
const DefaultMultiplier = 2

// Policy is how the wait grows with each failure in a row. Its zero fields
// have meanings, so a literal names only what it uses: no Max is no cap, no
// Multiplier doubles, no Jitter waits exactly the computed delay, Attempts
// below 1 tries once.
type Policy struct {
	// Initial is the wait after the first failure.
	Initial time.Duration
	// Max caps every wait, a server's hint included; 0 is no cap.
	Max time.Duration
	// Multiplier is the growth per failure; 0 means DefaultMultiplier.
	Multiplier float64
	// Jitter spreads the waits so that many processes failing together do
	// not come back together.
	Jitter Jitter
	// Attempts is how many times Do calls the operation in all.
	Attempts int
	// Retryable says which errors Do tries again after; nil retries every
	// error.
	Retryable func(error) bool
	// Rand draws the jitter, uniform in [0, 1); nil is math/rand/v2. Tests
	// set it so that the waits they assert are exact.
	Rand func() float64
}

// Jitter multiplies a computed delay by a factor drawn uniformly from
// [Min, Max): {0.8, 1.2} is ±20%, {1, 1.5} adds up to half. The zero value
// is no jitter.
type Jitter struct {
	Min, Max float64
}

// Validate reports a policy that cannot work: a negative duration, a
// multiplier that shrinks the wait, or a jitter range that is empty or
// reaches below zero.
func (p Policy) Validate() error {
	switch {
	case p.Initial < 0:
		return errors.New("retry: negative initial delay")
	case p.Max < 0:
		return errors.New("retry: negative maximum delay")
	case p.Multiplier != 0 && p.Multiplier < 1:
		return errors.New("retry: multiplier below 1")
	case p.Jitter != Jitter{} && (p.Jitter.Min < 0 || p.Jitter.Max < p.Jitter.Min):
		return errors.New("retry: jitter range must satisfy 0 <= min <= max")
	}
	return nil
}

// Delay is the wait after the n-th failure in a row (n counts from 1; below
// 1 counts as 1): Initial × Multiplier^(n-1), jittered, capped at Max.
func (p Policy) Delay(n int) time.Duration {
	mult := p.Multiplier
	if mult == 0 {
		mult = DefaultMultiplier
	}
	lo, hi := 1.0, 1.0
	if p.Jitter != (Jitter{}) {
		lo, hi = p.Jitter.Min, p.Jitter.Max
	}
	// Growth stops where it can no longer change the answer: past Max/lo
	// every draw is capped at Max. Stopping there also keeps the float
	// from overflowing when many failures are counted.
	limit := float64(math.MaxInt64)
	if p.Max > 0 && lo > 0 {
		limit = min(limit, float64(p.Max)/lo)
	}
	d := float64(max(p.Initial, 0))
	for i := 1; i < n && d < limit; i++ {
		d *= mult
	}
	if lo != hi {
		r := rand.Float64
		if p.Rand != nil {
			r = p.Rand
		}
		d *= lo + (hi-lo)*r()
	} else {
		d *= lo
	}
	return p.capped(d)
}

// capped converts d to a Duration no longer than Max (when set) and no
// longer than a Duration can hold.
func (p Policy) capped(d float64) time.Duration {
	if p.Max > 0 && d >= float64(p.Max) {
		return p.Max
	}
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}

// Wait is the wait after the n-th failure in a row that ended in err: the
// hint err carries (see Hinted) when it has one, capped at Max, otherwise
// Delay(n). A server that says when to come back knows better than a
// schedule.
func (p Policy) Wait(err error, n int) time.Duration {
	if h := Hint(err); h > 0 {
		if p.Max > 0 {
			return min(h, p.Max)
		}
		return h
	}
	return p.Delay(n)
}

// Hinted is an error that knows when the operation may be tried again (a
// server's Retry-After).
type Hinted interface {
	error
	RetryAfter() time.Duration
}

// Hint is the retry-after hint of the first error in err's chain that
// carries one; 0 when none does.
func Hint(err error) time.Duration {
	var h Hinted
	if errors.As(err, &h) {
		return h.RetryAfter()
	}
	return 0
}

// After returns err carrying the hint d; err unchanged when d is not
// positive or err is nil. The result unwraps to err and reads as err.
func After(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &hinted{err: err, after: d}
}

type hinted struct {
	err   error
	after time.Duration
}

func (h *hinted) Error() string             { return h.err.Error() }
func (h *hinted) Unwrap() error             { return h.err }
func (h *hinted) RetryAfter() time.Duration { return h.after }

// Sleeper waits d, or less when ctx ends first (returning ctx's error). On
// is the one production code uses; a test may record the waits instead.
type Sleeper func(ctx context.Context, d time.Duration) error

// On returns the Sleeper that waits on t.
func On(t clock.Timers) Sleeper {
	return func(ctx context.Context, d time.Duration) error { return Sleep(ctx, t, d) }
}

// Sleep waits d on t, or until ctx ends (returning ctx's error). A wait of
// zero or less returns at once.
func Sleep(ctx context.Context, t clock.Timers, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	// A ticker is what clock.Timers makes; its first tick is the wake-up.
	tk := t.NewTicker(d)
	defer tk.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tk.C():
		return nil
	}
}

// Do calls fn until it succeeds, fails with an error p.Retryable rejects,
// has been called p.Attempts times, or ctx ends during a wait; between
// calls it sleeps p.Wait. It returns fn's last error: when ctx ends during
// a wait, what the operation said is the better report than ctx's error.
func Do(ctx context.Context, sleep Sleeper, p Policy, fn func(context.Context) error) error {
	for n := 1; ; n++ {
		err := fn(ctx)
		if err == nil || n >= p.Attempts || (p.Retryable != nil && !p.Retryable(err)) {
			return err
		}
		if sleep(ctx, p.Wait(err, n)) != nil {
			return err
		}
	}
}
