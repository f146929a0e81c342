package tests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus/servicebus"
)

// The subscriptions Terraform creates and the ones the Service Bus adapter
// provisions itself (Options.Provision: dev namespaces, tests) must be the
// same entities: the same rule name and the same dead-lettering model
// (terraform/README.md, "Dead letters"). This reads terraform/servicebus.tf as
// text, so it needs no terraform binary; the mock-provider suite
// (terraform/tests/pools.tftest.hcl) checks the planned values.
func TestTerraformSubscriptionsMatchAdapter(t *testing.T) {
	path := filepath.Join(tfRepoRoot(t), "terraform", "servicebus.tf")
	sub, err := tfResourceAttrs(path, "azurerm_servicebus_subscription", "pool")
	require.NoError(t, err)
	rule, err := tfResourceAttrs(path, "azurerm_servicebus_subscription_rule", "target")
	require.NoError(t, err)

	var diffs []string
	check := func(what, got, want string) {
		if got != want {
			diffs = append(diffs, fmt.Sprintf("%s: %s in terraform, %s in shared/bus/servicebus", what, got, want))
		}
	}
	check("rule name", rule["name"], strconv.Quote(servicebus.RuleName))
	check("dead_lettering_on_message_expiration", sub["dead_lettering_on_message_expiration"],
		strconv.FormatBool(servicebus.DeadLetterOnExpiration))
	check("dead_lettering_on_filter_evaluation_error", sub["dead_lettering_on_filter_evaluation_error"],
		strconv.FormatBool(servicebus.DeadLetterOnFilterError))
	for _, d := range diffs {
		t.Error(d)
	}
}

func TestTerraformResourceAttrsParser(t *testing.T) {
	src := `resource "a" "x" {
  name = "one" # comment
  nested {
    name = "inner"
  }
}

resource "b" "x" {
  flag = true
}
`
	path := filepath.Join(t.TempDir(), "x.tf")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	got, err := tfResourceAttrs(path, "a", "x")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"name": `"one"`}, got, "top-level attributes only, comments dropped")
	got, err = tfResourceAttrs(path, "b", "x")
	require.NoError(t, err)
	require.Equal(t, "true", got["flag"])
	_, err = tfResourceAttrs(path, "c", "x")
	require.Error(t, err, "a missing resource is an error, not an empty map")
}

var tfTopAttr = regexp.MustCompile(`^  ([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+?)\s*(#.*)?$`)

// tfResourceAttrs returns the top-level attributes of resource typ.name in
// path as written (a string keeps its quotes), from a file formatted by
// terraform fmt (two-space indent, closing brace in column 0).
func tfResourceAttrs(path, typ, name string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := fmt.Sprintf("resource %q %q {", typ, name)
	attrs := map[string]string{}
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == head:
			in, found = true, true
		case in && line == "}":
			return attrs, nil
		case in:
			if m := tfTopAttr.FindStringSubmatch(line); m != nil {
				attrs[m[1]] = m[2]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%s: no %s", path, head)
	}
	return nil, fmt.Errorf("%s: %s is not closed", path, head)
}
