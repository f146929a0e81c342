package echo

import (
	"context"
	"sync"
	"time"
)

// Echo delivery lanes and circuit breakers.
//
// A webhook that accepts a connection and never answers holds its delivery
// for the whole request timeout. Deliveries therefore run in lanes, one per
// product (a product has one webhook), owned by the process rather than by
// an invocation: a lane runs at most Parallel of its product's jobs at
// once, and nothing in one lane ever waits for another. The change feed
// hands its batch's jobs to their lanes and moves on, so one product's
// tarpit can slow only that product's echo. A breaker per webhook URL stops
// even that cost: after EchoBreakerFailures failed deliveries in a row the
// webhook is not tried for EchoBreakerCooldown (on the injected clock),
// then one delivery probes it. The delivery documents stay the truth: a
// lane's queue is memory only, and whatever a process loses with it the
// sweep finds by the open documents.

// Echo lane defaults.
const (
	DefaultParallel        = 4
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 30 * time.Second
	// echoLaneQueue bounds the jobs waiting in one lane; past it a job is
	// left to the sweep (its delivery document is open and due).
	echoLaneQueue = 4096
	// maxBreakers bounds the failing webhooks remembered: an operator may
	// change a product's URL any number of times.
	maxBreakers = 1024
)

// Mode says whether an echo invocation waits for its deliveries.
type Mode int

const (
	// HandOff returns once the jobs are in their lanes: the change
	// feed must never wait on a webhook, or the next batch (any product's)
	// waits with it.
	HandOff Mode = iota
	// Await waits for the deliveries (or ctx): the sweep, whose
	// process may sleep between invocations (Lambda), and tests.
	Await
)

// Run is what one echo invocation did.
type Run struct {
	// Jobs is how many tracked jobs it handed to their lanes.
	Jobs int `json:"jobs"`
	// Delivered counts the events delivered before it returned (none for
	// a hand-off).
	Delivered int `json:"delivered"`
}

type echoResult struct {
	delivered int
	err       error
}

// lanes are the process's delivery lanes and breakers.
type lanes struct {
	mu       sync.Mutex
	lanes    map[string]*productLane // by product id
	breakers map[breakerKey]*breaker
}

// breakerKey is what a breaker counts for: one product's deliveries to one
// webhook. Products often share a tracker's URL, told apart by their
// secrets; keyed by the URL alone, one product's refused deliveries (a
// wrong secret) would open the breaker on every other product's.
type breakerKey struct {
	productID, url string
}

func newLanes() *lanes {
	return &lanes{lanes: map[string]*productLane{}, breakers: map[breakerKey]*breaker{}}
}

// productLane is one product's queue: job ids in arrival order, each once.
type productLane struct {
	pending []string
	items   map[string]*laneItem
	running int
}

type laneItem struct {
	ref   JobRef
	sweep bool
	done  []chan echoResult
}

// submit queues a job in its product's lane, starting a worker when the
// lane has room, and returns where the outcome is sent (buffered: nobody
// needs to read it). A job already waiting in the lane is not queued twice.
func (c *Service) submitEcho(ctx context.Context, ref JobRef, sweep bool) <-chan echoResult {
	done := make(chan echoResult, 1)
	l := c.lanes
	l.mu.Lock()
	defer l.mu.Unlock()
	lane := l.lanes[ref.ProductID]
	if lane == nil {
		lane = &productLane{items: map[string]*laneItem{}}
		l.lanes[ref.ProductID] = lane
	}
	if it := lane.items[ref.JobID]; it != nil {
		it.sweep = it.sweep || sweep
		it.done = append(it.done, done)
		return done
	}
	if len(lane.pending) >= echoLaneQueue {
		c.k.Log.WarnContext(ctx, "tracker echo: lane full, left to the sweep", "product", ref.ProductID, "job", ref.JobID)
		done <- echoResult{}
		return done
	}
	lane.pending = append(lane.pending, ref.JobID)
	lane.items[ref.JobID] = &laneItem{ref: ref, sweep: sweep, done: []chan echoResult{done}}
	if lane.running < c.cfg.Parallel {
		lane.running++
		// The worker outlives the invocation that started it: that is the
		// point of a hand-off.
		go c.runLane(context.WithoutCancel(ctx), ref.ProductID, lane)
	}
	return done
}

// runLane delivers the lane's jobs one after the other until it is empty.
func (c *Service) runLane(ctx context.Context, productID string, lane *productLane) {
	l := c.lanes
	for {
		l.mu.Lock()
		if len(lane.pending) == 0 {
			lane.running--
			if lane.running == 0 && l.lanes[productID] == lane {
				delete(l.lanes, productID)
			}
			l.mu.Unlock()
			return
		}
		id := lane.pending[0]
		lane.pending = lane.pending[1:]
		it := lane.items[id]
		delete(lane.items, id)
		l.mu.Unlock()

		n, err := c.echoJob(ctx, it.ref.ProductID, it.ref.JobID, it.sweep)
		for _, d := range it.done {
			d <- echoResult{delivered: n, err: err}
		}
	}
}

// breaker is one webhook's circuit breaker.
type breaker struct {
	failures  int
	openUntil time.Time // zero while closed
	probing   bool      // a half-open probe is in flight
}

// echoAllow says whether a delivery for key may be tried now; when not, it
// returns when the webhook may be tried again.
func (c *Service) echoAllow(key breakerKey) (bool, time.Time) {
	now := c.k.Now()
	l := c.lanes
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.breakers[key]
	switch {
	case b == nil || b.openUntil.IsZero():
		return true, time.Time{}
	case now.Before(b.openUntil):
		return false, b.openUntil
	case b.probing:
		// One probe at a time: the others wait for its verdict.
		return false, now.Add(c.cfg.Backoff)
	default:
		b.probing = true
		return true, time.Time{}
	}
}

// echoRecord counts a delivery's outcome against key's breaker.
func (c *Service) echoRecord(key breakerKey, ok bool) {
	now := c.k.Now()
	l := c.lanes
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.breakers[key]
	if ok {
		delete(l.breakers, key)
		return
	}
	if b == nil {
		if len(l.breakers) >= maxBreakers {
			l.pruneBreakers(now)
		}
		b = &breaker{}
		l.breakers[key] = b
	}
	b.failures++
	if b.probing || b.failures >= c.cfg.BreakerFailures {
		if b.openUntil.IsZero() || b.probing {
			c.k.Log.Warn("tracker echo: webhook breaker open", "product", key.productID, "failures", b.failures, "cooldown", c.cfg.BreakerCooldown)
		}
		b.openUntil, b.probing = now.Add(c.cfg.BreakerCooldown), false
	}
}

// pruneBreakers forgets the breakers that are not open now; l.mu is held.
func (l *lanes) pruneBreakers(now time.Time) {
	for key, b := range l.breakers {
		if !b.probing && !now.Before(b.openUntil) {
			delete(l.breakers, key)
		}
	}
}
