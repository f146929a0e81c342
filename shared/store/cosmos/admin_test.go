package cosmos

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// emptyAccount is a Store on a fake account without the database.
func emptyAccount(t *testing.T) (*fakeCosmos, *Store) {
	t.Helper()
	f := newFake(t)
	s, err := New(Config{Endpoint: f.endpoint, Database: "dev", Key: EmulatorKey, Transport: f, OperationTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return f, s
}

func TestEnsureContainersCreatesTheDeclaredShape(t *testing.T) {
	f, s := emptyAccount(t)
	ctx := context.Background()
	require.NoError(t, s.EnsureContainers(ctx))

	created := f.requests(func(r recorded) bool { return r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/colls") })
	require.Len(t, created, len(store.Containers))
	byName := map[string]map[string]json.RawMessage{}
	for _, r := range created {
		var props map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(r.Body, &props))
		var id string
		require.NoError(t, json.Unmarshal(props["id"], &id))
		byName[id] = props
	}
	for _, def := range store.Containers {
		props, ok := byName[def.Name]
		require.True(t, ok, def.Name)
		var pk struct {
			Paths   []string `json:"paths"`
			Kind    string   `json:"kind"`
			Version int      `json:"version"`
		}
		require.NoError(t, json.Unmarshal(props["partitionKey"], &pk))
		require.Equal(t, []string{def.PartitionKey}, pk.Paths, def.Name)
		require.Equal(t, "Hash", pk.Kind)
		require.Equal(t, 2, pk.Version)

		if def.DefaultTTL > 0 {
			require.JSONEq(t, string(mustJSON(def.DefaultTTL)), string(props["defaultTtl"]), def.Name)
		} else {
			require.NotContains(t, props, "defaultTtl", def.Name)
		}
		var idx indexingPolicyJSON
		require.NoError(t, json.Unmarshal(props["indexingPolicy"], &idx))
		require.Equal(t, "Consistent", idx.IndexingMode)
		require.Equal(t, []pathJSON{{Path: "/*"}}, idx.IncludedPaths)
		var excluded []string
		for _, p := range idx.ExcludedPaths {
			excluded = append(excluded, p.Path)
		}
		require.Equal(t, def.ExcludedPaths, excluded, def.Name)
	}

	// Idempotent: everything exists now and matches.
	f.reset()
	require.NoError(t, s.EnsureContainers(ctx))
	require.NoError(t, s.CheckContainers(ctx))
	require.Positive(t, s.Stats().Admin.Calls)

	// And the store works on what it created.
	_, err := s.Create(ctx, store.Jobs, "p", "j", []byte(`{}`))
	require.NoError(t, err)
}

type indexingPolicyJSON struct {
	IndexingMode  string     `json:"indexingMode"`
	IncludedPaths []pathJSON `json:"includedPaths"`
	ExcludedPaths []pathJSON `json:"excludedPaths"`
}

type pathJSON struct {
	Path string `json:"path"`
}

func TestCheckContainersReportsDrift(t *testing.T) {
	f, s := emptyAccount(t)
	ctx := context.Background()
	require.ErrorIs(t, s.CheckContainers(ctx), store.ErrNotFound, "nothing exists")

	// Everything exists, but fleet_jobs is partitioned on the wrong key.
	defs := map[string]string{}
	for _, c := range store.Containers {
		defs[c.Name] = c.PartitionKey
	}
	defs[store.Jobs] = "/id"
	f.addContainers("dev", defs)

	err := s.CheckContainers(ctx)
	require.ErrorContains(t, err, "container fleet_jobs differs from store.Containers: partition key [/id], want [/productId]")
	require.ErrorContains(t, err, "index path /body/? not excluded")
	require.ErrorContains(t, err, "container fleet_events differs from store.Containers: default TTL 0, want 7776000")

	err = s.EnsureContainers(ctx)
	require.ErrorContains(t, err, "partition key [/id], want [/productId]", "EnsureContainers never papers over drift")
}
