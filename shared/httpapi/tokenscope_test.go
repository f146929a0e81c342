package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestClaimUsesTokenScope: a poll claim draws only from the products the
// presented token is scoped to, whatever the factory document says (here
// widened to every product behind the API's back).
func TestClaimUsesTokenScope(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("p2", "r2")
	tok := f.enroll("f1", []string{"p1"}, "r1", "r2")

	ctx := context.Background()
	it, err := f.store.Read(ctx, store.Factories, "f1", "f1")
	require.NoError(t, err)
	var doc fleet.Factory
	require.NoError(t, json.Unmarshal(it.Body, &doc))
	doc.Products = []string{}
	body, err := json.Marshal(&doc)
	require.NoError(t, err)
	_, err = f.store.Replace(ctx, store.Factories, "f1", "f1", body, it.Rev)
	require.NoError(t, err)

	f.submit("p2", manifest("r2"))
	res := f.call("POST", "/api/fleet/claim", tok, nil)
	require.Equal(t, http.StatusNoContent, res.status, "a job of p2 for a token scoped to p1: %s", res)
	mine := f.submit("p1", manifest("r1"))
	require.Equal(t, mine.ID, f.claim(tok).Job.ID)
}
