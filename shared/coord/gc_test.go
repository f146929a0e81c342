package coord_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/protocol"
)

// TestGCPlanKeyedByProductAndRepo: GC groups terminal jobs by product and
// repo, and a factory is sent only the jobs of products it serves: a repo
// name says nothing about which product's git state it is, and a job id of
// another product is not a factory's to see or to clean up.
func TestGCPlanKeyedByProductAndRepo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// p2 owned "shared" when it submitted its job, then gave it to p1.
	_, err := e.c.PutProduct(e.ctx, "p2", "", []string{"shared"})
	require.NoError(t, err)
	j2, _, err := e.c.Submit(e.ctx, "p2", manifest("repo: shared"))
	require.NoError(t, err)
	_, err = e.c.Act(e.ctx, "op", "p2", j2.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	_, err = e.c.PutProduct(e.ctx, "p2", "", []string{})
	require.NoError(t, err)
	_, err = e.c.PutProduct(e.ctx, prod, "", []string{repo, "api", "shared"})
	require.NoError(t, err)
	j1 := e.submit("repo: shared")
	_, err = e.c.Act(e.ctx, "op", prod, j1.ID, coord.ActionCancel, "")
	require.NoError(t, err)

	e.factory("f1", products(prod), repos("shared"))
	e.factory("f2", products("p2"), repos("shared"))
	e.factory("fall", repos("shared"))

	plan, err := e.c.GCPlan(e.ctx)
	require.NoError(t, err)
	require.Equal(t, []protocol.GCRequest{
		{FactoryID: "f1", Repos: map[string][]string{"shared": {j1.ID}}},
		{FactoryID: "f2", Repos: map[string][]string{"shared": {j2.ID}}},
		{FactoryID: "fall", Repos: map[string][]string{"shared": sorted(j1.ID, j2.ID)}},
	}, plan)
}

func sorted(ids ...string) []string { return slices.Sorted(slices.Values(ids)) }
