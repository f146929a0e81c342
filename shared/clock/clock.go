// Package clock is the injected time source: use cases and adapters take a
// Clock instead of calling time.Now, so tests control time.
package clock

import "time"

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// System is the wall clock, in UTC.
type System struct{}

// Now returns the current UTC time.
func (System) Now() time.Time { return time.Now().UTC() }

// Ticker delivers the time on C every period until stopped. Like
// time.Ticker it drops ticks a slow reader misses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Timers make tickers. Code that waits (keep-alives, polls) takes Timers
// instead of calling time.NewTicker, so tests fire the ticks.
type Timers interface {
	Clock
	NewTicker(d time.Duration) Ticker
}

// NewTicker returns a wall-clock ticker.
func (System) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

type systemTicker struct{ t *time.Ticker }

func (s systemTicker) C() <-chan time.Time { return s.t.C }
func (s systemTicker) Stop()               { s.t.Stop() }
