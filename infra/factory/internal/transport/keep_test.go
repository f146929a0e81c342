package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
)

// lockBroker models one message lock on the test's clock: each renewal
// extends it by lock from now, unless the lock lapsed, or the test made
// renewals fail or the lock lost.
type lockBroker struct {
	mu     sync.Mutex
	clock  *clocktest.Clock
	lock   time.Duration
	until  time.Time
	renews int
	lapsed bool // a renewal came after the lock had lapsed
	fail   error
}

func (b *lockBroker) RenewLock(context.Context, Delivery) (time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.renews++
	now := b.clock.Now()
	if now.After(b.until) {
		b.lapsed = true
		return time.Time{}, fmt.Errorf("renew: %w", bus.ErrLockLost)
	}
	if b.fail != nil {
		return time.Time{}, b.fail
	}
	b.until = now.Add(b.lock)
	return b.until, nil
}

func (b *lockBroker) state() (renews int, lapsed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.renews, b.lapsed
}

// TestKeepLock: renewals keep a lock alive for many lock durations, each
// before the lock lapses, until stopped; a lost lock, or renewals failing
// until the lock lapsed, end the renewing by themselves (the run goes on
// under its lease). The test's clock moves only when the keeper waits on
// it, by the wait the keeper chose, so load cannot make a renewal late.
func TestKeepLock(t *testing.T) {
	t.Parallel()
	const lock = 30 * time.Second
	tests := []struct {
		name      string
		fail      error // renewals fail with this after the lock was held a while
		wantEnded bool  // the keeper gives up by itself
	}{
		{name: "held until stopped"},
		{name: "lost", fail: fmt.Errorf("renew: %w", bus.ErrLockLost), wantEnded: true},
		{name: "renewals fail until it lapses", fail: errors.New("broker unreachable"), wantEnded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktest.New(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC))
			made := clk.TickerMade()
			b := &lockBroker{clock: clk, lock: lock, until: clk.Now().Add(lock)}
			k := KeepLock(context.Background(), b, Delivery{ID: "j1:1", LockedUntil: b.until}, clk, slog.New(slog.DiscardHandler))
			t.Cleanup(k.Stop)
			// step lets the keeper's next wait pass, once it waits.
			step := func() bool {
				select {
				case <-made:
				case <-k.Done():
					return false
				}
				b.mu.Lock()
				wait := renewAfter(clk.Now(), b.until)
				b.mu.Unlock()
				clk.Advance(wait)
				return true
			}
			start := clk.Now()
			for clk.Now().Sub(start) <= 4*lock {
				require.True(t, step(), "the keeper stopped while its renewals succeeded")
			}
			n, lapsed := b.state()
			require.GreaterOrEqual(t, n, 4, "renewals keep the lock past four lock durations")
			require.False(t, lapsed, "every renewal came before the lock lapsed")

			b.mu.Lock()
			b.fail = tt.fail
			b.mu.Unlock()
			if tt.wantEnded {
				for i := 0; step(); i++ {
					require.Less(t, i, 100, "the keeper did not give up")
				}
				n2, _ := b.state()
				require.Greater(t, n2, n)
				return
			}
			require.True(t, step())
			k.Stop() // returns once the renewing goroutine has ended
			select {
			case <-k.Done():
			default:
				t.Fatal("Stop returned with the keeper still renewing")
			}
			k.Stop() // idempotent
		})
	}
}

func TestRenewAfter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tests := []struct {
		until time.Time
		want  time.Duration
	}{
		{now.Add(5 * time.Minute), 100 * time.Second}, // Service Bus's longest lock
		{now.Add(30 * time.Second), 10 * time.Second},
		{now.Add(200 * time.Millisecond), minRenewGap},
		{now.Add(-time.Second), minRenewGap}, // already lapsed by this clock: try now
		{time.Time{}, minRenewGap},           // no expiry given
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, renewAfter(now, tt.until), "until %s", tt.until)
	}
}
