package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCutTail: the slowest 1% and as many around the median are read, and
// each segment is their mean, cut at the job's own instants.
func TestCutTail(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var jobs []tailJob
	created, stamped := map[string]time.Time{}, map[string]time.Time{}
	for i := range 200 {
		id := fmt.Sprintf("j%03d", i)
		sent := base.Add(ms(10 * i))
		// Job i: 1 ms to be created, i/10 ms to be stamped, 1 ms to be
		// stored, 2 ms to be received: sorted by latency already.
		created[id] = sent.Add(ms(1))
		stamped[id] = created[id].Add(time.Duration(i) * time.Millisecond / 10)
		stored := stamped[id].Add(ms(1))
		jobs = append(jobs, tailJob{id: id, sent: sent, stored: stored, received: stored.Add(ms(2))})
	}
	var read []string
	tail, err := cutTail(t.Context(), func(_ context.Context, id string) (time.Time, time.Time, error) {
		read = append(read, id)
		return created[id], stamped[id], nil
	}, jobs)
	require.NoError(t, err)
	require.Equal(t, []string{"j099", "j100", "j198", "j199"}, read)
	require.Equal(t, 2, tail.Jobs)
	want := [][2]float64{{1, 1}, {9.95, 19.85}, {1, 1}, {2, 2}}
	require.Len(t, tail.Segments, len(want))
	for k, w := range want {
		require.InDelta(t, w[0], tail.Segments[k].MiddleMs, 0.001, tail.Segments[k].Segment)
		require.InDelta(t, w[1], tail.Segments[k].SlowestMs, 0.001, tail.Segments[k].Segment)
	}

	none, err := cutTail(t.Context(), nil, jobs[:1])
	require.NoError(t, err)
	require.Nil(t, none, "one job has no middle apart from its tail")
}
