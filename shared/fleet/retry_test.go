package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRetryStage: the one retry-or-dead-letter rule Fail and Reap share.
func TestRetryStage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempts, max int
		want          Stage
	}{
		{0, 3, StageQueued},
		{1, 3, StageQueued},
		{2, 3, StageDeadLetter},
		{0, 1, StageDeadLetter},
		{5, 3, StageDeadLetter},
	}
	for _, tt := range tests {
		j := &Job{Attempts: tt.attempts, MaxAttempts: tt.max}
		require.Equal(t, tt.want, j.RetryStage(), "attempts %d of %d", tt.attempts, tt.max)
	}
}
