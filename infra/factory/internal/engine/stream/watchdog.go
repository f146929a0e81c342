package stream

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/clock"
)

// Activity is when the engine last wrote anything, on stdout or stderr.
type Activity struct {
	clock clock.Clock
	mu    sync.Mutex
	last  time.Time
}

// NewActivity starts counting silence now.
func NewActivity(c clock.Clock) *Activity { return &Activity{clock: c, last: c.Now()} }

// Touch records output now.
func (a *Activity) Touch() {
	now := a.clock.Now()
	a.mu.Lock()
	a.last = now
	a.mu.Unlock()
}

// Last is when the engine last wrote.
func (a *Activity) Last() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// Writer is w that records output on every write.
func (a *Activity) Writer(w io.Writer) io.Writer { return activityWriter{a: a, w: w} }

type activityWriter struct {
	a *Activity
	w io.Writer
}

func (t activityWriter) Write(b []byte) (int, error) {
	if len(b) > 0 {
		t.a.Touch()
	}
	return t.w.Write(b)
}

// Verdict is why the watchdog stops an engine.
type Verdict int

// Verdicts.
const (
	// VerdictNone: the watch ended without stopping anything.
	VerdictNone Verdict = iota
	// VerdictIdle: no output at all for the idle timeout.
	VerdictIdle
	// VerdictExitGrace: the engine gave its final result and did not exit
	// within the grace.
	VerdictExitGrace
)

func (v Verdict) String() string {
	switch v {
	case VerdictIdle:
		return "engine_idle"
	case VerdictExitGrace:
		return "exit_grace"
	}
	return "none"
}

// Watchdog watches one engine run.
type Watchdog struct {
	Clock clock.Timers
	// Idle is how long the engine may write nothing at all; ExitGrace how
	// long it may live on after its final result. Zero turns either off.
	Idle, ExitGrace time.Duration
	Activity        *Activity
	// ResultAt is when the final result arrived, zero while none has.
	ResultAt func() time.Time
}

// maxTick bounds how late the watchdog notices, whatever the settings.
const maxTick = time.Second

// tick is the watchdog's cadence: a quarter of the shorter setting, at
// most maxTick.
func (w Watchdog) tick() time.Duration {
	d := maxTick
	for _, s := range []time.Duration{w.Idle, w.ExitGrace} {
		if s > 0 {
			d = min(d, s/4)
		}
	}
	return max(d, time.Millisecond)
}

// Watch waits until ctx ends (VerdictNone) or the engine must be stopped.
func (w Watchdog) Watch(ctx context.Context) Verdict {
	if w.Idle <= 0 && w.ExitGrace <= 0 {
		<-ctx.Done()
		return VerdictNone
	}
	t := w.Clock.NewTicker(w.tick())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return VerdictNone
		case <-t.C():
		}
		if v := w.Check(w.Clock.Now()); v != VerdictNone {
			return v
		}
	}
}

// Check judges the run at now. A result followed by silence is an engine
// that will not exit, not an idle one.
func (w Watchdog) Check(now time.Time) Verdict {
	if w.ExitGrace > 0 && w.ResultAt != nil {
		if at := w.ResultAt(); !at.IsZero() && now.Sub(at) >= w.ExitGrace {
			return VerdictExitGrace
		}
	}
	if w.Idle > 0 && w.Activity != nil && now.Sub(w.Activity.Last()) >= w.Idle {
		return VerdictIdle
	}
	return VerdictNone
}
