package transport

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock/clocktest"
)

func (f *fakeClaimer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// TestPollOnItsClock: with nothing to claim, Receive claims again only
// once the interval (jittered between half of it and all of it) has
// passed on its clock, and returns empty once its wait has passed on that
// clock, its timer stopped. Before, both ran on the wall clock: the
// injected clock drove neither.
func TestPollOnItsClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const interval, wait = time.Second, 3 * time.Second
		clk := clocktest.New(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC))
		fc := &fakeClaimer{}
		p := NewPoll(fc, interval, clk, slog.New(slog.DiscardHandler))
		type result struct {
			ds  []Delivery
			err error
		}
		out := make(chan result, 1)
		go func() {
			ds, err := p.Receive(t.Context(), 1, wait)
			out <- result{ds, err}
		}()
		advance := func(d time.Duration) {
			clk.Advance(d)
			synctest.Wait()
		}
		returned := func() bool { return len(out) > 0 }

		synctest.Wait() // the first claim found nothing; Receive waits
		require.Equal(t, 1, fc.count())
		advance(interval/2 - time.Millisecond)
		require.Equal(t, 1, fc.count(), "no claim before half the interval passed")
		advance(interval/2 + time.Millisecond)
		require.Equal(t, 2, fc.count(), "a claim once the interval passed on the clock")
		require.False(t, returned(), "the wait has not passed")

		advance(wait - interval - time.Millisecond)
		require.False(t, returned(), "the wait has not passed on the clock")
		advance(time.Millisecond)
		require.True(t, returned(), "Receive returns once its wait passed on the clock")
		r := <-out
		require.NoError(t, r.err)
		require.Empty(t, r.ds)
		require.Equal(t, 0, clk.Tickers(), "the last pause's timer is stopped")
	})
}

// TestPollCancelStopsTheWait: a receive waiting out the interval returns
// the context's error when it ends, its timer stopped.
func TestPollCancelStopsTheWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := clocktest.New(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC))
		p := NewPoll(&fakeClaimer{}, time.Second, clk, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := p.Receive(ctx, 1, time.Minute)
			errc <- err
		}()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		require.Equal(t, 0, clk.Tickers())
	})
}
