package catalog

import (
	"context"
	"errors"
	"slices"

	"github.com/gigafactory/fleet/shared/coord/live"

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

// Visible returns the factories s sees, fs itself when it sees every one.
func (s Scope) Visible(fs []*fleet.Factory) []*fleet.Factory {
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

// View shows factories as a reader of one scope may see them: only those
// serving a product of the scope, and of each only the scope's products
// and the repos those products own. Its capabilities, load and health
// stay: they say what it can run and how busy it is, not for whom. A
// shared factory otherwise tells a product-scoped operator which other
// products it serves and which of their repos it has checked out.
type View struct {
	scope Scope
	// owned are the repos the scope's products own; nil for an unscoped
	// view, which shows every factory as it is.
	owned map[string]bool
}

// View returns the view of scope, with the repos its products own as they
// are now (a long stream keeps that snapshot).
func (c *Service) View(ctx context.Context, scope Scope) (*View, error) {
	v := &View{scope: scope}
	if len(scope) == 0 {
		return v, nil
	}
	v.owned = map[string]bool{}
	for _, id := range scope {
		p, err := c.CachedProduct(ctx, id)
		if errors.Is(err, fleet.ErrNotFound) {
			continue // declares no repos yet
		}
		if err != nil {
			return nil, err
		}
		for _, r := range p.Repos {
			v.owned[r] = true
		}
	}
	return v, nil
}

// Factory returns f as the view shows it (a copy when it differs), or nil
// when the view does not see f.
func (v *View) Factory(f *fleet.Factory) *fleet.Factory {
	if len(v.scope) == 0 {
		return f
	}
	if !v.scope.Sees(f) {
		return nil
	}
	out := *f
	if len(f.Products) > 0 {
		// Sees guarantees one is left.
		out.Products = slices.DeleteFunc(slices.Clone(f.Products), func(p string) bool { return !v.scope.Allows(p) })
		out.ProductID = out.Products[0]
	}
	out.Repos = slices.DeleteFunc(slices.Clone(f.Repos), func(r string) bool { return !v.owned[r] })
	return &out
}

// Factories returns the factories of fs the view sees, as it shows them.
func (v *View) Factories(fs []*fleet.Factory) []*fleet.Factory {
	if len(v.scope) == 0 {
		return fs
	}
	out := make([]*fleet.Factory, 0, len(fs))
	for _, f := range fs {
		if seen := v.Factory(f); seen != nil {
			out = append(out, seen)
		}
	}
	return out
}

// Change returns ch with its factory as the view shows it. A product
// stream carries only factories serving its product, which the view sees.
func (v *View) Change(ch live.Change) live.Change {
	if ch.Factory != nil {
		if seen := v.Factory(ch.Factory); seen != nil {
			ch.Factory = seen
		}
	}
	return ch
}
