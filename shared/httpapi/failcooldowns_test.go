package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestFailCooldownsOnlyWhenAccepted: a /fail the fence or the job lookup
// refuses writes none of the cooldowns it carries (DESIGN: a stale epoch
// changes nothing); the same report from the holder records them.
func TestFailCooldownsOnlyWhenAccepted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		jobID    func(held string) string
		epoch    func(held int64) int64
		status   int
		wantCode fleet.Code
	}{
		{"stale epoch", func(id string) string { return id }, func(e int64) int64 { return e + 7 }, http.StatusConflict, fleet.CodeFenced},
		{"unknown job", func(string) string { return "no-such-job" }, func(e int64) int64 { return e }, http.StatusNotFound, fleet.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			j, tok, c := f.heldJob()
			until := f.clock.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
			fail := func(jobID string, epoch int64) result {
				return f.call("POST", "/api/fleet/fail", tok, map[string]any{
					"jobId": jobID, "leaseEpoch": epoch, "reason": "rate_limited: 429", "retryable": true,
					"kind": "rate_limited", "cooldowns": map[string]string{"engine:claude": until.Format(time.RFC3339)},
				})
			}
			before := f.snapshot()
			res := fail(tt.jobID(j.ID), tt.epoch(c.LeaseEpoch))
			require.Equal(t, tt.status, res.status, res)
			require.Equal(t, tt.wantCode, res.errorOf(t).Code)
			require.Equal(t, before, f.snapshot(), "a refused fail changed stored state")

			// The control: the holder's own report records the cooldown.
			res = fail(j.ID, c.LeaseEpoch)
			require.Equal(t, http.StatusOK, res.status, res)
			fac, err := f.coord.GetFactory(context.Background(), "f1")
			require.NoError(t, err)
			require.Equal(t, map[string]time.Time{"engine:claude": until}, fac.Cooldowns)
		})
	}
}
