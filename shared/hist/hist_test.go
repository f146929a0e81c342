package hist_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/hist"
)

// TestHistPercentiles: the histogram reports the nearest-rank p50 and p99
// as the upper bound of their bucket, never below the true value and at
// most 19% above it; the tail is not averaged away.
func TestHistPercentiles(t *testing.T) {
	t.Parallel()
	type batch struct {
		n int
		d time.Duration
	}
	for _, tt := range []struct {
		name     string
		samples  []batch
		p50, p99 time.Duration // true values
	}{
		{"empty", nil, 0, 0},
		{"one sample", []batch{{1, 3 * time.Millisecond}}, 3 * time.Millisecond, 3 * time.Millisecond},
		{"a tail of 2 in 100", []batch{{98, 200 * time.Microsecond}, {2, 60 * time.Millisecond}}, 200 * time.Microsecond, 60 * time.Millisecond},
		{"a tail of 1 in 100 is not p99", []batch{{99, 200 * time.Microsecond}, {1, 60 * time.Millisecond}}, 200 * time.Microsecond, 200 * time.Microsecond},
		{"below the first bucket", []batch{{10, time.Microsecond}}, 10 * time.Microsecond, 10 * time.Microsecond},
		{"negative counts as zero", []batch{{10, -time.Second}}, 10 * time.Microsecond, 10 * time.Microsecond},
		{"past the last bucket", []batch{{1, time.Hour}}, 282 * time.Second, 282 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h hist.Hist
			n := 0
			for _, b := range tt.samples {
				for range b.n {
					h.Observe(b.d)
				}
				n += b.n
			}
			s := h.Summary()
			require.Equal(t, int64(n), s.N)
			for _, got := range []struct{ got, want time.Duration }{{s.P50, tt.p50}, {s.P99, tt.p99}} {
				require.GreaterOrEqual(t, got.got, got.want)
				require.LessOrEqual(t, float64(got.got), 1.19*float64(got.want)+1)
			}
		})
	}
}
