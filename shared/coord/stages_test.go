package coord_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store"
)

// slowStore moves the fake clock on the operations a dispatch stage is
// made of, so each stage takes a known time.
type slowStore struct {
	store.Store
	clock atomic.Pointer[clocktest.Clock]
}

// Stage costs.
const (
	createTakes       = 2 * time.Millisecond // the submit's job write
	replaceTakes      = 3 * time.Millisecond // the stamp's CAS
	factoryQueryTakes = 1 * time.Millisecond // part of scheduling
	publishTakes      = 4 * time.Millisecond
	feedTakes         = 7 * time.Millisecond // the commit to dispatch starting (wake is the write and this)
)

func (s *slowStore) advance(d time.Duration) {
	if c := s.clock.Load(); c != nil {
		c.Advance(d)
	}
}

func (s *slowStore) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Jobs {
		s.advance(createTakes)
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

func (s *slowStore) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	if container == store.Jobs {
		s.advance(replaceTakes)
	}
	return s.Store.Replace(ctx, container, pk, id, body, ifRev)
}

func (s *slowStore) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	if container == store.Factories {
		s.advance(factoryQueryTakes)
	}
	return s.Store.Query(ctx, container, q)
}

type slowPublisher struct {
	recordingPublisher
	clock *clocktest.Clock
}

func (p *slowPublisher) Publish(ctx context.Context, m protocol.DispatchMessage) error {
	p.clock.Advance(publishTakes)
	return p.recordingPublisher.Publish(ctx, m)
}

// TestDispatchStages: the coordinator's counters time each stage of the
// dispatch path apart (issue 25), so a slow dispatch names its stage: the
// submit's write, the job's creation to dispatch starting (the write and
// the change feed), the choice of target, the stamp's CAS and the publish.
// Wake is taken from the job, so a peer process dispatching a job another
// one created times it too; a redispatch does not.
func TestDispatchStages(t *testing.T) {
	t.Parallel()
	slow := &slowStore{}
	e := newEnv(t, withStore(func(s store.Store) store.Store { slow.Store = s; return slow }))
	pub := &slowPublisher{clock: e.clock}
	e.withPublisher(pub)
	e.factory("f1")
	e.clock.Advance(2 * coord.DefaultFactoryCacheTTL) // the dispatch reads the factory list
	slow.clock.Store(e.clock)

	j := e.submit()
	e.clock.Advance(feedTakes)
	ds, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
	require.NoError(t, err)
	require.Equal(t, "f1", ds[0].Target)

	s := e.c.Stats()
	for _, st := range []struct {
		name     string
		n        int64
		p50, p99 float64
		want     time.Duration
	}{
		{"submit", s.StageSubmitN, s.StageSubmitP50Ms, s.StageSubmitP99Ms, createTakes},
		{"wake", s.StageWakeN, s.StageWakeP50Ms, s.StageWakeP99Ms, createTakes + feedTakes},
		{"schedule", s.StageScheduleN, s.StageScheduleP50Ms, s.StageScheduleP99Ms, factoryQueryTakes},
		{"stamp", s.StageStampN, s.StageStampP50Ms, s.StageStampP99Ms, replaceTakes},
		{"publish", s.StagePublishN, s.StagePublishP50Ms, s.StagePublishP99Ms, publishTakes},
	} {
		want := float64(st.want) / float64(time.Millisecond)
		require.Equal(t, int64(1), st.n, st.name)
		require.Equal(t, st.p50, st.p99, st.name)
		require.GreaterOrEqual(t, st.p50, want, st.name)
		require.LessOrEqual(t, st.p50, 1.19*want, st.name)
	}
	// The feed's lag is taken from the version's updatedAt: the wake less
	// the moment the write itself took.
	require.InDelta(t, float64(feedTakes)/float64(time.Millisecond), s.ChangeFeedLagMs, float64(createTakes)/float64(time.Millisecond), "feed lag")

	// A job this process created, dispatched by a peer (another instance).
	peer := e.peer()
	j2 := e.submit()
	_, err = peer.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j2.ID))
	require.NoError(t, err)
	require.Equal(t, int64(1), peer.Stats().StageWakeN, "the peer times the wake of a job it did not create")
	// The feed bringing the first job again, stamped: not a submit's wake.
	_, err = e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
	require.NoError(t, err)
	require.Equal(t, int64(1), e.c.Stats().StageWakeN, "a job's first dispatch only")
}
