package agent

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/retry"
)

// Bounds of the cooldowns a heartbeat carries (API.md: at most 32 entries,
// each at most 24 h ahead). A few minutes short of the day: the
// coordinator refuses the whole heartbeat for one entry past it by its own
// clock, which may be behind this one.
const (
	maxCooldowns     = fleet.MaxCooldowns
	maxCooldownAhead = fleet.MaxCooldown - 5*time.Minute
)

// cooldownBackoff is the wait after a rate limit whose engine named no
// reset time, by how many limits in a row the engine met.
var cooldownBackoff = retry.Policy{Initial: time.Minute, Max: 30 * time.Minute, Jitter: retry.Jitter{Min: 0.8, Max: 1.2}}

// cooldowns are the engines whose provider refused this factory's account
// for a rate limit, and until when: reported in every heartbeat so the
// scheduler sends their jobs elsewhere, forgotten once past.
type cooldowns struct {
	clock clock.Clock
	mu    sync.Mutex
	until map[string]time.Time // by engine name
	// strikes counts rate limits in a row per engine, for the backoff; a
	// run that gets through resets it.
	strikes map[string]int
}

func newCooldowns(c clock.Clock) *cooldowns {
	return &cooldowns{clock: c, until: map[string]time.Time{}, strikes: map[string]int{}}
}

// limited records a rate limit of engine: until resetsAt when the engine
// said when the limit lifts (bounded to 24 h), else a backoff growing with
// the limits in a row. It returns the until time.
func (c *cooldowns) limited(engine string, resetsAt time.Time) time.Time {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.strikes[engine]++
	until := resetsAt
	if !until.After(now) {
		until = now.Add(cooldownBackoff.Delay(c.strikes[engine]))
	}
	until = minTime(until, now.Add(maxCooldownAhead))
	if until.After(c.until[engine]) {
		c.until[engine] = until
	}
	return c.until[engine]
}

// succeeded clears the strikes of engine: its account works again.
func (c *cooldowns) succeeded(engine string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.strikes, engine)
}

// active returns the cooldowns still in the future, keyed engine:<name>
// as the heartbeat carries them (nil when none), dropping the past ones.
// Past maxCooldowns, the ones ending soonest are left out.
func (c *cooldowns) active() map[string]time.Time {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.until, func(_ string, until time.Time) bool { return !until.After(now) })
	if len(c.until) == 0 {
		return nil
	}
	names := slices.SortedFunc(maps.Keys(c.until), func(a, b string) int { return c.until[b].Compare(c.until[a]) })
	out := make(map[string]time.Time, min(len(names), maxCooldowns))
	for _, name := range names[:min(len(names), maxCooldowns)] {
		out["engine:"+name] = c.until[name]
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
