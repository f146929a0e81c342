package fleetapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClaimRetriesWithSameRequestID: a claim whose answer is lost (the
// connection drops after the server took it) is retried with the same
// requestId, so the coordinator answers the lease it already gave; the
// next claim uses a new id.
func TestClaimRetriesWithSameRequestID(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		ids []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			RequestID string `json:"requestId"`
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		mu.Lock()
		ids = append(ids, body.RequestID)
		n := len(ids)
		mu.Unlock()
		if n == 1 {
			// The claim happened; its answer never arrives.
			conn, _, err := http.NewResponseController(w).Hijack()
			require.NoError(t, err)
			_ = conn.Close()
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"job": map[string]any{"id": "j1"}, "leaseEpoch": 1, "leaseExpiresAt": "2030-01-01T00:00:00Z"})
	}))
	defer srv.Close()
	c := New(srv.URL, "tok", "")
	c.Backoff = time.Millisecond

	cl, err := c.Claim(context.Background())
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, "j1", cl.Job.ID)
	_, err = c.Claim(context.Background())
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ids, 3)
	require.NotEmpty(t, ids[0])
	require.Equal(t, ids[0], ids[1], "the retry carries the same request id")
	require.NotEqual(t, ids[1], ids[2], "a new claim has a new id")
}
