package coord

import (
	"slices"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Scope is the products a reader may see; empty means every product. Reads
// that span products (explain, repos) take one, so a product-scoped
// operator learns nothing of the others.
type Scope []string

// Allows reports whether product is inside the scope.
func (s Scope) Allows(product string) bool { return len(s) == 0 || slices.Contains(s, product) }

// Sees reports whether factory f is visible: it serves a product inside the
// scope (a factory serving every product serves them all).
func (s Scope) Sees(f *fleet.Factory) bool { return len(s) == 0 || slices.ContainsFunc(s, f.Serves) }

// visible returns the factories s sees, fs itself when it sees every one.
func (s Scope) visible(fs []*fleet.Factory) []*fleet.Factory {
	if len(s) == 0 {
		return fs
	}
	out := make([]*fleet.Factory, 0, len(fs))
	for _, f := range fs {
		if s.Sees(f) {
			out = append(out, f)
		}
	}
	return out
}
