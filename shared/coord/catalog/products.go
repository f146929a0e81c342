package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// ProductRequest declares a product and the repos it owns.
type ProductRequest struct {
	ID   string
	Name string
	// Repos replaces the product's list.
	Repos []string
	// MoveRepos lets the product take repos another product owns; without
	// it, claiming one is a conflict naming the owner. Only an unscoped
	// operator may set it (the HTTP layer checks).
	MoveRepos bool
	// Tracker changes the product's tracker target; nil keeps it.
	Tracker *TrackerChange
	// Forge changes where the product's deliveries become pull requests;
	// nil keeps it.
	Forge *ForgeChange
	// MaxRunning caps how many of the product's jobs hold a lease at once;
	// 0 is uncapped.
	MaxRunning int
}

// TrackerChange sets or removes a product's tracker target. Setting one
// without a secret keeps the secret already set (a new URL needs no
// re-sent secret); a product without one must be given one.
type TrackerChange struct {
	Remove     bool
	WebhookURL string
	Secret     fleet.Secret
}

// validate checks what can be checked without the stored product.
func (t *TrackerChange) validate() error {
	if t == nil || t.Remove {
		return nil
	}
	if err := fleet.ValidateWebhookURL("tracker.webhookUrl", t.WebhookURL); err != nil {
		return err
	}
	if t.Secret != "" {
		return fleet.ValidateSecret("tracker.secret", t.Secret)
	}
	return nil
}

// ForgeChange sets or removes a product's forge.
type ForgeChange struct {
	Remove bool
	Config fleet.ForgeConfig
}

// apply returns the forge old becomes, for a product owning repos: a kept
// forge must still map only repos the product owns.
func (f *ForgeChange) apply(old *fleet.ForgeConfig, repos []string) (*fleet.ForgeConfig, error) {
	switch {
	case f == nil && old == nil, f != nil && f.Remove:
		return nil, nil
	case f == nil:
		next := *old
		return &next, next.Normalize("forge", repos)
	}
	next := f.Config
	return &next, next.Normalize("forge", repos)
}

// apply returns the tracker target old becomes.
func (t *TrackerChange) apply(old *fleet.TrackerConfig) (*fleet.TrackerConfig, error) {
	switch {
	case t == nil:
		return old, nil
	case t.Remove:
		return nil, nil
	}
	next := &fleet.TrackerConfig{WebhookURL: t.WebhookURL, Secret: t.Secret}
	if next.Secret == "" {
		if old == nil || old.Secret == "" {
			return nil, fleet.Invalid("tracker.secret", "is required: the product has no webhook secret yet (every delivery is signed with it)")
		}
		next.Secret = old.Secret
	}
	return next, nil
}

// PutProduct declares a product and the repos it owns, replacing the list;
// a repo another product owns is a conflict.
func (c *Service) PutProduct(ctx context.Context, productID, name string, repos []string) (*fleet.Product, error) {
	return c.DeclareProduct(ctx, ProductRequest{ID: productID, Name: name, Repos: repos})
}

// DeclareProduct declares a product and the repos it owns, replacing the
// list. A repo has one owning product, recorded in its own document of
// Repos, so two products racing for one repo race on one compare-and-swap:
// exactly one wins. The ownership documents are written before the product
// lists a repo and removed after it stops listing it, so a product's list
// never names a repo it does not own, whatever fails in between; a claim
// that fails undoes the claims it made.
func (c *Service) DeclareProduct(ctx context.Context, req ProductRequest) (*fleet.Product, error) {
	if err := fleet.ValidateName("productId", req.ID); err != nil {
		return nil, err
	}
	if err := fleet.ValidateText("name", req.Name, fleet.MaxNameLen); err != nil {
		return nil, err
	}
	repos, err := fleet.ValidateNames("repos", req.Repos, fleet.MaxRepos)
	if err != nil {
		return nil, err
	}
	if err := req.Tracker.validate(); err != nil {
		return nil, err
	}
	if t := req.Tracker; t != nil && !t.Remove {
		if err := c.targets.CheckTarget(t.WebhookURL); err != nil {
			return nil, err
		}
	}
	if err := fleet.ValidateMaxRunning("maxRunning", req.MaxRunning); err != nil {
		return nil, err
	}
	req.Repos = repos
	for range kernel.MaxCASAttempts {
		p, err := c.declareOnce(ctx, req)
		if errors.Is(err, errProductMoved) {
			continue
		}
		return p, err
	}
	return nil, &kernel.ConflictError{Kind: "product", ID: req.ID, Attempts: kernel.MaxCASAttempts}
}

