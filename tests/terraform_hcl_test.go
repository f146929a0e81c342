package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"
)

// The Terraform tests that need no terraform binary read the .tf files
// with HashiCorp's own HCL parser: what terraform itself would parse,
// comments, multi-line maps and all.

// tfBody parses a .tf file.
func tfBody(t *testing.T, path string) *hclsyntax.Body {
	t.Helper()
	b, err := tfParse(path)
	require.NoError(t, err)
	return b
}

func tfParse(path string) (*hclsyntax.Body, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, diags := hclsyntax.ParseConfig(src, filepath.Base(path), hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	return f.Body.(*hclsyntax.Body), nil
}

// tfBlock is the first block in body of the type and labels given, or nil.
func tfBlock(body *hclsyntax.Body, typ string, labels ...string) *hclsyntax.Block {
	if body == nil {
		return nil
	}
	for _, b := range body.Blocks {
		if b.Type == typ && slices.Equal(b.Labels, labels) {
			return b
		}
	}
	return nil
}

// tfNested is the block reached from b through nested blocks of the types
// given (the first of each), or nil where one is missing.
func tfNested(b *hclsyntax.Block, types ...string) *hclsyntax.Block {
	for _, typ := range types {
		if b == nil {
			return nil
		}
		b = tfBlock(b.Body, typ)
	}
	return b
}

// tfLocals are the attributes of every locals block of body by name.
func tfLocals(bodies ...*hclsyntax.Body) map[string]hclsyntax.Expression {
	out := map[string]hclsyntax.Expression{}
	for _, body := range bodies {
		for _, b := range body.Blocks {
			if b.Type == "locals" {
				for name, a := range b.Body.Attributes {
					out[name] = a.Expr
				}
			}
		}
	}
	return out
}

// tfLiteral is the value of an expression that needs no variable, local
// or function: an error for anything else.
func tfLiteral(expr hclsyntax.Expression) (cty.Value, error) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("%s: not a literal: %s", expr.Range(), diags.Error())
	}
	return v, nil
}

// tfObjectKeys are the keys a map-valued expression can have: an object
// literal's, merge()'s arguments', both branches of a condition, and those
// of a local it names (followed through locals).
func tfObjectKeys(expr hclsyntax.Expression, locals map[string]hclsyntax.Expression) []string {
	var keys []string
	var walk func(e hclsyntax.Expression, depth int)
	walk = func(e hclsyntax.Expression, depth int) {
		if depth > 8 {
			return
		}
		switch e := e.(type) {
		case *hclsyntax.ObjectConsExpr:
			for _, item := range e.Items {
				if k := hcl.ExprAsKeyword(item.KeyExpr); k != "" {
					keys = append(keys, k)
				} else if v, err := tfLiteral(item.KeyExpr); err == nil && v.Type() == cty.String {
					keys = append(keys, v.AsString())
				}
			}
		case *hclsyntax.FunctionCallExpr:
			if e.Name == "merge" {
				for _, a := range e.Args {
					walk(a, depth+1)
				}
			}
		case *hclsyntax.ConditionalExpr:
			walk(e.TrueResult, depth+1)
			walk(e.FalseResult, depth+1)
		case *hclsyntax.ScopeTraversalExpr:
			if len(e.Traversal) == 2 && e.Traversal.RootName() == "local" {
				if a, ok := e.Traversal[1].(hcl.TraverseAttr); ok {
					if l, ok := locals[a.Name]; ok {
						walk(l, depth+1)
					}
				}
			}
		}
	}
	walk(expr, 0)
	return keys
}

// TestTerraformHCLHelpers: the helpers find what they are asked for in a
// file terraform fmt would leave as it is, and refuse what is not a literal.
func TestTerraformHCLHelpers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "p.tf")
	require.NoError(t, os.WriteFile(path, []byte(`# top
provider "azurerm" {
  a = 1 # note
  features {
    servicebus {
      x = true
    }
  }
}
locals {
  settings = merge({
    A = "1"
    "B" = var.b
  }, local.more, var.on ? { C = "3" } : {})
  more = { D = "4" }
  ttl  = 90 * 24 * 3600
  ref  = var.ttl
}
`), 0o644))
	body := tfBody(t, path)
	sb := tfNested(tfBlock(body, "provider", "azurerm"), "features", "servicebus")
	require.NotNil(t, sb)
	require.Nil(t, tfNested(tfBlock(body, "provider", "azurerm"), "features", "key_vault"))
	v, err := tfLiteral(sb.Body.Attributes["x"].Expr)
	require.NoError(t, err)
	require.True(t, v.True())
	require.Nil(t, tfBlock(body, "provider", "google"))

	locals := tfLocals(body)
	require.ElementsMatch(t, []string{"A", "B", "C", "D"}, tfObjectKeys(locals["settings"], locals))
	ttl, err := tfLiteral(locals["ttl"])
	require.NoError(t, err)
	require.True(t, ttl.Equals(cty.NumberIntVal(7776000)).True(), "%#v", ttl)
	_, err = tfLiteral(locals["ref"])
	require.Error(t, err)

	require.NoError(t, os.WriteFile(path, []byte("provider \"azurerm\" {\n  features {\n}\n"), 0o644))
	_, err = tfParse(path)
	require.Error(t, err, "an unclosed block")
}
