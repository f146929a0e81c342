package main

import (
	"context"
	"log/slog"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
)

// openServiceBus opens the Service Bus transport on the factory's (or its
// pool's) subscription.
func openServiceBus(ctx context.Context, cfg config.Config, log *slog.Logger) (transport.Receiver, error) {
	return transport.OpenServiceBus(ctx, transport.ServiceBusOptions{
		Namespace: cfg.ServiceBusNS, Topic: cfg.ServiceBusTopic, Subscription: cfg.Subscription,
		ClientID: cfg.ServiceBusClientID, Sessions: cfg.ServiceBusSessions,
	}, log)
}
