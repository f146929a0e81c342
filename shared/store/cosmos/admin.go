package cosmos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// containerProperties is the Cosmos definition of one of store.Containers,
// as EnsureContainers creates it and as terraform/cosmos.tf declares it:
// hash partitioning (v2, which allows keys longer than 100 bytes),
// consistent indexing of everything but the excluded paths, and the default
// TTL when one is set.
func containerProperties(def store.Container) azcosmos.ContainerProperties {
	props := azcosmos.ContainerProperties{
		ID: def.Name,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{
			Kind:    azcosmos.PartitionKeyKindHash,
			Paths:   []string{def.PartitionKey},
			Version: 2,
		},
		IndexingPolicy: &azcosmos.IndexingPolicy{
			Automatic:     true,
			IndexingMode:  azcosmos.IndexingModeConsistent,
			IncludedPaths: []azcosmos.IncludedPath{{Path: "/*"}},
		},
	}
	for _, p := range def.ExcludedPaths {
		props.IndexingPolicy.ExcludedPaths = append(props.IndexingPolicy.ExcludedPaths, azcosmos.ExcludedPath{Path: p})
	}
	if def.DefaultTTL > 0 {
		ttl := int32(def.DefaultTTL)
		props.DefaultTimeToLive = &ttl
	}
	return props
}

// EnsureContainers creates the database and every container of
// store.Containers that does not exist, for the emulator and development
// accounts; production containers come from Terraform (and the production
// identity may not create them: data-plane RBAC has no metadata writes).
// Containers that already exist are checked as CheckContainers does.
// Throughput is left to the account (serverless or the emulator's default).
func (s *Store) EnsureContainers(ctx context.Context) error {
	err := s.run(ctx, opAdmin, "database "+s.cfg.Database, false, func(ctx context.Context, cn *conn) error {
		_, err := cn.client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: s.cfg.Database}, nil)
		if isStatus(err, http.StatusConflict) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	var problems []error
	for _, def := range store.Containers {
		err := s.run(ctx, opAdmin, "container "+def.Name, false, func(ctx context.Context, cn *conn) error {
			_, err := cn.db.CreateContainer(ctx, containerProperties(def), nil)
			return err
		})
		if errors.Is(err, store.ErrExists) {
			err = s.checkContainer(ctx, def)
		}
		if err != nil {
			problems = append(problems, err)
		}
	}
	return errors.Join(problems...)
}

// CheckContainers verifies that every container of store.Containers exists
// with the partition key, default TTL and excluded index paths declared
// there. A partition key that differs makes every point operation fail or
// land elsewhere, so a process should refuse to start on it.
func (s *Store) CheckContainers(ctx context.Context) error {
	var problems []error
	for _, def := range store.Containers {
		if err := s.checkContainer(ctx, def); err != nil {
			problems = append(problems, err)
		}
	}
	return errors.Join(problems...)
}

func (s *Store) checkContainer(ctx context.Context, def store.Container) error {
	c := s.containers[def.Name]
	var props *azcosmos.ContainerProperties
	err := s.run(ctx, opAdmin, "container "+def.Name, true, func(ctx context.Context, cn *conn) error {
		resp, err := cn.coll(c).Read(ctx, nil)
		if err != nil {
			return err
		}
		props = resp.ContainerProperties
		return nil
	})
	if err != nil {
		return err
	}
	if props == nil {
		return fmt.Errorf("cosmos: container %s: read returned no properties", def.Name)
	}
	if diff := diffContainer(def, *props); len(diff) > 0 {
		return fmt.Errorf("cosmos: container %s differs from store.Containers: %s", def.Name, strings.Join(diff, "; "))
	}
	return nil
}

// diffContainer lists how props differs from def.
func diffContainer(def store.Container, props azcosmos.ContainerProperties) []string {
	var diff []string
	if got := props.PartitionKeyDefinition.Paths; !slices.Equal(got, []string{def.PartitionKey}) {
		diff = append(diff, fmt.Sprintf("partition key %v, want [%s]", got, def.PartitionKey))
	}
	gotTTL := 0
	if props.DefaultTimeToLive != nil {
		gotTTL = int(*props.DefaultTimeToLive)
	}
	if gotTTL != def.DefaultTTL {
		diff = append(diff, fmt.Sprintf("default TTL %d, want %d", gotTTL, def.DefaultTTL))
	}
	var excluded []string
	if props.IndexingPolicy != nil {
		for _, p := range props.IndexingPolicy.ExcludedPaths {
			excluded = append(excluded, p.Path)
		}
	}
	for _, p := range def.ExcludedPaths {
		// Cosmos adds its own exclusion (/"_etag"/?), so only the declared
		// paths are required to be present.
		if !slices.Contains(excluded, p) {
			diff = append(diff, fmt.Sprintf("index path %s not excluded", p))
		}
	}
	return diff
}
