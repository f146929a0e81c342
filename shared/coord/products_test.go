package coord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestRepoOwnership: a repo has one owning product. Claiming a repo another
// product owns is a conflict naming the owner and changes nothing; moving
// it takes an explicit move, after which the old owner no longer lists it
// and can no longer submit jobs for it; a repo a product drops is free.
func TestRepoOwnership(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // p1 owns notes and api
	before := e.snapshotContainers(store.Products, store.Repos)

	_, err := e.c.PutProduct(e.ctx, "p2", "", []string{"docs", repo})
	requireCode(t, err, fleet.CodeConflict, "repos[1]")
	require.Contains(t, err.Error(), "p1")
	require.Equal(t, before, e.snapshotContainers(store.Products, store.Repos), "a refused claim changed something")
	_, _, err = e.c.Submit(e.ctx, "p2", manifest())
	requireCode(t, err, fleet.CodeRepoNotOwned, "repo")

	p2, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p2", Repos: []string{"docs", repo}, MoveRepos: true})
	require.NoError(t, err)
	require.Equal(t, []string{"docs", repo}, p2.Repos)
	p1, err := e.c.GetProduct(e.ctx, prod)
	require.NoError(t, err)
	require.Equal(t, []string{"api"}, p1.Repos, "the old owner still lists the moved repo")
	_, _, err = e.c.Submit(e.ctx, prod, manifest())
	requireCode(t, err, fleet.CodeRepoNotOwned, "repo")
	_, created, err := e.c.Submit(e.ctx, "p2", manifest())
	require.NoError(t, err)
	require.True(t, created)

	// p1 drops api: p3 may take it without a move.
	_, err = e.c.PutProduct(e.ctx, prod, "", []string{})
	require.NoError(t, err)
	_, err = e.c.PutProduct(e.ctx, "p3", "", []string{"api"})
	require.NoError(t, err)
	// Declaring again what one owns is no claim.
	_, err = e.c.PutProduct(e.ctx, "p3", "renamed", []string{"api"})
	require.NoError(t, err)

	rs, err := e.c.Repos(e.ctx, nil, "")
	require.NoError(t, err)
	owners := map[string][]string{}
	for _, r := range rs {
		owners[r.Repo] = r.Products
	}
	require.Equal(t, map[string][]string{"api": {"p3"}, "docs": {"p2"}, repo: {"p2"}}, owners)
}

// TestRepoClaimRace: products racing for one repo through two coordinators
// (two processes on one store): exactly one wins, every other gets a
// conflict naming the winner, and only the winner lists the repo.
func TestRepoClaimRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	coords := []*coord.Coordinator{e.c, e.peer()}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			// Each also claims a repo of its own first: a loser's claims
			// are undone.
			_, errs[i] = coords[i%2].PutProduct(e.ctx, fmt.Sprintf("q%d", i), "", []string{fmt.Sprintf("own%d", i), "contested"})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "q%d and q%d both own the repo", winner, i)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "nobody won: %v", errs)
	for i, err := range errs {
		if i != winner {
			requireCode(t, err, fleet.CodeConflict, "repos[1]")
			require.Contains(t, err.Error(), fmt.Sprintf("q%d", winner))
		}
	}
	for i := range n {
		p, err := e.c.GetProduct(e.ctx, fmt.Sprintf("q%d", i))
		if i == winner {
			require.NoError(t, err)
			require.Equal(t, []string{fmt.Sprintf("own%d", i), "contested"}, p.Repos)
			continue
		}
		require.ErrorIs(t, err, fleet.ErrNotFound, "a loser's product was written")
	}
	owned := map[string]string{}
	for _, doc := range e.snapshotContainers(store.Repos) {
		var o fleet.RepoOwner
		require.NoError(t, json.Unmarshal([]byte(doc[strings.Index(doc, " ")+1:]), &o))
		owned[o.ID] = o.ProductID
	}
	w := fmt.Sprintf("q%d", winner)
	require.Equal(t, map[string]string{repo: prod, "api": prod, "own" + w[1:]: w, "contested": w}, owned, "a loser's claim was left behind")
}

