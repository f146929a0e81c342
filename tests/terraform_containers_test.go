package tests

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/gigafactory/fleet/shared/store"
)

// The Cosmos DB containers Terraform creates must be exactly the store's
// containers (shared/store/containers.go). terraform/cosmos.tf keeps its
// mirror in local.cosmos_containers; this test reads it with the HCL parser
// (no terraform binary needed) and compares it field by field.
func TestTerraformContainersMatchStore(t *testing.T) {
	t.Parallel()
	got, err := tfParseCosmosContainers(filepath.Join(tfRepoRoot(t), "terraform", "cosmos.tf"))
	if err != nil {
		t.Fatalf("terraform/cosmos.tf: %v", err)
	}

	want := map[string]store.Container{}
	for _, c := range store.Containers {
		if _, dup := want[c.Name]; dup {
			t.Fatalf("store.Containers lists %q twice", c.Name)
		}
		want[c.Name] = c
	}

	var diffs []string
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: in store.Containers, missing from terraform/cosmos.tf", name))
			continue
		}
		if g.PartitionKey != w.PartitionKey {
			diffs = append(diffs, fmt.Sprintf("%s: partition key %q in terraform, %q in coord", name, g.PartitionKey, w.PartitionKey))
		}
		if g.DefaultTTL != w.DefaultTTL {
			diffs = append(diffs, fmt.Sprintf("%s: default TTL %d in terraform, %d in coord", name, g.DefaultTTL, w.DefaultTTL))
		}
		if !tfSameSet(g.ExcludedPaths, w.ExcludedPaths) {
			diffs = append(diffs, fmt.Sprintf("%s: excluded paths %q in terraform, %q in coord", name, g.ExcludedPaths, w.ExcludedPaths))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: in terraform/cosmos.tf, not in store.Containers", name))
		}
	}
	slices.Sort(diffs)
	for _, d := range diffs {
		t.Error(d)
	}
}

// The reader must reject what it does not understand rather than skip it, or
// a mirror edited into a new shape would pass unchecked.
func TestTerraformContainersParserIsStrict(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"unknown attribute": `locals {
  cosmos_containers = {
    a = {
      partition_key  = "/id"
      default_ttl    = 0
      excluded_paths = []
      unique_keys    = []
    }
  }
}`,
		"missing attribute": `locals {
  cosmos_containers = {
    a = {
      partition_key  = "/id"
      excluded_paths = []
    }
  }
}`,
		"expression TTL": `locals {
  cosmos_containers = {
    a = {
      partition_key  = "/id"
      default_ttl    = var.ttl
      excluded_paths = []
    }
  }
}`,
		"not a local": `cosmos_containers = {}`,
		"a string TTL": `locals {
  cosmos_containers = {
    a = {
      partition_key  = "/id"
      default_ttl    = "0"
      excluded_paths = []
    }
  }
}`,
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cosmos.tf")
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := tfParseCosmosContainers(path); err == nil {
				t.Fatalf("parsed %+v, want an error", got)
			}
		})
	}

	ok := `locals {
  cosmos_containers = {
    a = {
      partition_key  = "/productId"
      default_ttl    = 90 * 24 * 3600 # comment
      excluded_paths = ["/body/?", "/data/*"]
    }
  }
}`
	path := filepath.Join(t.TempDir(), "cosmos.tf")
	if err := os.WriteFile(path, []byte(ok), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := tfParseCosmosContainers(path)
	if err != nil {
		t.Fatal(err)
	}
	a := got["a"]
	if a.PartitionKey != "/productId" || a.DefaultTTL != 7776000 || !slices.Equal(a.ExcludedPaths, []string{"/body/?", "/data/*"}) {
		t.Fatalf("parsed %+v", a)
	}
}

// tfParseCosmosContainers reads local.cosmos_containers of a .tf file: one
// `name = { ... }` per container with exactly the attributes partition_key
// (a string), default_ttl (a number, literal or a literal product) and
// excluded_paths (a list of strings), none of them needing a variable.
func tfParseCosmosContainers(path string) (map[string]store.Container, error) {
	body, err := tfParse(path)
	if err != nil {
		return nil, err
	}
	expr, ok := tfLocals(body)["cosmos_containers"]
	if !ok {
		return nil, fmt.Errorf("%s: no local cosmos_containers", filepath.Base(path))
	}
	v, err := tfLiteral(expr)
	if err != nil {
		return nil, err
	}
	if !v.Type().IsObjectType() {
		return nil, fmt.Errorf("%s: cosmos_containers is %s, want a map of containers", expr.Range(), v.Type().FriendlyName())
	}
	out := map[string]store.Container{}
	for name, c := range v.AsValueMap() {
		if !c.Type().IsObjectType() {
			return nil, fmt.Errorf("%s: container %s is %s, want an object", expr.Range(), name, c.Type().FriendlyName())
		}
		attrs := c.AsValueMap()
		for a := range attrs {
			if !slices.Contains([]string{"partition_key", "default_ttl", "excluded_paths"}, a) {
				return nil, fmt.Errorf("container %s: unknown attribute %q (teach this test and store.Container about it first)", name, a)
			}
		}
		pk, ttl, paths := attrs["partition_key"], attrs["default_ttl"], attrs["excluded_paths"]
		switch {
		case pk == cty.NilVal || pk.Type() != cty.String:
			return nil, fmt.Errorf("container %s: partition_key must be a string", name)
		case ttl == cty.NilVal || ttl.Type() != cty.Number:
			return nil, fmt.Errorf("container %s: default_ttl must be a number", name)
		case paths == cty.NilVal || !(paths.Type().IsTupleType() || paths.Type().IsListType()):
			return nil, fmt.Errorf("container %s: excluded_paths must be a list", name)
		}
		n, acc := ttl.AsBigFloat().Int64()
		if acc != big.Exact {
			return nil, fmt.Errorf("container %s: default_ttl %s is not a whole number", name, ttl.AsBigFloat())
		}
		sc := store.Container{Name: name, PartitionKey: pk.AsString(), DefaultTTL: int(n)}
		for _, p := range paths.AsValueSlice() {
			if p.Type() != cty.String {
				return nil, fmt.Errorf("container %s: excluded_paths must hold strings", name)
			}
			sc.ExcludedPaths = append(sc.ExcludedPaths, p.AsString())
		}
		out[name] = sc
	}
	return out, nil
}

func tfSameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// tfRepoRoot is the directory holding go.mod, found upwards from the test's
// working directory (the package directory under `go test`).
func tfRepoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}
