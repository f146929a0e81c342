package cosmos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/store/storetest"
)

// liveConfig reads the account to run the conformance suite against from
// the environment, named as the Azure app settings are:
//
//	CosmosDB__accountEndpoint  account endpoint (required unless the emulator)
//	CosmosDB__clientId         user-assigned managed identity (optional)
//	FLEET_COSMOS_EMULATOR=1    the local emulator: well-known key, no TLS
//	                           verification, endpoint https://localhost:8081/
//	                           unless CosmosDB__accountEndpoint says otherwise
//	FLEET_COSMOS_KEY           an account key (optional; test accounts only)
//
// The suite creates one database per subtest (each must start empty), so the
// identity needs metadata-write rights: the emulator's key, an account key,
// or a role that allows creating databases. The production identity has
// data-plane rights only and cannot run it. Against the emulator, bound the
// number of databases alive at once with -parallel (e.g. -parallel 2): it
// limits how many containers it hosts.
func liveConfig() (Config, string) {
	cfg := Config{
		Endpoint: os.Getenv("CosmosDB__accountEndpoint"),
		ClientID: os.Getenv("CosmosDB__clientId"),
		Key:      os.Getenv("FLEET_COSMOS_KEY"),
		Emulator: os.Getenv("FLEET_COSMOS_EMULATOR") == "1",
	}
	if cfg.Endpoint == "" && cfg.Emulator {
		cfg.Endpoint = "https://localhost:8081/"
	}
	if cfg.Endpoint == "" {
		return cfg, "cosmos: CosmosDB__accountEndpoint not set; conformance suite skipped"
	}
	// Container creation and the suite's races take longer than a request.
	cfg.OperationTimeout = time.Minute
	return cfg, ""
}

// TestConformance runs the store conformance suite against a real account
// or the emulator, each subtest on a database of its own, dropped after.
func TestConformance(t *testing.T) {
	cfg, skip := liveConfig()
	if skip != "" {
		t.Skip(skip)
	}
	run := make([]byte, 4)
	_, err := rand.Read(run)
	require.NoError(t, err)
	prefix := "fleetconf-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(run)
	var seq atomic.Int64

	storetest.Run(t, func(t *testing.T) store.Store {
		c := cfg
		c.Database = fmt.Sprintf("%s-%d", prefix, seq.Add(1))
		s, err := New(c)
		require.NoError(t, err)
		t.Cleanup(func() {
			// Not t.Context(): it is canceled before cleanups run.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := s.conn.Load().db.Delete(ctx, nil)
			s.Close()
			if !isStatus(err, http.StatusNotFound) { // never created
				require.NoError(t, err, "drop database %s", c.Database)
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		require.NoError(t, s.EnsureContainers(ctx), "create database %s", c.Database)
		return s
	})
}

// TestConformanceOnFake runs the same suite against the in-memory fake
// account, with every container split into three feed ranges. The fake's
// Cosmos semantics are this package's reading of the service, so this is no
// substitute for TestConformance; it proves that the adapter's own logic —
// request building, error mapping, body handling, multi-range continuations,
// its shared state under concurrency — meets the contract end to end through
// the real SDK.
func TestConformanceOnFake(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		fx := newFixture(t, nil)
		for _, c := range store.Containers {
			fx.fake.setRanges(testDB, c.Name, 3)
		}
		return fx.store
	})
}
