package transport

import (
	"context"
	"fmt"
	"log/slog"

	busnats "github.com/gigafactory/fleet/shared/bus/nats"
)

// OpenNATS connects to the NATS server at url and makes sure this factory's
// durable consumer exists.
func OpenNATS(ctx context.Context, url, factoryID, sub string, log *slog.Logger) (*Bus, error) {
	c, err := busnats.Open(ctx, url, busnats.Options{Name: "factory-" + factoryID, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if err := c.EnsureSubscription(ctx, sub); err != nil {
		_ = c.Close(ctx)
		return nil, fmt.Errorf("nats: subscription %s: %w", sub, err)
	}
	return NewBus(c, sub, log), nil
}
