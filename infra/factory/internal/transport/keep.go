package transport

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/clock"
)

// minRenewGap bounds how often KeepLock renews, however little time the
// lock has left (or when the broker gave no expiry).
const minRenewGap = 100 * time.Millisecond

// KeepLock renews d's lock until stop is called, so an elastic execution
// holds its dispatch message for a whole run, longer than one lock
// duration (Service Bus allows at most 5 minutes). It renews when a third
// of the time left has passed, so a renewal that fails is retried twice
// or more before the lock lapses, and clock skew between the broker
// (which stamps LockedUntil) and this host up to twice the lock duration
// still renews in time.
//
// Losing the lock never stops the run: the coordinator's lease is what
// fences the job, not the broker's lock. A lost lock only means the
// message is delivered again, to an execution whose accept is refused,
// and that the scaler may meanwhile start one execution too many, which
// finds nothing and exits. So KeepLock logs and gives up once the lock is
// lost or has lapsed.
//
// Time comes from timers (the wall clock in the agent), so a test drives
// the renewals instead of racing them.
func KeepLock(ctx context.Context, r LockRenewer, d Delivery, timers clock.Timers, log *slog.Logger) *Keeper {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		until := d.LockedUntil
		for {
			t := timers.NewTicker(renewAfter(timers.Now(), until))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			t.Stop()
			next, err := r.RenewLock(ctx, d)
			switch {
			case err == nil:
				until = next
			case ctx.Err() != nil:
				return
			case errors.Is(err, bus.ErrLockLost):
				log.WarnContext(ctx, "dispatch message lock lost; the run goes on under its lease (the message comes back, and its accept is refused)",
					"delivery", d.ID, "err", err)
				return
			case !until.IsZero() && !timers.Now().Before(until):
				log.WarnContext(ctx, "dispatch message lock lapsed: renewals failed; the run goes on under its lease",
					"delivery", d.ID, "err", err)
				return
			default:
				log.WarnContext(ctx, "renewing the dispatch message lock failed; retrying", "delivery", d.ID,
					"lockedUntil", until, "err", err)
			}
		}
	}()
	return &Keeper{cancel: cancel, done: done}
}

// Keeper is a lock being kept by KeepLock.
type Keeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Stop ends the renewals and waits for one in flight; call it before
// settling the delivery. Safe to call more than once.
func (k *Keeper) Stop() {
	k.cancel()
	<-k.done
}

// Done is closed once the keeper stopped renewing: Stop was called, or the
// lock was lost or lapsed.
func (k *Keeper) Done() <-chan struct{} { return k.done }

// renewAfter is how long to wait before the next renewal of a lock that
// lapses at until.
func renewAfter(now, until time.Time) time.Duration {
	return max(until.Sub(now)/3, minRenewGap)
}
