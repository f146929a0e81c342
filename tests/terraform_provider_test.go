package tests

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A new Service Bus subscription comes with a $Default rule (a true filter)
// that delivers every message of the topic to it: unless it is deleted, every
// pool's subscription receives every dispatch beside its correlation rule.
// Terraform deletes it through the provider feature
// servicebus.auto_delete_subscription_default_rule (AZURE.md), which the
// mock-provider suite cannot see (a mock provider has no features), so this
// reads terraform/providers.tf as text.
func TestTerraformProviderDeletesTheDefaultRule(t *testing.T) {
	attrs, err := tfBlockAttrs(filepath.Join(tfRepoRoot(t), "terraform", "providers.tf"))
	require.NoError(t, err)
	require.Equal(t, "true", attrs[`provider "azurerm"/features/servicebus/auto_delete_subscription_default_rule`],
		`terraform/providers.tf: provider "azurerm" { features { servicebus { auto_delete_subscription_default_rule = true } } } is needed, or every pool subscription keeps its $Default rule and receives every dispatch`)
	require.Equal(t, "true", attrs[`provider "azurerm"/storage_use_azuread`],
		"terraform/providers.tf: storage_use_azuread = true: the storage account has shared keys off")
}

func TestTerraformBlockAttrsParser(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.tf")
	require.NoError(t, os.WriteFile(path, []byte(`# top
provider "azurerm" {
  a = 1 # note
  features {
    servicebus {
      x = true
    }
    # servicebus { x = false }
  }
  m = { k = "v" }
  tags = merge(local.tags, {
    k = "v"
  })
  n = {
    k = "v"
  }
  s = merge({
    k = "v"
  }, local.more)
}
locals {
  x = "y"
}
`), 0o644))
	attrs, err := tfBlockAttrs(path)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		`provider "azurerm"/a`:                     "1",
		`provider "azurerm"/features/servicebus/x`: "true",
		`provider "azurerm"/m`:                     `{ k = "v" }`,
		`locals/x`:                                 `"y"`,
		`provider "azurerm"/tags =/k`:              `"v"`,
		`provider "azurerm"/s =/k`:                 `"v"`,
		`provider "azurerm"/n =/k`:                 `"v"`,
	}, attrs)

	require.NoError(t, os.WriteFile(path, []byte("provider \"azurerm\" {\n  features {\n}\n"), 0o644))
	_, err = tfBlockAttrs(path)
	require.ErrorContains(t, err, "not closed")
}

var (
	tfBlockOpen = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*(?:\s+"[^"]*")*)\s*\{\s*$`)
	tfAttrLine  = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+?)\s*(#.*)?$`)
)

// tfBlockAttrs returns every one-line attribute of a formatted .tf file by
// its block path ("provider \"azurerm\"/features/servicebus/name"). It
// reads what `terraform fmt` writes: one block opening or closing per line.
func tfBlockAttrs(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	attrs := map[string]string{}
	var stack []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "//"):
		case strings.HasPrefix(trimmed, "}"):
			// "}", "})", "}, local.x)": formatted HCL closes one block or
			// map per line, at its start.
			if len(stack) == 0 {
				return nil, errUnbalanced(path)
			}
			stack = stack[:len(stack)-1]
		default:
			if m := tfBlockOpen.FindStringSubmatch(line); m != nil {
				stack = append(stack, strings.Join(strings.Fields(m[1]), " "))
				continue
			}
			if m := tfAttrLine.FindStringSubmatch(line); m != nil && len(stack) > 0 {
				if strings.HasSuffix(m[2], "{") {
					// A map over several lines: its "}" closes it, not the block.
					stack = append(stack, m[1]+" =")
					continue
				}
				attrs[strings.Join(append(append([]string(nil), stack...), m[1]), "/")] = m[2]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(stack) > 0 {
		return nil, errUnbalanced(path)
	}
	return attrs, nil
}

type tfParseError string

func (e tfParseError) Error() string { return string(e) }

func errUnbalanced(path string) error {
	return tfParseError(path + ": a block is not closed, or closed twice")
}
