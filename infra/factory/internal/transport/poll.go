package transport

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/retry"
)

// Claimer is what the poll transport needs of the coordinator client.
type Claimer interface {
	Claim(ctx context.Context, r api.ClaimRequest) (*api.Claimed, error)
	Release(ctx context.Context, productID, id string, r api.ReleaseRequest) (*fleet.Job, error)
}

// Poll is the fallback transport: it claims jobs with POST /fleet/claim,
// retrying every interval (with jitter, so a fleet started together does
// not claim in lockstep) until the receive's wait runs out. Both the
// interval and the wait run on its clock (the agent's), so tests drive
// them.
type Poll struct {
	c        Claimer
	interval time.Duration
	clock    clock.Timers
	log      *slog.Logger
}

// NewPoll returns the poll transport, its time read from clk.
func NewPoll(c Claimer, interval time.Duration, clk clock.Timers, log *slog.Logger) *Poll {
	return &Poll{c: c, interval: interval, clock: clk, log: log}
}

// Receive claims up to max jobs.
func (p *Poll) Receive(ctx context.Context, max int, wait time.Duration) ([]Delivery, error) {
	deadline := p.clock.Now().Add(wait)
	for {
		var out []Delivery
		for len(out) < max {
			cl, err := p.c.Claim(ctx, api.ClaimRequest{})
			if err != nil {
				if len(out) > 0 {
					// Run what was claimed; the next receive retries.
					p.log.WarnContext(ctx, "claim failed", "err", err)
					return out, nil
				}
				return nil, fmt.Errorf("claim: %w", err)
			}
			if cl == nil {
				break
			}
			out = append(out, Delivery{ID: fmt.Sprintf("claim:%s:%d", cl.Job.ID, cl.LeaseEpoch), Claimed: cl})
		}
		left := deadline.Sub(p.clock.Now())
		if len(out) > 0 || left <= 0 {
			return out, nil
		}
		pause := min(p.interval/2+rand.N(p.interval/2+1), left)
		if err := retry.Sleep(ctx, p.clock, pause); err != nil {
			return nil, err
		}
	}
}

// Complete is a no-op: the claim was the settlement.
func (p *Poll) Complete(context.Context, Delivery) error { return nil }

// Abandon releases the lease of a claimed job, so it goes back to the
// queue now rather than when the lease expires.
func (p *Poll) Abandon(ctx context.Context, d Delivery) error {
	if d.Claimed == nil {
		return nil
	}
	_, err := p.c.Release(ctx, d.Claimed.Job.ProductID, d.Claimed.Job.ID, api.ReleaseRequest{LeaseEpoch: &d.Claimed.LeaseEpoch})
	return err
}

// Close is a no-op.
func (p *Poll) Close(context.Context) error { return nil }
