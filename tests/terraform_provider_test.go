package tests

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"
)

// A new Service Bus subscription comes with a $Default rule (a true filter)
// that delivers every message of the topic to it: unless it is deleted, every
// pool's subscription receives every dispatch beside its correlation rule.
// Terraform deletes it through the provider feature
// servicebus.auto_delete_subscription_default_rule (AZURE.md), which the
// mock-provider suite cannot see (a mock provider has no features), so this
// reads terraform/providers.tf with the HCL parser.
func TestTerraformProviderDeletesTheDefaultRule(t *testing.T) {
	t.Parallel()
	provider := tfBlock(tfBody(t, filepath.Join(tfRepoRoot(t), "terraform", "providers.tf")), "provider", "azurerm")
	require.NotNil(t, provider, `terraform/providers.tf: no provider "azurerm" block`)
	isTrue := func(where string, b *hclsyntax.Block, name, why string) {
		t.Helper()
		require.NotNil(t, b, "terraform/providers.tf: no %s", where)
		a, ok := b.Body.Attributes[name]
		require.True(t, ok, "terraform/providers.tf: %s sets no %s: %s", where, name, why)
		v, err := tfLiteral(a.Expr)
		require.NoError(t, err)
		require.True(t, v.Type() == cty.Bool && v.True(), "terraform/providers.tf: %s: %s = true is needed: %s", where, name, why)
	}
	isTrue(`provider "azurerm" { features { servicebus {} } }`, tfNested(provider, "features", "servicebus"),
		"auto_delete_subscription_default_rule", "or every pool subscription keeps its $Default rule and receives every dispatch")
	isTrue(`provider "azurerm"`, provider, "storage_use_azuread", "the storage account has shared keys off")
}
