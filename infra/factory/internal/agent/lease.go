package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/protocol"
)

// Why a job stops early. They are context causes, so every step of a job
// can tell a fence from a budget from a shutdown.
var (
	errFenced    = errors.New("fenced: the lease belongs to someone else now")
	errLeaseLost = errors.New("lease lost: no successful renewal for a whole lease length")
	errBudget    = errors.New("wall budget exhausted")
	errShutdown  = errors.New("factory shutting down")
	// errCancelRequested and errPreemptRequested: the coordinator asked the
	// holder to stop (a control message or a renewal answer said so); the
	// run checkpoints and acknowledges with a release.
	errCancelRequested  = errors.New("cancel requested by an operator")
	errPreemptRequested = errors.New("preempted by a critical job")
)

// LeaseAPI is what a lease needs of the coordinator.
type LeaseAPI interface {
	Renew(ctx context.Context, productID, id string, epoch int64) (protocol.Renewal, error)
}

// lease tracks the job's lease on the factory's clock (the agent's, so
// tests drive it). Every duration is measured locally from the start of a
// successful request, and the lease length comes from the coordinator's
// own timestamps (expiry − acquisition), so clock skew between factory and
// coordinator never matters.
type lease struct {
	api            LeaseAPI
	clock          clock.Timers
	product, jobID string
	epoch          int64
	ttl            time.Duration

	mu     sync.Mutex
	lastOK time.Time
}

// defaultTTL is assumed when the claim does not say: the coordinator's
// default lease length.
const defaultTTL = 5 * time.Minute

// newLease is cl's lease on clk, received (on clk) when the claim came.
func newLease(api LeaseAPI, clk clock.Timers, cl *protocol.Claimed, received time.Time) *lease {
	ttl := defaultTTL
	if j := cl.Job; !j.LeaseAcquiredAt.IsZero() && cl.LeaseExpiresAt.After(j.LeaseAcquiredAt) {
		ttl = cl.LeaseExpiresAt.Sub(j.LeaseAcquiredAt)
	}
	return &lease{api: api, clock: clk, product: cl.Job.ProductID, jobID: cl.Job.ID, epoch: cl.LeaseEpoch, ttl: ttl, lastOK: received}
}

// renew extends the lease now. The answer says whether the holder was asked
// to stop; only keep acts on that (a renewal under a push's guard while
// the run checkpoints on its way out must not stop it again).
func (l *lease) renew(ctx context.Context) (protocol.Renewal, error) {
	start := l.clock.Now()
	ren, err := l.api.Renew(ctx, l.product, l.jobID, l.epoch)
	if err != nil {
		if errors.Is(err, api.ErrFenced) {
			return ren, fmt.Errorf("%w: %w", errFenced, err)
		}
		return ren, err
	}
	l.mu.Lock()
	l.lastOK = start
	l.mu.Unlock()
	return ren, nil
}

// stopCause is the cause a renewal answer gives to stop the run, or nil.
func stopCause(ren protocol.Renewal) error {
	switch {
	case ren.CancelRequested:
		return errCancelRequested
	case ren.PreemptRequested:
		return errPreemptRequested
	}
	return nil
}

func (l *lease) sinceOK() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clock.Now().Sub(l.lastOK)
}

// end is when the lease is lost unless a renewal succeeds before: a whole
// length after the last successful one began.
func (l *lease) end() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastOK.Add(l.ttl)
}

// guard renews the lease and returns a context that ends while the lease
// is still certainly ours: half a lease length after the renewal started.
// Every write that must never come from a zombie (a push, the ship hook)
// runs under it, so a factory frozen (SIGSTOP, a VM pause) between its
// fence check and its write cannot complete the write after the reaper has
// handed the job on.
func (l *lease) guard(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if _, err := l.renew(ctx); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	left := l.lastOK.Add(l.ttl / 2).Sub(l.clock.Now())
	l.mu.Unlock()
	if left <= 0 {
		// Renewed, but so slowly that half the lease is gone already.
		return nil, nil, fmt.Errorf("%w: renewal took longer than half the lease", errLeaseLost)
	}
	gctx, cancel := within(l.clock, ctx, left)
	return gctx, cancel, nil
}

// keep renews every interval until ctx ends. It calls lost when the lease
// is fenced, or when no renewal has succeeded for a whole lease length
// (the coordinator may have reaped it; going on would risk a zombie write),
// and with errCancelRequested or errPreemptRequested when a renewal answer
// asks the holder to stop (how a poll factory hears of it). The loss is
// called at the lease's end, or one renewal interval after it at most: a
// renewal in flight then (the client's timeouts and retries can stretch
// one over minutes) is cut short, and one failing between two ticks does
// not wait for the next.
func (l *lease) keep(ctx context.Context, every time.Duration, log *slog.Logger, lost func(error)) {
	t := l.clock.NewTicker(every)
	defer t.Stop()
	for {
		end, stopEnd := l.at(l.end())
		select {
		case <-ctx.Done():
			stopEnd()
			return
		case <-t.C():
		case <-end:
		}
		stopEnd()
		// A renewal gets until the lease's end, and at least one interval:
		// one begun at or past the end (the factory was frozen, or the
		// last one failed just before it) still asks the coordinator,
		// which says fenced or renews, rather than failing unasked.
		rctx, cancel := within(l.clock, ctx, max(l.end().Sub(l.clock.Now()), every))
		ren, err := l.renew(rctx)
		cancel()
		switch {
		case err == nil:
			if cause := stopCause(ren); cause != nil {
				lost(cause)
				return
			}
		case errors.Is(err, errFenced):
			lost(errFenced)
			return
		case ctx.Err() != nil:
			return
		case l.sinceOK() >= l.ttl:
			log.ErrorContext(ctx, "lease renewals failing for a whole lease length; stopping the job", "err", err)
			lost(errLeaseLost)
			return
		default:
			log.WarnContext(ctx, "lease renewal failed; retrying", "err", err)
		}
	}
}

// at is a channel that receives once when the lease's clock reaches when
// (at once if it has), and its stop.
func (l *lease) at(when time.Time) (<-chan time.Time, func()) {
	d := when.Sub(l.clock.Now())
	if d <= 0 {
		c := make(chan time.Time, 1)
		c <- when
		return c, func() {}
	}
	t := l.clock.NewTicker(d)
	return t.C(), t.Stop
}

// renewEvery is the renewal cadence: the configured one, else a third of
// the lease, so two renewals in a row may fail before it runs out.
func (l *lease) renewEvery(configured time.Duration) time.Duration {
	if configured > 0 {
		return configured
	}
	return max(l.ttl/3, 100*time.Millisecond)
}