// errProductMoved: the product document changed under a declaration.
var errProductMoved = errors.New("product changed")

func (c *Service) declareOnce(ctx context.Context, req ProductRequest) (*fleet.Product, error) {
	id, name, repos, move := req.ID, req.Name, req.Repos, req.MoveRepos
	old, oldIt, err := kernel.ReadDoc[fleet.Product](ctx, c.k.Store, store.Products, id, id, "product")
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		return nil, err
	}
	var oldTracker *fleet.TrackerConfig
	if old != nil {
		oldTracker = old.Tracker
	}
	nextTracker, err := req.Tracker.apply(oldTracker)
	if err != nil {
		return nil, err
	}
	var oldForge *fleet.ForgeConfig
	if old != nil {
		oldForge = old.Forge
	}
	nextForge, err := req.Forge.apply(oldForge, repos)
	if err != nil {
		return nil, err
	}
	seats, err := c.seatsFor(ctx, old, req.MaxRunning)
	if err != nil {
		return nil, err
	}
	// Every claim is checked before any is made: a refused declaration
	// changes nothing.
	owners, err := c.repoOwners(ctx, repos)
	if err != nil {
		return nil, err
	}
	if !move {
		for i, r := range repos {
			if o := owners[r]; o != nil && o.ProductID != id {
				return nil, repoOwnedError(i, r, o.ProductID)
			}
		}
	}
	var made []*fleet.RepoOwner // claims to undo if the declaration fails
	undo := func() {
		for _, o := range made {
			_ = c.k.Store.Delete(context.WithoutCancel(ctx), store.Repos, o.ID, o.ID, o.Rev)
		}
	}
	for i, r := range repos {
		o, created, err := c.claimRepo(ctx, i, r, id, owners[r], move)
		if err != nil {
			undo()
			return nil, err
		}
		if created {
			made = append(made, o)
		}
	}

	now := c.k.Now()
	p := &fleet.Product{ID: id, ProductID: id, Name: name, Repos: repos, Tracker: nextTracker, Forge: nextForge, MaxRunning: req.MaxRunning,
		Seats: seats, CreatedAt: now, UpdatedAt: now}
	if old != nil {
		p.CreatedAt = old.CreatedAt
	}
	body, err := json.Marshal(p)
	if err != nil {
		undo()
		return nil, err
	}
	var rev string
	if old == nil {
		rev, err = c.k.Store.Create(ctx, store.Products, id, id, body)
		if errors.Is(err, store.ErrExists) {
			err = errProductMoved
		}
	} else {
		rev, err = c.k.Store.Replace(ctx, store.Products, id, id, body, oldIt.Rev)
		if errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrNotFound) {
			err = errProductMoved
		}
	}
	c.products.drop(id)
	if err != nil {
		if !errors.Is(err, errProductMoved) {
			err = fmt.Errorf("write product %s: %w", id, err)
		}
		undo()
		return nil, err
	}
	p.Rev = rev
	// Only now that the product no longer lists them are the repos it
	// dropped given up, including claims left by a declaration that died
	// before writing the product. The declaration is committed: a failure
	// here only keeps those repos reserved until the next one.
	if err := c.releaseRepos(context.WithoutCancel(ctx), id, repos); err != nil {
		c.k.Log.ErrorContext(ctx, "release dropped repos", "product", id, "err", err)
	}
	if old.Capped() && (!p.Capped() || p.MaxRunning > old.MaxRunning) {
		// More seats: the jobs the cap held flow now.
		c.life.ReleaseHeld(context.WithoutCancel(ctx), id)
	}
	return p, nil
}

