package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/protocol"
)

// TestClaimRetryIsIdempotent: a claim retried with the same request id
// (body requestId or Idempotency-Key header) answers the same lease
// instead of taking another job; a different id is a new claim; a body
// and header that disagree are 400.
func TestClaimRetryIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"body", "header"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.putProduct("p1", "r1")
			tok := f.enroll("f1", []string{"p1"}, "r1")
			j1 := f.submit("p1", manifest("r1", "priority: high"))
			j2 := f.submit("p1", manifest("r1"))
			claim := func(id string) (protocol.Claimed, int) {
				var body any
				var opts []reqOption
				if how == "body" {
					body = map[string]any{"requestId": id}
				} else {
					opts = append(opts, header("Idempotency-Key", id))
				}
				var c protocol.Claimed
				res := f.call("POST", "/api/fleet/claim", tok, body, opts...)
				if res.status == http.StatusOK {
					require.NoError(t, json.Unmarshal(res.body, &c))
				}
				return c, res.status
			}
			first, status := claim("req-1")
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, j1.ID, first.Job.ID)
			again, status := claim("req-1")
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, first.Job.ID, again.Job.ID)
			require.Equal(t, first.LeaseEpoch, again.LeaseEpoch)
			next, status := claim("req-2")
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, j2.ID, next.Job.ID)
		})
	}
	t.Run("body and header disagree", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.putProduct("p1", "r1")
		tok := f.enroll("f1", []string{"p1"}, "r1")
		f.submit("p1", manifest("r1"))
		before := f.snapshot()
		res := f.call("POST", "/api/fleet/claim", tok, map[string]any{"requestId": "a-1"}, header("Idempotency-Key", "b-2"))
		require.Equal(t, http.StatusBadRequest, res.status, "%s", res)
		require.Equal(t, "requestId", res.errorOf(t).Field)
		require.Equal(t, before, f.snapshot())
	})
}
