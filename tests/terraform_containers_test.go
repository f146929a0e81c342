package tests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gigafactory/fleet/shared/store"
)

// The Cosmos DB containers Terraform creates must be exactly the store's
// containers (shared/store/containers.go). terraform/cosmos.tf keeps its
// mirror in a locals block between "# BEGIN store.Containers" and
// "# END store.Containers"; this test parses that block as text (no terraform
// binary needed) and compares it field by field.
func TestTerraformContainersMatchStore(t *testing.T) {
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

// The parser must reject what it does not understand rather than skip it, or
// a mirror edited into a new shape would pass unchecked.
func TestTerraformContainersParserIsStrict(t *testing.T) {
	cases := map[string]string{
		"unknown attribute": `
  # BEGIN store.Containers
  cosmos_containers = {
    a = {
      partition_key  = "/id"
      default_ttl    = 0
      excluded_paths = []
      unique_keys    = []
    }
  }
  # END store.Containers`,
		"missing attribute": `
  # BEGIN store.Containers
  cosmos_containers = {
    a = {
      partition_key  = "/id"
      excluded_paths = []
    }
  }
  # END store.Containers`,
		"expression TTL": `
  # BEGIN store.Containers
  cosmos_containers = {
    a = {
      partition_key  = "/id"
      default_ttl    = var.ttl
      excluded_paths = []
    }
  }
  # END store.Containers`,
		"no markers": `cosmos_containers = {}`,
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

	ok := `
  # BEGIN store.Containers
  cosmos_containers = {
    a = {
      partition_key  = "/productId"
      default_ttl    = 90 * 24 * 3600 # comment
      excluded_paths = ["/body/?", "/data/*"]
    }
  }
  # END store.Containers`
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

var (
	tfEntryStart = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*\{$`)
	tfAttr       = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)$`)
	tfQuoted     = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
)

// tfParseCosmosContainers reads the cosmos_containers map from the delimited
// locals block: one `name = { ... }` per container with exactly the
// attributes partition_key (string), default_ttl (integer or product of
// integers) and excluded_paths (list of strings).
func tfParseCosmosContainers(path string) (map[string]store.Container, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	var (
		out      = map[string]store.Container{}
		inBlock  bool
		inMap    bool
		done     bool
		cur      *store.Container
		seen     map[string]bool
		lineNo   int
		scanner  = bufio.NewScanner(f)
		location = func() string { return fmt.Sprintf("%s:%d", filepath.Base(path), lineNo) }
	)
	for scanner.Scan() {
		lineNo++
		line := strings.TrimSpace(scanner.Text())
		switch {
		case line == "# BEGIN store.Containers":
			if inBlock || done {
				return nil, fmt.Errorf("%s: second BEGIN marker", location())
			}
			inBlock = true
			continue
		case line == "# END store.Containers":
			if !inBlock || cur != nil || inMap {
				return nil, fmt.Errorf("%s: END marker inside an unfinished block", location())
			}
			inBlock, done = false, true
			continue
		}
		if !inBlock {
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 && !strings.Contains(line[:i], `"`) {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		switch {
		case !inMap:
			if !regexp.MustCompile(`^cosmos_containers\s*=\s*\{$`).MatchString(line) {
				return nil, fmt.Errorf("%s: want `cosmos_containers = {`, got %q", location(), line)
			}
			inMap = true
		case cur == nil && line == "}":
			inMap = false
		case cur == nil:
			m := tfEntryStart.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("%s: want `<container> = {`, got %q", location(), line)
			}
			if _, dup := out[m[1]]; dup {
				return nil, fmt.Errorf("%s: container %q listed twice", location(), m[1])
			}
			cur = &store.Container{Name: m[1]}
			seen = map[string]bool{}
		case line == "}":
			for _, a := range []string{"partition_key", "default_ttl", "excluded_paths"} {
				if !seen[a] {
					return nil, fmt.Errorf("%s: container %q has no %s", location(), cur.Name, a)
				}
			}
			out[cur.Name] = *cur
			cur = nil
		default:
			m := tfAttr.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("%s: want `attribute = value`, got %q", location(), line)
			}
			name, value := m[1], strings.TrimSpace(m[2])
			if seen[name] {
				return nil, fmt.Errorf("%s: %s set twice", location(), name)
			}
			seen[name] = true
			switch name {
			case "partition_key":
				s, err := strconv.Unquote(value)
				if err != nil {
					return nil, fmt.Errorf("%s: partition_key %s is not a string literal", location(), value)
				}
				cur.PartitionKey = s
			case "default_ttl":
				n, err := tfParseIntProduct(value)
				if err != nil {
					return nil, fmt.Errorf("%s: default_ttl: %v", location(), err)
				}
				cur.DefaultTTL = n
			case "excluded_paths":
				paths, err := tfParseStringList(value)
				if err != nil {
					return nil, fmt.Errorf("%s: excluded_paths: %v", location(), err)
				}
				cur.ExcludedPaths = paths
			default:
				return nil, fmt.Errorf("%s: unknown attribute %q (teach the parser and coord.Container about it first)", location(), name)
			}
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if !done {
		return nil, fmt.Errorf("no complete `# BEGIN store.Containers` ... `# END store.Containers` block")
	}
	return out, nil
}

// tfParseIntProduct accepts "7776000" or "90 * 24 * 3600".
func tfParseIntProduct(s string) (int, error) {
	product := 1
	for _, factor := range strings.Split(s, "*") {
		n, err := strconv.Atoi(strings.TrimSpace(factor))
		if err != nil {
			return 0, fmt.Errorf("%q is not an integer or a product of integers", s)
		}
		product *= n
	}
	return product, nil
}

// tfParseStringList accepts `[]` or `["a", "b"]` on one line.
func tfParseStringList(s string) ([]string, error) {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("%q is not a one-line list", s)
	}
	inner := strings.TrimSpace(s[1 : len(s)-1])
	if inner == "" {
		return nil, nil
	}
	var out []string
	rest := tfQuoted.ReplaceAllStringFunc(inner, func(q string) string {
		v, err := strconv.Unquote(q)
		if err != nil {
			v = "\x00"
		}
		out = append(out, v)
		return ""
	})
	if strings.Trim(rest, ", ") != "" || slices.Contains(out, "\x00") {
		return nil, fmt.Errorf("%q is not a list of string literals", s)
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