// seatsFor is the seats a product declared with cap maxRunning starts
// with: none uncapped; the old ones while it stays capped; and the runs
// going now when it becomes capped, so they count against the new cap.
func (c *Service) seatsFor(ctx context.Context, old *fleet.Product, maxRunning int) (map[string]fleet.Seat, error) {
	switch {
	case maxRunning == 0:
		return nil, nil
	case old.Capped():
		return old.Seats, nil
	case old == nil:
		return map[string]fleet.Seat{}, nil
	}
	return c.life.LeasedSeats(ctx, old.ID)
}

func repoOwnedError(i int, repo, owner string) error {
	return &fleet.Error{Code: fleet.CodeConflict, Field: fmt.Sprintf("repos[%d]", i),
		Message: fmt.Sprintf("repo %s is owned by product %s; only an unscoped operator may move it (moveRepos: true)", repo, owner)}
}

// repoOwners reads the ownership documents of repos (absent: unowned). A
// repo that has none yet but that a product lists (written before owners
// were recorded) is recorded as that product's first, so an older listing
// is never taken over silently.
func (c *Service) repoOwners(ctx context.Context, repos []string) (map[string]*fleet.RepoOwner, error) {
	owners := make(map[string]*fleet.RepoOwner, len(repos))
	var missing []string
	for _, r := range repos {
		o, it, err := kernel.ReadDoc[fleet.RepoOwner](ctx, c.k.Store, store.Repos, r, r, "repo")
		switch {
		case errors.Is(err, fleet.ErrNotFound):
			missing = append(missing, r)
		case err != nil:
			return nil, err
		default:
			o.Rev = it.Rev
			owners[r] = o
		}
	}
	if len(missing) == 0 {
		return owners, nil
	}
	items, err := c.k.QueryAll(ctx, store.Products, store.Query{})
	if err != nil {
		return nil, err
	}
	listedBy := map[string]string{}
	for _, it := range items {
		p, err := kernel.Decode[fleet.Product](it)
		if err != nil {
			return nil, err
		}
		for _, r := range p.Repos {
			if _, taken := listedBy[r]; !taken {
				listedBy[r] = p.ID
			}
		}
	}
	for _, r := range missing {
		owner, ok := listedBy[r]
		if !ok {
			continue
		}
		o, _, err := c.createRepoOwner(ctx, r, owner)
		if err != nil {
			return nil, err
		}
		owners[r] = o
	}
	return owners, nil
}

// createRepoOwner records product as repo's owner unless someone already
// is; it returns the owner either way and whether it created the record.
func (c *Service) createRepoOwner(ctx context.Context, repo, product string) (*fleet.RepoOwner, bool, error) {
	o := &fleet.RepoOwner{ID: repo, ProductID: product, UpdatedAt: c.k.Now()}
	body, err := json.Marshal(o)
	if err != nil {
		return nil, false, err
	}
	rev, err := c.k.Store.Create(ctx, store.Repos, repo, repo, body)
	if errors.Is(err, store.ErrExists) {
		cur, it, err := kernel.ReadDoc[fleet.RepoOwner](ctx, c.k.Store, store.Repos, repo, repo, "repo")
		if err != nil {
			return nil, false, err
		}
		cur.Rev = it.Rev
		return cur, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("record owner of repo %s: %w", repo, err)
	}
	o.Rev = rev
	return o, true, nil
}

