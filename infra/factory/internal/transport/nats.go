package transport

import (
	"context"
	"fmt"
	"log/slog"

	busnats "github.com/gigafactory/fleet/shared/bus/nats"
)

// NATSOptions say where and as whom a factory reads its subscription.
type NATSOptions struct {
	URL       string
	FactoryID string
	// Subscription is the factory's (or its pool's) subscription: the
	// factory id, which is all its credentials reach.
	Subscription string
	// Token is the factory's fleet token. The local stack's NATS server
	// resolves it as the API does and limits the connection to
	// Subscription; a server without auth ignores it.
	Token string
	Log   *slog.Logger
}

// OpenNATS connects to the NATS server at o.URL and makes sure this
// factory's durable consumer exists. It binds to the streams (the
// coordinator creates them; a factory's credentials do not allow it).
func OpenNATS(ctx context.Context, o NATSOptions) (*Bus, error) {
	c, err := busnats.Open(ctx, o.URL, busnats.Options{Name: "factory-" + o.FactoryID, Logger: o.Log, Bind: true,
		ConnOptions: busnats.FactoryConnOptions(o.Subscription, o.Token)})
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if err := c.EnsureSubscription(ctx, o.Subscription); err != nil {
		_ = c.Close(ctx)
		return nil, fmt.Errorf("nats: subscription %s (the coordinator creates the streams; is it running?): %w", o.Subscription, err)
	}
	return NewBus(c, o.Subscription, o.Log), nil
}
