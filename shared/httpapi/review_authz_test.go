package httpapi

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestHugeDollarFiguresAreRefused: budgets add and compare dollars as int64
// millionths, so a figure past that range turned negative there. A holder
// reporting usd 1e13 made its product's reservation, then its spend,
// negative, and the ceiling admitted every job after it. Every dollar
// figure the API takes is bounded by fleet.MaxUSD: past it, 400 naming
// the field, and nothing stored.
func TestHugeDollarFiguresAreRefused(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	held := "/api/fleet/jobs/" + w.held
	huge := fmt.Sprintf("%g", 10*fleet.MaxUSD)
	cases := []struct {
		name, method, path, token, body, field string
		opts                                   []reqOption
	}{
		{"usage", "POST", held + "/usage", w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usd": 1e13}`, w.heldEpoch), "usd", nil},
		{"usage just past the bound", "POST", held + "/usage", w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usd": %s}`, w.heldEpoch, huge), "usd", nil},
		{"PATCH usage", "PATCH", held, w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usage": {"usd": 1e13, "inputTokens": 0, "outputTokens": 0}}`, w.heldEpoch), "usage.usd", nil},
		{"fail usage", "POST", "/api/fleet/fail", w.f1, fmt.Sprintf(`{"jobId": %q, "leaseEpoch": %d, "reason": "x", "retryable": true, "usage": {"usd": 1e13, "inputTokens": 0, "outputTokens": 0}}`, w.held, w.heldEpoch), "usage.usd", nil},
		{"budget ceiling", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 1e300}`, "ceilingUsd", nil},
		{"budget default estimate", "PUT", "/api/fleet/budgets/p1", rootToken, `{"ceilingUsd": 5, "defaultJobUsd": 1e13}`, "defaultJobUsd", nil},
		// Product other has no budget, so only the manifest's own check stands.
		{"manifest budget", "POST", "/api/fleet/jobs", rootToken, manifest("r2", "budget: {usd: 1e13}"), "budget.usd",
			[]reqOption{product("other"), contentType("text/markdown")}},
	}
	before := f.snapshot()
	for _, c := range cases {
		res := f.call(c.method, c.path, c.token, c.body, c.opts...)
		require.Equal(t, 400, res.status, "%s: %s", c.name, res)
		require.Equal(t, c.field, res.errorOf(t).Field, "%s: %s", c.name, res)
	}
	require.Equal(t, before, f.snapshot(), "refused dollar figures changed stored state")
	// The bound itself is a figure like any other.
	f.ok(200, nil, "POST", held+"/usage", w.f1, fmt.Sprintf(`{"leaseEpoch": %d, "usd": %g}`, w.heldEpoch, fleet.MaxUSD))
}
