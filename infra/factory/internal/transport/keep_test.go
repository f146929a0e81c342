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
)

// lockBroker models one message lock: each renewal extends it by lock from
// now, unless the lock lapsed, or the test made renewals fail or the lock
// lost.
type lockBroker struct {
	mu     sync.Mutex
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
	now := time.Now()
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
// under its lease).
func TestKeepLock(t *testing.T) {
	t.Parallel()
	const lock = 300 * time.Millisecond
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
			b := &lockBroker{lock: lock, until: time.Now().Add(lock)}
			k := KeepLock(context.Background(), b, Delivery{ID: "j1:1", LockedUntil: b.until}, slog.New(slog.DiscardHandler))
			t.Cleanup(k.Stop)
			start := time.Now()
			require.Eventually(t, func() bool {
				n, _ := b.state()
				return time.Since(start) > 4*lock && n >= 4
			}, 20*time.Second, 10*time.Millisecond, "renewals keep the lock past four lock durations")
			_, lapsed := b.state()
			require.False(t, lapsed, "every renewal came before the lock lapsed")
			select {
			case <-k.Done():
				t.Fatal("the keeper stopped while its renewals succeeded")
			default:
			}

			b.mu.Lock()
			b.fail = tt.fail
			b.mu.Unlock()
			if tt.wantEnded {
				select {
				case <-k.Done():
				case <-time.After(20 * time.Second):
					t.Fatal("the keeper did not give up")
				}
				n, _ := b.state()
				require.Greater(t, n, 4)
				return
			}
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