// TestRepoClaimUndoneWhenRaceLost: a declaration that passed the ownership
// check but then loses a repo to a racing product undoes the claims it made,
// so the refused request leaves nothing behind.
func TestRepoClaimUndoneWhenRaceLost(t *testing.T) {
	t.Parallel()
	racer := &racingClaim{}
	e := newEnv(t, withStore(func(s store.Store) store.Store { racer.Store = s; return racer }))
	other := e.peer()
	racer.race = func() {
		_, err := other.PutProduct(e.ctx, "q", "", []string{"contested"})
		require.NoError(t, err)
	}
	_, err := e.c.PutProduct(e.ctx, "p2", "", []string{"docs", "contested"})
	requireCode(t, err, fleet.CodeConflict, "repos[1]")
	require.Contains(t, err.Error(), "product q")
	_, err = e.c.GetProduct(e.ctx, "p2")
	require.ErrorIs(t, err, fleet.ErrNotFound)
	_, err = e.raw.Read(e.ctx, store.Repos, "docs", "docs")
	require.ErrorIs(t, err, store.ErrNotFound, "the lost race left the claim of docs behind")
}

// racingClaim lets race claim repo contested first, right before the
// coordinator's own attempt to create its owner, once.
type racingClaim struct {
	store.Store
	once sync.Once
	race func()
}

func (s *racingClaim) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Repos && id == "contested" && s.race != nil {
		s.once.Do(s.race)
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

// TestProductForge: a product's forge is set with its defaults filled in,
// kept when a declaration leaves it out, removed by a null (Remove), and
// refused, naming the field and changing nothing, when it maps a repo the
// product does not own or names an unknown merge method, or lists a
// required check that is blank, repeated, not one line, too long, or one
// too many.
func TestProductForge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	set := &catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}}}
	p, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo}, Forge: set})
	require.NoError(t, err)
	require.Equal(t, &fleet.ForgeConfig{Kind: fleet.ForgeGitHub, Repos: map[string]string{repo: "acme/notes"},
		MergeMethod: fleet.MergeSquash, MaxIterations: fleet.DefaultMaxIterations}, p.Forge)

	p, err = e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo}, Name: "renamed"})
	require.NoError(t, err)
	require.NotNil(t, p.Forge, "a declaration without forge keeps it")

	// The checks autoMerge waits for are kept trimmed, in order; up to the
	// bound is fine.
	p, err = e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo}, Forge: &catalog.ForgeChange{
		Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, RequiredChecks: []string{" ci/jenkins", "build (linux) "}}}})
	require.NoError(t, err)
	require.Equal(t, []string{"ci/jenkins", "build (linux)"}, p.Forge.RequiredChecks)
	_, err = e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo}, Forge: &catalog.ForgeChange{
		Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, RequiredChecks: manyChecks(fleet.MaxRequiredChecks)}}})
	require.NoError(t, err)

	for _, tc := range []struct {
		change *catalog.ForgeChange
		repos  []string
		field  string
	}{
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{"other": "acme/other"}}}, []string{repo}, "forge.repos.other"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "not a repo"}}}, []string{repo}, "forge.repos." + repo},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, MergeMethod: "fast-forward"}}, []string{repo}, "forge.mergeMethod"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, MaxIterations: 99}}, []string{repo}, "forge.maxIterations"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, BaseBranch: "../main"}}, []string{repo}, "forge.baseBranch"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, Reviewers: map[string]string{"Alice": "alice", "alice": "al"}}}, []string{repo}, "forge.reviewers.alice"},
		{nil, []string{"docs"}, "forge.repos." + repo}, // the kept forge maps a repo given up
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, RequiredChecks: []string{"ci", "  "}}}, []string{repo}, "forge.requiredChecks[1]"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, RequiredChecks: []string{"ci", "lint", " ci "}}}, []string{repo}, "forge.requiredChecks[2]"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, RequiredChecks: []string{"ci\nlint"}}}, []string{repo}, "forge.requiredChecks[0]"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, RequiredChecks: []string{strings.Repeat("c", fleet.MaxCheckNameLen+1)}}}, []string{repo}, "forge.requiredChecks[0]"},
		{&catalog.ForgeChange{Config: fleet.ForgeConfig{Repos: map[string]string{repo: "acme/notes"}, RequiredChecks: manyChecks(fleet.MaxRequiredChecks + 1)}}, []string{repo}, "forge.requiredChecks"},
	} {
		_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: tc.repos, Forge: tc.change})
		var fe *fleet.Error
		require.ErrorAs(t, err, &fe)
		require.Equal(t, fleet.CodeInvalid, fe.Code)
		require.Equal(t, tc.field, fe.Field)
	}
	got, err := e.c.GetProduct(e.ctx, prod)
	require.NoError(t, err)
	require.Equal(t, "acme/notes", got.Forge.Repos[repo], "a refused declaration changed nothing")
	require.Equal(t, []string{repo}, got.Repos)

	p, err = e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: prod, Repos: []string{repo}, Forge: &catalog.ForgeChange{Remove: true}})
	require.NoError(t, err)
	require.Nil(t, p.Forge)
}

// manyChecks is n distinct check names.
func manyChecks(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("check-%d", i)
	}
	return out
}
