package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/sqlite"
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
// writes, five per lifecycle), then same-document writes, and times both;
// every writer runs at least one cycle whatever the machine's load, and
// every lifecycle's job ends shipped.
func TestRunCAS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, err := runCAS(t.Context(), dir, []byte(casTemplate), 200*time.Millisecond)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Cycles, int64(casWriters))
	require.Equal(t, int64(len(lifecycleWrites))*res.Cycles, res.Writes)
	require.Positive(t, res.PerSec)
	require.GreaterOrEqual(t, res.SameDocument.Cycles, int64(casWriters))
	require.Equal(t, res.SameDocument.Cycles, res.SameDocument.Writes)
	require.Positive(t, res.SameDocument.PerSec)
	require.Equal(t, casDocs, res.Docs)

	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "cas.db"))
	require.NoError(t, err)
	defer st.Close()
	for i := int64(1); i <= res.Cycles; i++ {
		it, err := st.Read(t.Context(), store.Jobs, casProduct, fmt.Sprintf("jlife%08d", i))
		require.NoError(t, err)
		var j struct {
			Stage fleet.Stage `json:"stage"`
		}
		require.NoError(t, json.Unmarshal(it.Body, &j))
		require.Equal(t, fleet.StageShipped, j.Stage, "lifecycle %d", i)
	}
	_, err = st.Read(t.Context(), store.Jobs, casProduct, fmt.Sprintf("jlife%08d", res.Cycles+1))
	require.ErrorIs(t, err, store.ErrNotFound, "no lifecycle begun and not counted")
}

// TestCASReportsTheIdleStack: phase 5 runs beside the idle stack, so the
// report says what the stack took meanwhile, or nothing where the OS does
// not tell.
func TestCASReportsTheIdleStack(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		window *cpuUse
		want   string
	}{
		"measured":     {&cpuUse{WallSeconds: 6, HandlerSeconds: 0.03, LocalSeconds: 0.042}, "30 + 42 ms in 6.0 s = 1.2% of one CPU"},
		"not measured": {nil, ""},
	} {
		r := &results{Machine: machineInfo{CPUs: 2}, CAS: &casResult{casRun: casRun{Writes: 6000, PerSec: 6000}, Window: tc.window}}
		r.evaluate()
		var out bytes.Buffer
		r.print(&out)
		if tc.want == "" {
			require.NotContains(t, out.String(), "idle stack", name)
			continue
		}
		require.Contains(t, out.String(), tc.want, name)
	}
}