// claimRepo makes product the owner of repo (entry i of the request), given
// the owner read before (nil: none). Without move, an owner other than
// product is a conflict, also when it won a race since that read.
func (c *Service) claimRepo(ctx context.Context, i int, repo, product string, seen *fleet.RepoOwner, move bool) (*fleet.RepoOwner, bool, error) {
	for range kernel.MaxCASAttempts {
		if seen == nil {
			o, created, err := c.createRepoOwner(ctx, repo, product)
			if err != nil || created {
				return o, created, err
			}
			seen = o
		}
		if seen.ProductID == product {
			return seen, false, nil
		}
		if !move {
			return nil, false, repoOwnedError(i, repo, seen.ProductID)
		}
		// The old owner stops listing the repo before it loses it, so no
		// product ever lists a repo it does not own.
		if err := c.unlistRepo(ctx, seen.ProductID, repo); err != nil {
			return nil, false, err
		}
		o := &fleet.RepoOwner{ID: repo, ProductID: product, UpdatedAt: c.k.Now()}
		body, err := json.Marshal(o)
		if err != nil {
			return nil, false, err
		}
		rev, err := c.k.Store.Replace(ctx, store.Repos, repo, repo, body, seen.Rev)
		switch {
		case err == nil:
			o.Rev = rev
			return o, false, nil
		case errors.Is(err, store.ErrPrecondition):
		case errors.Is(err, store.ErrNotFound):
			seen = nil
			continue
		default:
			return nil, false, fmt.Errorf("move repo %s: %w", repo, err)
		}
		cur, it, err := kernel.ReadDoc[fleet.RepoOwner](ctx, c.k.Store, store.Repos, repo, repo, "repo")
		switch {
		case errors.Is(err, fleet.ErrNotFound):
			seen = nil
		case err != nil:
			return nil, false, err
		default:
			cur.Rev = it.Rev
			seen = cur
		}
	}
	return nil, false, &kernel.ConflictError{Kind: "repo", ID: repo, Attempts: kernel.MaxCASAttempts}
}

// unlistRepo removes repo from product's list, by compare-and-swap.
func (c *Service) unlistRepo(ctx context.Context, product, repo string) error {
	defer c.products.drop(product)
	_, _, err := kernel.CAS(ctx, c.k, kernel.ProductDocs, product, product, func(p *fleet.Product) error {
		if !slices.Contains(p.Repos, repo) {
			return kernel.ErrNoChange
		}
		p.Repos = slices.DeleteFunc(p.Repos, func(r string) bool { return r == repo })
		p.UpdatedAt = c.k.Now()
		return nil
	})
	if errors.Is(err, fleet.ErrNotFound) {
		return nil
	}
	return err
}

// releaseRepos gives up every repo product owns but no longer lists.
func (c *Service) releaseRepos(ctx context.Context, product string, keep []string) error {
	items, err := c.k.QueryAll(ctx, store.Repos, store.Query{Where: []store.Cond{store.Eq("productId", product)}})
	if err != nil {
		return err
	}
	kept := make(map[string]struct{}, len(keep))
	for _, r := range keep {
		kept[r] = struct{}{}
	}
	for _, it := range items {
		if _, ok := kept[it.ID]; ok {
			continue
		}
		// At the revision read: a repo moved meanwhile is not ours to free.
		err := c.k.Store.Delete(ctx, store.Repos, it.ID, it.ID, it.Rev)
		if err != nil && !errors.Is(err, store.ErrPrecondition) && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("release repo %s: %w", it.ID, err)
		}
	}
	return nil
}

// GetProduct reads a product.
func (c *Service) GetProduct(ctx context.Context, productID string) (*fleet.Product, error) {
	p, it, err := kernel.ReadDoc[fleet.Product](ctx, c.k.Store, store.Products, productID, productID, "product")
	if err != nil {
		return nil, err
	}
	p.Rev = it.Rev
	return p, nil
}

// allProducts reads every product (a cross-partition read: products are
// few, and only a forge webhook naming a repository needs them all, through
// CachedProducts).
func (c *Service) allProducts(ctx context.Context) ([]*fleet.Product, error) {
	items, err := c.k.QueryAll(ctx, store.Products, store.Query{})
	if err != nil {
		return nil, err
	}
	out := make([]*fleet.Product, 0, len(items))
	for _, it := range items {
		p, err := kernel.Decode[fleet.Product](it)
		if err != nil {
			c.k.Undecodable(ctx, store.Products, it, err)
			continue
		}
		p.Rev = it.Rev
		out = append(out, p)
	}
	return out, nil
}

// RepoInfo is one repo known to the fleet.
type RepoInfo = view.RepoInfo

