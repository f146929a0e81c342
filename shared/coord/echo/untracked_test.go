package echo

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUntracked: the tracker's name is found however many times the
// document was quoted (a job as stored, a change-feed batch, the host's
// twice-quoted batch), and only its absence says untracked.
func TestUntracked(t *testing.T) {
	t.Parallel()
	quote := func(b []byte) []byte {
		q, err := json.Marshal(string(b))
		require.NoError(t, err)
		return q
	}
	tracked := []byte(`[{"id":"a","tracker":{"system":"jira","key":"FLEET-1"}}]`)
	plain := []byte(`[{"id":"a","stage":"queued"}]`)
	for level := range 3 {
		require.False(t, Untracked(tracked), "quoted %d times: %s", level, tracked)
		require.True(t, Untracked(plain), "quoted %d times: %s", level, plain)
		tracked, plain = quote(tracked), quote(plain)
	}
}
