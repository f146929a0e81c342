package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
)

// openServiceBus opens the Service Bus transport. The shared/bus/servicebus
// adapter has not landed yet; transport.Bus takes its client unchanged once
// it does (it has the same Receive/Complete/Abandon/DeadLetter methods as
// the NATS one).
func openServiceBus(context.Context, config.Config, *slog.Logger) (transport.Receiver, error) {
	return nil, errors.New("this build has no Service Bus adapter yet (shared/bus/servicebus); use --transport nats or poll")
}
