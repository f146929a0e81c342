package app

import (
	"context"
	"fmt"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/store/cosmos"
)

// EmulatorEndpoint is where the Cosmos DB emulator listens by default.
const EmulatorEndpoint = "https://localhost:8081/"

// openCosmos opens the Cosmos DB store: managed identity in Azure
// (CosmosDB__clientId), DefaultAzureCredential for developers, the emulator's
// key and self-signed TLS only when FLEET_COSMOS_EMULATOR=1. On the emulator
// the containers are created if missing; in Azure, Terraform owns them.
func openCosmos(ctx context.Context, l config.Lookup) (*OpenedStore, error) {
	emulator := l.Get(config.CosmosEmulator) == "1"
	endpoint := l.Get(config.CosmosEndpoint)
	if endpoint == "" && emulator {
		endpoint = EmulatorEndpoint
	}
	if endpoint == "" {
		return nil, fmt.Errorf("%s=cosmos needs %s (or %s=1 for the emulator)", config.Store, config.CosmosEndpoint, config.CosmosEmulator)
	}
	s, err := cosmos.New(cosmos.Config{
		Endpoint: endpoint,
		Database: l.Get(config.CosmosDatabase),
		ClientID: l.Get(config.CosmosClientID),
		Key:      l.Get(config.CosmosKey),
		Emulator: emulator,
	})
	if err != nil {
		return nil, fmt.Errorf("cosmos store: %w", err)
	}
	if emulator {
		if err := s.EnsureContainers(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("cosmos emulator: create containers: %w", err)
		}
	}
	return &OpenedStore{Store: s, Close: func() error { s.Close(); return nil }}, nil
}
