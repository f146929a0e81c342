package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gigafactory/fleet/shared/bus"
	natsgo "github.com/nats-io/nats.go"

	natsbus "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/bus/servicebus"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// busClient is what the coordinator's side needs of a broker: sending,
// dead letters (for the redispatch sweep) and subscription depth.
type busClient interface {
	bus.Sender
	bus.DeadLetterReceiver
	Depth(ctx context.Context, sub string) (int64, error)
	Close(ctx context.Context) error
}

// transport is the dispatch transport: the bus Dispatcher publishes and
// drains dead letters (coord.Publisher, GCPublisher, DeadLetterSource).
type transport struct {
	*bus.Dispatcher
	client busClient
}

// coord finds the dead-letter drain and control messages by a type
// assertion, so a signature drift would only disable them: the compiler
// checks all four here.
var (
	_ coord.Publisher        = (*transport)(nil)
	_ coord.GCPublisher      = (*transport)(nil)
	_ coord.DeadLetterSource = (*transport)(nil)
	_ coord.ControlPublisher = (*transport)(nil)
)

// openBus connects the dispatch transport the settings select: Service Bus
// when its namespace is set (or FLEET_BUS=servicebus), NATS at FLEET_NATS_URL,
// or none. It returns nil when there is no transport: jobs then go out only
// through the poll path.
func openBus(ctx context.Context, l config.Lookup, cfg coord.Config, log *slog.Logger) (*transport, error) {
	kind := l.Get(config.Bus)
	if l.Get(config.ServiceBusNS) != "" && kind != "none" {
		kind = "servicebus"
	}
	var client busClient
	switch kind {
	case "none":
		return nil, nil
	case "nats":
		url := l.Get(config.NATSURL)
		if url == "" {
			log.Warn("no NATS server configured (FLEET_NATS_URL): dispatch publishes nothing and factories must poll")
			return nil, nil
		}
		// No reconnect buffer: a publish made while disconnected fails at
		// once instead of going out later, so a failed publish means "not
		// sent" and the redispatch sweep, not a stale buffer, resends it.
		conn := []natsgo.Option{natsgo.ReconnectBufSize(-1)}
		if tok := l.Get(config.NATSToken); tok != "" {
			// The coordinator's own NATS secret (the local stack generates
			// it), never a fleet token.
			conn = append(conn, natsgo.Token(tok))
		}
		c, err := natsbus.Open(ctx, url, natsbus.Options{Name: "fleet-handler", Logger: log, ConnOptions: conn})
		if err != nil {
			return nil, fmt.Errorf("nats at %s: %w", url, err)
		}
		client = c
	case "servicebus":
		ns := l.Get(config.ServiceBusNS)
		if ns == "" {
			return nil, fmt.Errorf("%s=servicebus needs %s", config.Bus, config.ServiceBusNS)
		}
		c, err := servicebus.Open(ctx, servicebus.Options{Namespace: ns, ClientID: l.Get(config.ServiceBusClient),
			Topic: l.Get(config.ServiceBusTopic), Logger: log})
		if err != nil {
			return nil, fmt.Errorf("service bus %s: %w", ns, err)
		}
		client = c
	default:
		return nil, fmt.Errorf("%s=%q: want nats, servicebus or none", config.Bus, kind)
	}
	// A dispatch message outliving RedispatchAfter has been replaced by a
	// newer epoch, and accept would refuse it anyway.
	d := bus.NewDispatcher(client, bus.DispatcherOptions{DispatchTTL: cfg.RedispatchAfter, DeadLetters: client})
	return &transport{Dispatcher: d, client: client}, nil
}

// depthNotGranted stands for the figures when the broker refuses to count:
// Service Bus needs the Manage right for it, which Terraform gives the
// coordinator nowhere (terraform/README.md, "Grants").
const depthNotGranted = "not granted: counting needs the Service Bus Manage right"

// depths reports each factory's subscription depth, for /fleet/metrics.
func (t *transport) depths(ctx context.Context, factories []*fleet.Factory) (any, error) {
	out := map[string]int64{}
	for _, f := range factories {
		n, err := t.client.Depth(ctx, f.ID)
		if errors.Is(err, bus.ErrNotFound) {
			continue // no subscription yet: nothing was ever sent to it
		}
		if errors.Is(err, servicebus.ErrUnauthorized) {
			return map[string]any{"subscriptionDepth": depthNotGranted}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("depth of %s: %w", f.ID, err)
		}
		out[f.ID] = n
	}
	return map[string]any{"subscriptionDepth": out}, nil
}
