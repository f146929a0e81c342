package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gigafactory/fleet/shared/bus"
)

// BusClient is the part of a shared/bus backend client a factory uses; the
// NATS and Service Bus clients both have it.
type BusClient interface {
	Receive(ctx context.Context, sub string, max int, wait time.Duration) ([]bus.Delivery, error)
	Complete(ctx context.Context, d bus.Delivery) error
	Abandon(ctx context.Context, d bus.Delivery) error
	DeadLetter(ctx context.Context, d bus.Delivery, reason string) error
	RenewLock(ctx context.Context, d bus.Delivery) (time.Time, error)
	Close(ctx context.Context) error
}

// Bus is the push transport over a bus backend: one subscription, this
// factory's (or its pool's).
type Bus struct {
	c   BusClient
	sub string
	log *slog.Logger
}

// NewBus returns the push transport reading subscription sub.
func NewBus(c BusClient, sub string, log *slog.Logger) *Bus {
	return &Bus{c: c, sub: sub, log: log}
}

// Receive returns decoded deliveries. A message this version cannot decode
// is dead-lettered on the way and never returned: abandoning it would only
// have it delivered again, forever.
func (b *Bus) Receive(ctx context.Context, max int, wait time.Duration) ([]Delivery, error) {
	ds, err := b.c.Receive(ctx, b.sub, max, wait)
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", b.sub, err)
	}
	out := make([]Delivery, 0, len(ds))
	for _, d := range ds {
		dec, err := bus.Decode(d)
		if err != nil {
			b.log.ErrorContext(ctx, "dead-lettering a message this factory cannot read", "messageId", d.ID, "err", err)
			if derr := b.c.DeadLetter(ctx, d, truncate(err.Error(), 1000)); derr != nil && !errors.Is(derr, bus.ErrLockLost) {
				b.log.ErrorContext(ctx, "dead-letter", "messageId", d.ID, "err", derr)
			}
			continue
		}
		out = append(out, Delivery{ID: d.ID, Dispatch: dec.Dispatch, GC: dec.GC, Control: dec.Control, LockedUntil: d.LockedUntil,
			Redelivered: d.DeliveryCount > 1, handle: d})
	}
	return out, nil
}

// Complete removes the message. A lost lock is not an error here: the
// message will come again and the fenced accept refuses it then.
func (b *Bus) Complete(ctx context.Context, d Delivery) error {
	bd, ok := d.handle.(bus.Delivery)
	if !ok {
		return nil
	}
	if err := b.c.Complete(ctx, bd); err != nil && !errors.Is(err, bus.ErrLockLost) {
		return fmt.Errorf("complete %s: %w", d.ID, err)
	}
	return nil
}

// Abandon gives the message back for redelivery.
func (b *Bus) Abandon(ctx context.Context, d Delivery) error {
	bd, ok := d.handle.(bus.Delivery)
	if !ok {
		return nil
	}
	if err := b.c.Abandon(ctx, bd); err != nil && !errors.Is(err, bus.ErrLockLost) {
		return fmt.Errorf("abandon %s: %w", d.ID, err)
	}
	return nil
}

// RenewLock extends the delivery's lock (see KeepLock).
func (b *Bus) RenewLock(ctx context.Context, d Delivery) (time.Time, error) {
	bd, ok := d.handle.(bus.Delivery)
	if !ok {
		return time.Time{}, fmt.Errorf("renew lock of %s: %w: not a delivery of this transport", d.ID, bus.ErrInvalid)
	}
	until, err := b.c.RenewLock(ctx, bd)
	if err != nil {
		return time.Time{}, fmt.Errorf("renew lock of %s: %w", d.ID, err)
	}
	return until, nil
}

// Close closes the backend client.
func (b *Bus) Close(ctx context.Context) error { return b.c.Close(ctx) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
