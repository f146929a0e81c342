package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Profiles live in their product's partition of Profiles as two kinds of
// document: one per version (id name:<version>, written once with Create and
// never replaced) and one "latest" pointer per name (id name, a copy of the
// newest version) moved forward by compare-and-swap. Create is what makes
// versions distinct: two racing PUTs cannot both create version n+1, so the
// loser moves on to n+2 and nothing is ever overwritten.

// Profile document kinds, stored in the document so one partition query
// selects either.
const (
	profileKindVersion = "version"
	profileKindLatest  = "latest"
)

// profileDoc is a stored profile document.
type profileDoc struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	fleet.Profile
}

// ProfileSummary is a profile version without its instructions, as lists show it.
type ProfileSummary = view.ProfileSummary

func summarize(p *fleet.Profile) ProfileSummary {
	return ProfileSummary{Name: p.Name, ProductID: p.ProductID, Version: p.Version, Capabilities: p.Capabilities,
		Engine: p.Engine, Budget: p.Budget, BodyBytes: len(p.Body), CreatedBy: p.CreatedBy, CreatedAt: p.CreatedAt}
}

// PutProfileRequest is one new version of a profile.
type PutProfileRequest struct {
	ProductID string
	Name      string
	// Document is the Markdown profile: front matter and instructions.
	Document []byte
	// Actor is who writes it (the operator's name), recorded in the version.
	Actor string
}

// PutProfile parses the document and stores it as the profile's next
// version, which becomes its latest. Earlier versions stay as they were:
// jobs that snapshotted one keep it.
func (c *Service) PutProfile(ctx context.Context, req PutProfileRequest) (*fleet.Profile, error) {
	if err := fleet.ValidateName("productId", req.ProductID); err != nil {
		return nil, err
	}
	p, err := fleet.ParseProfile(req.Name, req.Document)
	if err != nil {
		return nil, err
	}
	p.ProductID, p.CreatedBy = req.ProductID, req.Actor
	for range kernel.MaxCASAttempts {
		latest, rev, err := c.readLatestProfile(ctx, req.ProductID, req.Name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		next := int64(1)
		if latest != nil {
			next = latest.Version + 1
		}
		p.Version, p.CreatedAt = next, c.k.Now()
		body, err := json.Marshal(profileDoc{ID: fleet.ProfileVersionID(p.Name, next), Kind: profileKindVersion, Profile: *p})
		if err != nil {
			return nil, fmt.Errorf("encode profile: %w", err)
		}
		_, err = c.k.Store.Create(ctx, store.Profiles, req.ProductID, fleet.ProfileVersionID(p.Name, next), body)
		if errors.Is(err, store.ErrExists) {
			// Another PUT took this version; it may have stopped before
			// moving the pointer, so move it for it, then try the next.
			c.k.Counters.CASConflicts.Add(1)
			if err := c.advanceLatestProfile(ctx, req.ProductID, req.Name, next, rev); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create profile version: %w", err)
		}
		if err := c.advanceLatestProfile(ctx, req.ProductID, req.Name, next, rev); err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, &kernel.ConflictError{Kind: "profile", ID: req.Name, Attempts: kernel.MaxCASAttempts}
}

// advanceLatestProfile moves the latest pointer of name to version v, read
// from its version document, unless it already points there or past it.
// rev is the pointer's revision when it was read ("" when there was none);
// a lost race re-reads it.
func (c *Service) advanceLatestProfile(ctx context.Context, productID, name string, v int64, rev string) error {
	it, err := c.k.Store.Read(ctx, store.Profiles, productID, fleet.ProfileVersionID(name, v))
	if err != nil {
		return fmt.Errorf("read profile %s version %d: %w", name, v, err)
	}
	d, err := kernel.Decode[profileDoc](it)
	if err != nil {
		return err
	}
	d.ID, d.Kind = name, profileKindLatest
	body, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode profile: %w", err)
	}
	for range kernel.MaxCASAttempts {
		if rev == "" {
			_, err = c.k.Store.Create(ctx, store.Profiles, productID, name, body)
		} else {
			_, err = c.k.Store.Replace(ctx, store.Profiles, productID, name, body, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrPrecondition) && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("write profile %s latest: %w", name, err)
		}
		latest, r, err := c.readLatestProfile(ctx, productID, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			rev = ""
			continue
		case err != nil:
			return err
		case latest.Version >= v:
			return nil
		}
		rev = r
	}
	return &kernel.ConflictError{Kind: "profile", ID: name, Attempts: kernel.MaxCASAttempts}
}

// readLatestProfile reads the latest pointer of name and its revision;
// ErrNotFound when the profile has no version yet.
func (c *Service) readLatestProfile(ctx context.Context, productID, name string) (*fleet.Profile, string, error) {
	it, err := c.k.Store.Read(ctx, store.Profiles, productID, name)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("read profile %s: %w", name, err)
	}
	d, err := kernel.Decode[profileDoc](it)
	if err != nil {
		return nil, "", err
	}
	return &d.Profile, it.Rev, nil
}

