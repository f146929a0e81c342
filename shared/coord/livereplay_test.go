package coord_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/live"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestReplayReachesPastTheRing: a product stream resumed from a position
// taken before a job changed many times (its ring let the older events go
// to the events container meanwhile) replays every event after the
// position, in order, each once, none from before it; a peer process, which
// never saw the job, replays the same.
func TestReplayReachesPastTheRing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j, epoch := e.runJob() // events 1-3
	// Events 1-3 are older than the position's time mark (its read less a
	// minute): they were passed on before it and do not come again.
	e.clock.Advance(2 * time.Minute)
	sub, err := e.c.Subscribe(e.ctx, live.Watch{ProductID: prod})
	require.NoError(t, err)
	from := sub.Start
	sub.Close()
	const reports = 20 // events 4-23: the ring keeps 4 to 8 of them
	for i := range reports {
		_, err := e.c.ReportUsage(e.ctx, "f1", prod, j.ID, admission.UsageRequest{LeaseEpoch: epoch, Usage: fleet.Usage{USD: float64(i + 1)}})
		require.NoError(t, err)
	}
	require.Greater(t, e.job(j.ID).Recent()[0].Seq, int64(4), "the ring let events after the position go")

	for _, c := range []*coord.Coordinator{e.c, e.peer()} {
		var seqs []int64
		_, err := c.Replay(e.ctx, from, prod, func(chs []live.Change, _ live.Position) error {
			for _, ch := range chs {
				if ch.Event != nil && ch.Event.JobID == j.ID {
					seqs = append(seqs, ch.Event.Seq)
				}
			}
			return nil
		})
		require.NoError(t, err)
		want := make([]int64, 0, reports)
		for s := int64(4); s <= 3+reports; s++ {
			want = append(want, s)
		}
		require.Equal(t, want, seqs)
	}
}