// Repos lists the repos the products in scope own, with their owners and
// the factories the scope sees that have them checked out; with productID
// set, that product's repos only. An unscoped reader without a product also
// sees repos only factories have.
func (c *Service) Repos(ctx context.Context, scope Scope, productID string) ([]RepoInfo, error) {
	var items []store.Item
	switch {
	case productID != "":
		if !scope.Allows(productID) {
			return []RepoInfo{}, nil
		}
		page, err := c.k.QueryAll(ctx, store.Products, store.Query{PartitionKey: productID})
		if err != nil {
			return nil, err
		}
		items = page
	case len(scope) > 0:
		for _, p := range scope {
			page, err := c.k.QueryAll(ctx, store.Products, store.Query{PartitionKey: p})
			if err != nil {
				return nil, err
			}
			items = append(items, page...)
		}
	default:
		all, err := c.k.QueryAll(ctx, store.Products, store.Query{})
		if err != nil {
			return nil, err
		}
		items = all
	}
	byRepo := map[string]*RepoInfo{}
	get := func(r string) *RepoInfo {
		if byRepo[r] == nil {
			byRepo[r] = &RepoInfo{Repo: r, Products: []string{}, Factories: []string{}}
		}
		return byRepo[r]
	}
	for _, it := range items {
		p, err := kernel.Decode[fleet.Product](it)
		if err != nil {
			c.k.Undecodable(ctx, store.Products, it, err)
			continue
		}
		for _, r := range p.Repos {
			get(r).Products = append(get(r).Products, p.ID)
		}
	}
	factories, err := c.Factories(ctx)
	if err != nil {
		return nil, err
	}
	allRepos := productID == "" && len(scope) == 0
	for _, f := range scope.Visible(factories) {
		for _, r := range f.Repos {
			if !allRepos && byRepo[r] == nil {
				continue
			}
			get(r).Factories = append(get(r).Factories, f.ID)
		}
	}
	out := make([]RepoInfo, 0, len(byRepo))
	for _, ri := range byRepo {
		slices.Sort(ri.Products)
		slices.Sort(ri.Factories)
		out = append(out, *ri)
	}
	slices.SortFunc(out, func(a, b RepoInfo) int { return strings.Compare(a.Repo, b.Repo) })
	return out, nil
}

// BumpQueueState advances the product's queue version: pollers compare it to
// skip claims while nothing claimable appeared. Only entering `queued` bumps
// it, because only that can give a poller new work. Failure is logged: the
// version is a hint, and the next change bumps it again.
func (c *Service) BumpQueueState(ctx context.Context, productID string) {
	for range 3 {
		_, err := c.k.Store.Increment(ctx, store.QueueStates, productID, productID, "version", 1)
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrNotFound) {
			c.k.Log.ErrorContext(ctx, "bump queue state", "product", productID, "err", err)
			return
		}
		qs := fleet.QueueState{ID: productID, ProductID: productID, Version: 1}
		body, err := json.Marshal(qs)
		if err != nil {
			c.k.Log.ErrorContext(ctx, "encode queue state", "product", productID, "err", err)
			return
		}
		if _, err = c.k.Store.Create(ctx, store.QueueStates, productID, productID, body); err == nil {
			return
		}
		if !errors.Is(err, store.ErrExists) {
			c.k.Log.ErrorContext(ctx, "create queue state", "product", productID, "err", err)
			return
		}
	}
}

// QueueState returns the product's queue version (0 before any job).
func (c *Service) QueueState(ctx context.Context, productID string) (fleet.QueueState, error) {
	it, err := c.k.Store.Read(ctx, store.QueueStates, productID, productID)
	if errors.Is(err, store.ErrNotFound) {
		return fleet.QueueState{ID: productID, ProductID: productID}, nil
	}
	if err != nil {
		return fleet.QueueState{}, fmt.Errorf("read queue state %s: %w", productID, err)
	}
	qs, err := kernel.Decode[fleet.QueueState](it)
	if err != nil {
		return fleet.QueueState{}, err
	}
	return *qs, nil
}

// queueStateOnQueued observes transitions: a job back in the queue moves
// its product's queue state, which wakes pollers and the dispatcher.
func (c *Service) queueStateOnQueued(ctx context.Context, t kernel.Transition) {
	if t.After.Stage == fleet.StageQueued {
		c.BumpQueueState(ctx, t.After.ProductID)
	}
}
