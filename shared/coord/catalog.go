package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Products, profiles and factories live in coord/catalog; this is their
// façade.

// Enroll registers a factory and issues its token.
func (c *Coordinator) Enroll(ctx context.Context, req catalog.EnrollRequest) (*fleet.Factory, string, error) {
	return c.catalog.Enroll(ctx, req)
}

// AuthenticateFactory resolves a factory token.
func (c *Coordinator) AuthenticateFactory(ctx context.Context, secret string) (*fleet.Token, error) {
	return c.catalog.AuthenticateFactory(ctx, secret)
}

// GetFactory reads one factory.
func (c *Coordinator) GetFactory(ctx context.Context, id string) (*fleet.Factory, error) {
	return c.catalog.GetFactory(ctx, id)
}

// ListFactories returns every factory, fresh from the store, sorted by id.
func (c *Coordinator) ListFactories(ctx context.Context, productID string) ([]*fleet.Factory, error) {
	return c.catalog.ListFactories(ctx, productID)
}

// Heartbeat records a factory's report.
func (c *Coordinator) Heartbeat(ctx context.Context, tok *fleet.Token, hb catalog.Heartbeat) (*fleet.Factory, error) {
	return c.catalog.Heartbeat(ctx, tok, hb)
}

// SetDraining drains a factory (draining true) or puts it back into service.
func (c *Coordinator) SetDraining(ctx context.Context, id string, draining bool) (*fleet.Factory, error) {
	return c.catalog.SetDraining(ctx, id, draining)
}

// Deregister removes a factory and revokes every token of its enrollment.
// Jobs it held are reaped when their leases expire; jobs dispatched to it
// are re-dispatched by the sweep.
//
// The document goes first, at the revision read: from then on no token of the
// factory authenticates, and a racing rotation either installed its token
// before (and the sweep of the factory's tokens below revokes it) or fails to
// install it and revokes it itself.
func (c *Coordinator) Deregister(ctx context.Context, id string) error {
	return c.catalog.Deregister(ctx, id)
}

// RotateToken issues a new token for the factory and revokes the old one.
func (c *Coordinator) RotateToken(ctx context.Context, id string) (string, error) {
	return c.catalog.RotateToken(ctx, id)
}

// RevokeToken revokes the factory's token; the factory stays enrolled and can
// be given a new one with RotateToken.
func (c *Coordinator) RevokeToken(ctx context.Context, id string) error {
	return c.catalog.RevokeToken(ctx, id)
}

// PutProduct declares a product and the repos it owns, replacing the list; a
// repo another product owns is a conflict.
func (c *Coordinator) PutProduct(ctx context.Context, productID, name string, repos []string) (*fleet.Product, error) {
	return c.catalog.PutProduct(ctx, productID, name, repos)
}

// DeclareProduct declares a product and the repos it owns, replacing the
// list.
func (c *Coordinator) DeclareProduct(ctx context.Context, req catalog.ProductRequest) (*fleet.Product, error) {
	return c.catalog.DeclareProduct(ctx, req)
}

// GetProduct reads a product.
func (c *Coordinator) GetProduct(ctx context.Context, productID string) (*fleet.Product, error) {
	return c.catalog.GetProduct(ctx, productID)
}

// Repos lists the repos the products in scope own, with their owners and the
// factories the scope sees that have them checked out; with productID set,
// that product's repos only.
func (c *Coordinator) Repos(ctx context.Context, scope catalog.Scope, productID string) ([]catalog.RepoInfo, error) {
	return c.catalog.Repos(ctx, scope, productID)
}

// QueueState returns the product's queue version (0 before any job).
func (c *Coordinator) QueueState(ctx context.Context, productID string) (fleet.QueueState, error) {
	return c.catalog.QueueState(ctx, productID)
}

// PutProfile parses the document and stores it as the profile's next version,
// which becomes its latest.
func (c *Coordinator) PutProfile(ctx context.Context, req catalog.PutProfileRequest) (*fleet.Profile, error) {
	return c.catalog.PutProfile(ctx, req)
}

// GetProfile reads version of a product's profile name, or its latest when
// version is 0.
func (c *Coordinator) GetProfile(ctx context.Context, productID, name string, version int64) (*fleet.Profile, error) {
	return c.catalog.GetProfile(ctx, productID, name, version)
}

// ListProfiles lists the latest version of each of a product's profiles, by
// name.
func (c *Coordinator) ListProfiles(ctx context.Context, productID string) ([]catalog.ProfileSummary, error) {
	return c.catalog.ListProfiles(ctx, productID)
}

// ProfileVersions lists every version of a product's profile name, oldest
// first; not_found when it has none.
func (c *Coordinator) ProfileVersions(ctx context.Context, productID, name string) ([]catalog.ProfileSummary, error) {
	return c.catalog.ProfileVersions(ctx, productID, name)
}

// View returns the view of scope, with the repos its products own as they are
// now (a long stream keeps that snapshot).
func (c *Coordinator) View(ctx context.Context, scope catalog.Scope) (*catalog.View, error) {
	return c.catalog.View(ctx, scope)
}