// GetProfile reads version of a product's profile name, or its latest
// when version is 0.
func (c *Service) GetProfile(ctx context.Context, productID, name string, version int64) (*fleet.Profile, error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, err
	}
	if err := fleet.ValidateName("name", name); err != nil {
		return nil, err
	}
	if version < 0 {
		return nil, fleet.Invalid("version", "must be a positive version number")
	}
	notFound := func(err error) error {
		what := "profile " + name
		if version > 0 {
			what += fmt.Sprintf(" version %d", version)
		}
		return &fleet.Error{Code: fleet.CodeNotFound, Message: fmt.Sprintf("%s not found in product %s", what, productID), Err: err}
	}
	if version == 0 {
		p, _, err := c.readLatestProfile(ctx, productID, name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(err)
		}
		return p, err
	}
	it, err := c.k.Store.Read(ctx, store.Profiles, productID, fleet.ProfileVersionID(name, version))
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(err)
	}
	if err != nil {
		return nil, fmt.Errorf("read profile %s version %d: %w", name, version, err)
	}
	d, err := kernel.Decode[profileDoc](it)
	if err != nil {
		return nil, err
	}
	return &d.Profile, nil
}

// ListProfiles lists the latest version of each of a product's profiles,
// by name.
func (c *Service) ListProfiles(ctx context.Context, productID string) ([]ProfileSummary, error) {
	return c.queryProfiles(ctx, productID, store.Eq("kind", profileKindLatest))
}

// ProfileVersions lists every version of a product's profile name, oldest
// first; not_found when it has none.
func (c *Service) ProfileVersions(ctx context.Context, productID, name string) ([]ProfileSummary, error) {
	if err := fleet.ValidateName("name", name); err != nil {
		return nil, err
	}
	out, err := c.queryProfiles(ctx, productID, store.Eq("kind", profileKindVersion), store.Eq("name", name))
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fleet.Errorf(fleet.CodeNotFound, "profile %s not found in product %s", name, productID)
	}
	return out, nil
}

// queryProfiles reads every profile document of a product matching where,
// in id order (a single-partition query).
func (c *Service) queryProfiles(ctx context.Context, productID string, where ...store.Cond) ([]ProfileSummary, error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, err
	}
	out := []ProfileSummary{}
	q := store.Query{PartitionKey: productID, Where: where}
	for {
		page, err := c.k.Store.Query(ctx, store.Profiles, q)
		if err != nil {
			return nil, fmt.Errorf("list profiles: %w", err)
		}
		for _, it := range page.Items {
			d, err := kernel.Decode[profileDoc](it)
			if err != nil {
				c.k.Undecodable(ctx, store.Profiles, it, err)
				continue
			}
			out = append(out, summarize(&d.Profile))
		}
		if page.Continuation == "" {
			return out, nil
		}
		q.Continuation = page.Continuation
	}
}

// ApplyPersona snapshots the latest version of the job's persona into j
// (fleet.Job.ApplyProfile). An unknown persona is invalid, naming persona.
func (c *Service) ApplyPersona(ctx context.Context, j *fleet.Job) error {
	if j.Persona == "" {
		return nil
	}
	p, _, err := c.readLatestProfile(ctx, j.ProductID, j.Persona)
	if errors.Is(err, store.ErrNotFound) {
		return fleet.Invalid("persona", "no profile %s in product %s; create it with PUT /api/fleet/profiles/%s", j.Persona, j.ProductID, j.Persona)
	}
	if err != nil {
		return err
	}
	return j.ApplyProfile(p)
}
