// Package hist is a fixed-bucket latency histogram: lock-free, 800 bytes,
// percentiles within 19%. The coordinator times its dispatch stages with
// it, the host emulator its change-feed batches.
package hist

import (
	"math"
	"sync/atomic"
	"time"
)

// Hist is a fixed-bucket histogram of durations, safe for concurrent use
// and lock-free: four buckets per doubling from histMin up, so a
// percentile it reports is the upper bound of the bucket the sample falls
// in, at most 19% above the true value. A mean (Observe's sums) hides the
// tail a latency target is about; a histogram this size costs 800 bytes
// and one atomic add per sample.
type Hist struct {
	buckets [histBuckets]atomic.Int64
}

const (
	histMin     = 10 * time.Microsecond
	histPerOct  = 4
	histBuckets = 100 // up to histMin × 2^24.75 ≈ 282 s; anything longer lands in the last
)

// bucketOf is the index of the first bucket whose upper bound is >= d.
func bucketOf(d time.Duration) int {
	if d <= histMin {
		return 0
	}
	i := int(math.Ceil(histPerOct * math.Log2(float64(d)/float64(histMin))))
	return min(i, histBuckets-1)
}

// bucketBound is bucket i's upper bound.
func bucketBound(i int) time.Duration {
	return time.Duration(float64(histMin) * math.Exp2(float64(i)/histPerOct))
}

// Observe adds one sample; a negative one (a clock stepping back) counts
// as zero.
func (h *Hist) Observe(d time.Duration) {
	h.buckets[bucketOf(max(d, 0))].Add(1)
}

// Summary is a histogram's sample count and percentiles.
type Summary struct {
	N        int64
	P50, P99 time.Duration
}

// Summary reads the count and the nearest-rank p50 and p99. Samples added
// while it reads may or may not count.
func (h *Hist) Summary() Summary {
	var counts [histBuckets]int64
	var n int64
	for i := range counts {
		counts[i] = h.buckets[i].Load()
		n += counts[i]
	}
	s := Summary{N: n}
	if n == 0 {
		return s
	}
	s.P50, s.P99 = rank(counts[:], n, 50), rank(counts[:], n, 99)
	return s
}

// rank is the upper bound of the bucket holding the nearest-rank p-th
// percentile of n samples.
func rank(counts []int64, n int64, p float64) time.Duration {
	want := max(int64(math.Ceil(p/100*float64(n))), 1)
	var seen int64
	for i, c := range counts {
		if seen += c; seen >= want {
			return bucketBound(i)
		}
	}
	return bucketBound(len(counts) - 1)
}

// P50Ms is the p50 in milliseconds, to the microsecond.
func (s Summary) P50Ms() float64 { return ms(s.P50) }

// P99Ms is the p99 in milliseconds, to the microsecond.
func (s Summary) P99Ms() float64 { return ms(s.P99) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
