package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRUFor: a document is priced from Microsoft's table by size: the 1 KB
// row up to 1 KB, linear between rows, proportional past the last.
func TestRUFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		bytes       int
		read, write float64
	}{
		{200, 1.00, 4.95},
		{1024, 1.00, 4.95},
		{1536, 1.02, 5.62},
		{3 * 1024, 1.09, 6.48},
		{64 * 1024, 4.76, 22.67},
		{4096 * 1024, 583.60, 2500.00},
	} {
		read, write := ruFor(tt.bytes)
		require.InDelta(t, tt.read, read, 0.005, "read of %d B", tt.bytes)
		require.InDelta(t, tt.write, write, 0.005, "write of %d B", tt.bytes)
	}
}

// TestEstimate: one lifecycle's operations priced by kind; a feed page
// adds a read of each document it carries.
func TestEstimate(t *testing.T) {
	t.Parallel()
	c := estimate(kinds{Reads: 2, Writes: 3, Queries: 1, FeedReads: 2}, 4, 1024)
	require.InDelta(t, 2.0, c.Reads, 1e-9)
	require.InDelta(t, 14.85, c.Writes, 1e-9)
	require.InDelta(t, 2.3, c.Queries, 1e-9)
	require.InDelta(t, 2*2.3+4, c.FeedReads, 1e-9)
	require.InDelta(t, 2+14.85+2.3+8.6, c.Total, 1e-9)
}
