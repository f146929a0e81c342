package transport

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gigafactory/fleet/shared/bus/servicebus"
)

// ServiceBusOptions locate the factory's subscription.
type ServiceBusOptions struct {
	Namespace    string // ServiceBus__fullyQualifiedNamespace
	Topic        string // FLEET_SERVICEBUS_TOPIC
	Subscription string // FLEET_SERVICEBUS_SUBSCRIPTION: the factory's or pool's
	ClientID     string // user-assigned managed identity; "" = DefaultAzureCredential
	// Sessions must match how the subscriptions were provisioned.
	Sessions bool
}

// OpenServiceBus connects with the factory's managed identity and checks
// its subscription exists (a factory holding only Data Receiver cannot
// read entities; then the first receive reports a missing one).
// Subscriptions are provisioned by Terraform, never by a factory.
func OpenServiceBus(ctx context.Context, o ServiceBusOptions, log *slog.Logger) (*Bus, error) {
	c, err := servicebus.Open(ctx, servicebus.Options{Namespace: o.Namespace, Topic: o.Topic, ClientID: o.ClientID,
		Sessions: o.Sessions, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("servicebus: %w", err)
	}
	if err := c.EnsureSubscription(ctx, o.Subscription); err != nil {
		_ = c.Close(ctx)
		return nil, fmt.Errorf("servicebus: subscription %s: %w", o.Subscription, err)
	}
	return NewBus(c, o.Subscription, log), nil
}
