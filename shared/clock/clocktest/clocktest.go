// Package clocktest is the clock tests inject: it stands still until the
// test moves it, so nothing a test asserts depends on the wall clock.
package clocktest

import (
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/clock"
)

// Clock is a manual clock, safe for concurrent use. Its zero value reads
// the zero time; New starts it at a given instant.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	tickers map[*ticker]struct{}
	// made is signalled when a ticker is made, so a test can wait for the
	// code under test to start waiting before it moves the clock.
	made chan struct{}
}

// New returns a clock standing at t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, firing the tickers that fall due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fire()
}

// Set moves the clock to t, firing the tickers that fall due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.fire()
}

// fire sends one tick to every ticker due at c.now (dropping it when the
// last one is unread, as time.Ticker does) and schedules its next.
func (c *Clock) fire() {
	for t := range c.tickers {
		if c.now.Before(t.next) {
			continue
		}
		select {
		case t.c <- c.now:
		default:
		}
		for !c.now.Before(t.next) {
			t.next = t.next.Add(t.period)
		}
	}
}

// NewTicker returns a ticker that fires when the clock is moved past each
// period.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("clocktest: non-positive ticker period")
	}
	c.mu.Lock()
	t := &ticker{clock: c, c: make(chan time.Time, 1), period: d, next: c.now.Add(d)}
	if c.tickers == nil {
		c.tickers = map[*ticker]struct{}{}
	}
	c.tickers[t] = struct{}{}
	made := c.madeChan()
	c.mu.Unlock()
	select {
	case made <- struct{}{}:
	default:
	}
	return t
}

func (c *Clock) madeChan() chan struct{} {
	if c.made == nil {
		c.made = make(chan struct{}, 1024)
	}
	return c.made
}

// TickerMade returns a channel that receives once per ticker made, so a
// test can wait until the code under test waits on the clock.
func (c *Clock) TickerMade() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.madeChan()
}

// Tickers is the number of tickers made and not stopped.
func (c *Clock) Tickers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tickers)
}

type ticker struct {
	clock  *Clock
	c      chan time.Time
	period time.Duration
	next   time.Time
}

func (t *ticker) C() <-chan time.Time { return t.c }

func (t *ticker) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	delete(t.clock.tickers, t)
}
