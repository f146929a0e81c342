package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/stretchr/testify/require"
)

// casTemplate is a shipped job as the API serves it, cut down.
const casTemplate = `{"id":"j1","productId":"p","stage":"shipped","priority":2,"task":"t","repo":"r","epoch":3}`

// TestWriteBodies: each of a lifecycle's raw writes carries its stage, and
// a lease exactly while the job holds one; the id is body's to add.
func TestWriteBodies(t *testing.T) {
	t.Parallel()
	rests, err := writeBodies([]byte(casTemplate))
	require.NoError(t, err)
	require.Len(t, rests, len(lifecycleWrites))
	leased := 0
	for i, w := range lifecycleWrites {
		var doc struct {
			ID             string      `json:"id"`
			ProductID      string      `json:"productId"`
			Stage          fleet.Stage `json:"stage"`
			Holder         string      `json:"holderFactoryId"`
			LeaseExpiresAt time.Time   `json:"leaseExpiresAt"`
			Epoch          int         `json:"epoch"`
		}
		require.NoError(t, json.Unmarshal(body(7, "jx", rests[i]), &doc), "write %d", i)
		require.Equal(t, "jx", doc.ID)
		require.Equal(t, casProduct, doc.ProductID)
		require.Equal(t, w.stage, doc.Stage, "write %d", i)
		require.Equal(t, w.leased, !doc.LeaseExpiresAt.IsZero(), "write %d: lease", i)
		require.Equal(t, w.leased, doc.Holder != "", "write %d: holder", i)
		require.Equal(t, 3, doc.Epoch, "the template's other fields are kept")
		if w.leased {
			leased++
		}
	}
	require.Equal(t, fleet.StageShipped, lifecycleWrites[len(lifecycleWrites)-1].stage)
	require.Positive(t, leased)
}

// TestRunCAS: phase 5 writes whole lifecycles (a create and the stage
// writes, five per lifecycle), then same-document writes, and times both.
func TestRunCAS(t *testing.T) {
	t.Parallel()
	res, err := runCAS(t.Context(), t.TempDir(), []byte(casTemplate), 200*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, res.Lifecycles)
	// A lifecycle cut short by the end of the run counts the writes it made.
	n := int64(len(lifecycleWrites))
	require.GreaterOrEqual(t, res.Writes, n*res.Lifecycles)
	require.Less(t, res.Writes, n*(res.Lifecycles+casWriters))
	require.Positive(t, res.PerSec)
	require.Positive(t, res.SameDocument.Writes)
	require.Positive(t, res.SameDocument.PerSec)
	require.Equal(t, casDocs, res.Docs)
}
