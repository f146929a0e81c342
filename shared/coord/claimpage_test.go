package coord_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// itemCounter counts the job documents queries hand back.
type itemCounter struct {
	store.Store
	jobItems atomic.Int64
}

func (s *itemCounter) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	p, err := s.Store.Query(ctx, container, q)
	if container == store.Jobs {
		s.jobItems.Add(int64(len(p.Items)))
	}
	return p, err
}

// TestClaimReadsABoundedPage: a poll claim reads a page of the queue, not
// the queue: with 100 jobs queued, a factory scoped to the product decodes
// at most one page (32).
func TestClaimReadsABoundedPage(t *testing.T) {
	t.Parallel()
	var counter *itemCounter
	e := newEnv(t, withStore(func(s store.Store) store.Store { counter = &itemCounter{Store: s}; return counter }))
	e.factory("f1", products(prod))
	for range 100 {
		e.submit()
	}
	counter.jobItems.Store(0)
	e.claim("f1")
	require.LessOrEqual(t, counter.jobItems.Load(), int64(32), "job documents read by one claim")
}

// TestClaimPagesPastIneligibleJobs: the oldest page holds only jobs this
// factory cannot run; the claim reads on and takes the eligible job behind
// them rather than finding nothing.
func TestClaimPagesPastIneligibleJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1", products(prod))
	for range 40 {
		e.submit("capabilities: [engine:claude, gpu:a100]")
	}
	want := e.submit()
	require.Equal(t, want.ID, e.claim("f1").Job.ID)
}

// TestClaimDoesNotStarveOldJobs: with a long queue of one priority, each
// claim takes one of the claimSpread (8) oldest jobs still queued, never a
// younger one from past the page, so the oldest job cannot be overtaken by
// the queue behind it; and a higher priority submitted later goes first.
func TestClaimDoesNotStarveOldJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var toks []*fleet.Token
	for i := range 4 {
		toks = append(toks, e.factory("f"+string(rune('a'+i)), products(prod)))
	}
	var queue []string // oldest first
	for range 60 {
		queue = append(queue, e.submit("priority: low").ID)
		e.clock.Advance(time.Minute)
	}
	urgent := e.submit("priority: high")
	for _, tok := range toks {
		e.beat(tok) // alive after the hour the queue took to build
	}
	require.Equal(t, urgent.ID, e.claim("fa").Job.ID, "a higher priority goes first, whatever its age")
	for i := range 30 {
		got := e.claim("f" + string(rune('a'+i%4))).Job.ID
		at := slices.Index(queue, got)
		require.GreaterOrEqual(t, at, 0)
		require.Less(t, at, 8, "claim %d took the %d-th oldest queued job", i, at+1)
		queue = slices.Delete(queue, at, at+1)
	}
}
