package httpapi

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// loseLease ends f1's lease on job id (epoch held) one way or another;
// with expire set, the clock is moved past the lease's expiry before the
// stream or poll opens (the job still f1's then).
var loseLease = []struct {
	name   string
	expire bool
	lose   func(f *fixture, tok, id string, held int64)
}{
	{"released", false, func(f *fixture, tok, id string, held int64) {
		f.ok(http.StatusOK, nil, "POST", "/api/fleet/jobs/"+id+"/lease/release", tok, map[string]any{"leaseEpoch": held})
	}},
	{"reaped", true, func(f *fixture, _, _ string, _ int64) {
		n, err := f.coord.Reap(context.Background())
		require.NoError(f.t, err)
		require.Equal(f.t, 1, n)
	}},
}

// TestJobStreamEndsWhenTheFactoryLosesTheJob: a factory follows a job only
// while it holds it (API.md), not only when it opens its stream. Once its
// lease ends the stream ends, sending nothing written after that: neither
// the release or reap nor the next holder's claim and progress.
func TestJobStreamEndsWhenTheFactoryLosesTheJob(t *testing.T) {
	t.Parallel()
	for _, tc := range loseLease {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			j, tok, c := f.heldJob()
			next := f.enroll("f2", []string{"p1"}, "r1")
			if tc.expire {
				f.clock.Advance(coord.DefaultLeaseTTL + 1)
			}
			s := f.stream("/api/fleet/jobs/"+j.ID+"/events/stream", tok)
			for _, want := range []string{"1", "2"} {
				b, _ := s.nextEvent()
				require.Equal(t, want, b.id)
			}

			tc.lose(f, tok, j.ID, c.LeaseEpoch)
			c2 := f.claim(next)
			require.Equal(t, j.ID, c2.Job.ID)
			f.ok(http.StatusOK, nil, "PATCH", "/api/fleet/jobs/"+j.ID, next, map[string]any{"stage": "building", "leaseEpoch": c2.LeaseEpoch})
			s.ended()
		})
	}
}

// TestEventsLongPollRefusedWhenTheFactoryLosesTheJob: the long poll, the
// stream's equivalent behind a buffering front door, answers 403 when the
// write that wakes it ended the factory's lease, not the events after.
func TestEventsLongPollRefusedWhenTheFactoryLosesTheJob(t *testing.T) {
	t.Parallel()
	for _, tc := range loseLease {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			j, tok, c := f.heldJob()
			if tc.expire {
				f.clock.Advance(coord.DefaultLeaseTTL + 1)
			}
			got := make(chan result, 1)
			go func() { got <- f.call("GET", "/api/fleet/jobs/"+j.ID+"/events?after=2&wait=30s", tok, nil) }()
			<-f.clock.TickerMade() // the watcher's poll
			<-f.clock.TickerMade() // the request's wait
			tc.lose(f, tok, j.ID, c.LeaseEpoch)
			res := <-got
			require.Equal(t, http.StatusForbidden, res.status, "%s", res)
			require.Equal(t, fleet.CodeForbidden, res.errorOf(t).Code)
		})
	}
}
