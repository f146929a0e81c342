package stream_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
)

// TestWatchdogCheck: silence past the idle timeout stops the engine,
// output on either stream resets it; a final result followed by no exit
// within the grace stops it as exit_grace, whatever the idle timeout.
func TestWatchdogCheck(t *testing.T) {
	t.Parallel()
	c := clocktest.New(t0)
	act := stream.NewActivity(c)
	var resultAt time.Time
	w := stream.Watchdog{Clock: c, Idle: 10 * time.Second, ExitGrace: 3 * time.Second, Activity: act,
		ResultAt: func() time.Time { return resultAt }}
	out := act.Writer(io.Discard)
	for range 3 {
		c.Advance(8 * time.Second)
		require.Equal(t, stream.VerdictNone, w.Check(c.Now()), "an engine writing every 8 s is not idle")
		_, _ = out.Write([]byte("x"))
	}
	c.Advance(9 * time.Second)
	require.Equal(t, stream.VerdictNone, w.Check(c.Now()))
	c.Advance(time.Second)
	require.Equal(t, stream.VerdictIdle, w.Check(c.Now()), "10 s of silence")

	_, _ = out.Write([]byte("{\"type\":\"result\"}\n"))
	resultAt = c.Now()
	c.Advance(2 * time.Second)
	require.Equal(t, stream.VerdictNone, w.Check(c.Now()), "within the grace")
	c.Advance(time.Second)
	require.Equal(t, stream.VerdictExitGrace, w.Check(c.Now()), "a result and no exit within the grace")
	c.Advance(time.Hour)
	require.Equal(t, stream.VerdictExitGrace, w.Check(c.Now()), "exit grace, not idle, once a result came")
}

// TestWatchdogWatch: Watch stops at the first tick past the timeout, on
// the injected clock, and ends with its context.
func TestWatchdogWatch(t *testing.T) {
	t.Parallel()
	c := clocktest.New(t0)
	w := stream.Watchdog{Clock: c, Idle: 10 * time.Second, Activity: stream.NewActivity(c)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := make(chan stream.Verdict, 1)
	made := c.TickerMade()
	go func() { out <- w.Watch(ctx) }()
	<-made
	c.Advance(10 * time.Second)
	select {
	case v := <-out:
		require.Equal(t, stream.VerdictIdle, v)
	case <-time.After(10 * time.Second): // a guard against a hang, not a wait
		t.Fatal("the watchdog did not stop the engine at the first tick past the idle timeout")
	}
	require.Equal(t, 0, c.Tickers(), "the ticker is stopped")

	ctx2, cancel2 := context.WithCancel(t.Context())
	go func() { out <- w.Watch(ctx2) }()
	cancel2()
	require.Equal(t, stream.VerdictNone, <-out)
}
