package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/fleet"
)

// PutProduct declares a product and the repos it owns, replacing the list.
func (c *Coordinator) PutProduct(ctx context.Context, productID, name string, repos []string) (*fleet.Product, error) {
	if err := fleet.ValidateName("productId", productID); err != nil {
		return nil, err
	}
	if err := fleet.ValidateText("name", name, fleet.MaxNameLen); err != nil {
		return nil, err
	}
	clean, err := fleet.ValidateNames("repos", repos, fleet.MaxRepos)
	if err != nil {
		return nil, err
	}
	now := c.now()
	p := &fleet.Product{ID: productID, ProductID: productID, Name: name, Repos: clean, CreatedAt: now, UpdatedAt: now}
	if old, err := c.GetProduct(ctx, productID); err == nil {
		p.CreatedAt = old.CreatedAt
	} else if !errors.Is(err, fleet.ErrNotFound) {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	rev, err := c.store.Upsert(ctx, Products, productID, productID, body)
	c.products.drop(productID)
	if err != nil {
		return nil, fmt.Errorf("write product %s: %w", productID, err)
	}
	p.Rev = rev
	return p, nil
}

// GetProduct reads a product.
func (c *Coordinator) GetProduct(ctx context.Context, productID string) (*fleet.Product, error) {
	p, it, err := readDoc[fleet.Product](ctx, c.store, Products, productID, productID, "product")
	if err != nil {
		return nil, err
	}
	p.Rev = it.Rev
	return p, nil
}

// RepoInfo is one repo known to the fleet.
type RepoInfo struct {
	Repo      string   `json:"repo"`
	Products  []string `json:"products"`  // products that own it
	Factories []string `json:"factories"` // factories that have it checked out
}

// Repos lists the repos the products in scope own, with their owners and
// the factories the scope sees that have them checked out; with productID
// set, that product's repos only. An unscoped reader without a product also
// sees repos only factories have.
func (c *Coordinator) Repos(ctx context.Context, scope Scope, productID string) ([]RepoInfo, error) {
	var items []Item
	switch {
	case productID != "":
		if !scope.Allows(productID) {
			return []RepoInfo{}, nil
		}
		page, err := c.queryAll(ctx, Products, Query{PartitionKey: productID})
		if err != nil {
			return nil, err
		}
		items = page
	case len(scope) > 0:
		for _, p := range scope {
			page, err := c.queryAll(ctx, Products, Query{PartitionKey: p})
			if err != nil {
				return nil, err
			}
			items = append(items, page...)
		}
	default:
		all, err := c.queryAll(ctx, Products, Query{})
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
		p, err := decode[fleet.Product](it)
		if err != nil {
			return nil, err
		}
		for _, r := range p.Repos {
			get(r).Products = append(get(r).Products, p.ID)
		}
	}
	factories, err := c.listFactories(ctx)
	if err != nil {
		return nil, err
	}
	allRepos := productID == "" && len(scope) == 0
	for _, f := range scope.visible(factories) {
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

// bumpQueueState advances the product's queue version: pollers compare it to
// skip claims while nothing claimable appeared. Only entering `queued` bumps
// it, because only that can give a poller new work. Failure is logged: the
// version is a hint, and the next change bumps it again.
func (c *Coordinator) bumpQueueState(ctx context.Context, productID string) {
	for range 3 {
		_, err := c.store.Increment(ctx, QueueStates, productID, productID, "version", 1)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrNotFound) {
			c.log.ErrorContext(ctx, "bump queue state", "product", productID, "err", err)
			return
		}
		qs := fleet.QueueState{ID: productID, ProductID: productID, Version: 1}
		body, _ := json.Marshal(qs)
		if _, err = c.store.Create(ctx, QueueStates, productID, productID, body); err == nil {
			return
		}
		if !errors.Is(err, ErrExists) {
			c.log.ErrorContext(ctx, "create queue state", "product", productID, "err", err)
			return
		}
	}
}

// QueueState returns the product's queue version (0 before any job).
func (c *Coordinator) QueueState(ctx context.Context, productID string) (fleet.QueueState, error) {
	it, err := c.store.Read(ctx, QueueStates, productID, productID)
	if errors.Is(err, ErrNotFound) {
		return fleet.QueueState{ID: productID, ProductID: productID}, nil
	}
	if err != nil {
		return fleet.QueueState{}, fmt.Errorf("read queue state %s: %w", productID, err)
	}
	qs, err := decode[fleet.QueueState](it)
	if err != nil {
		return fleet.QueueState{}, err
	}
	return *qs, nil
}
