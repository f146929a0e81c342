package coord_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/admission"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	blobfs "github.com/gigafactory/fleet/shared/blob/fs"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/artifacts"
	"github.com/gigafactory/fleet/shared/fleet"
)

// eventFaults decorates a Store: event documents whose id lost() names are
// never written (Create fails before the store is touched: a store error,
// or the writer's process dying between the job's CAS and the event's
// write, look the same from outside), and queries of the events container
// fail while queriesDown.
type eventFaults struct {
	store.Store
	mu          sync.Mutex
	lost        func(id string) bool
	queriesDown bool
	creates     int
}

func (s *eventFaults) set(lost func(id string) bool, queriesDown bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost, s.queriesDown = lost, queriesDown
}

func (s *eventFaults) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Events {
		s.mu.Lock()
		s.creates++
		lost := s.lost != nil && s.lost(id)
		s.mu.Unlock()
		if lost {
			return "", store.ErrUnavailable
		}
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

func (s *eventFaults) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	s.mu.Lock()
	down := s.queriesDown && container == store.Events
	s.mu.Unlock()
	if down {
		return store.Page{}, store.ErrUnavailable
	}
	return s.Store.Query(ctx, container, q)
}

func all(string) bool { return true }

func newEventFaultEnv(t *testing.T) (*env, *eventFaults) {
	var faults *eventFaults
	e := newEnv(t, withStore(func(s store.Store) store.Store {
		faults = &eventFaults{Store: s}
		return faults
	}))
	return e, faults
}

// stored is the seqs the events container holds for job id, read past the
// coordinator (no ring merged in).
func (e *env) stored(id string) []int64 {
	e.t.Helper()
	page, err := e.raw.Query(e.ctx, store.Events, store.Query{PartitionKey: id})
	require.NoError(e.t, err)
	require.Empty(e.t, page.Continuation)
	out := make([]int64, 0, len(page.Items))
	for _, it := range page.Items {
		var ev fleet.Event
		require.NoError(e.t, json.Unmarshal(it.Body, &ev))
		out = append(out, ev.Seq)
	}
	return out
}

func upTo(n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// feedRepair hands every job change since the start of the jobs feed to
// DispatchChanged of c (the dispatch function of another process when c is
// a peer): as the Functions host would, latest versions only.
func (e *env) feedRepair(c *coord.Coordinator) {
	e.t.Helper()
	page, err := e.raw.ReadChanges(e.ctx, store.Jobs, "", 1000)
	require.NoError(e.t, err)
	_, err = c.DispatchChanged(e.ctx, page.Items)
	require.NoError(e.t, err)
}

// runJob submits a job, claims it as f1 and moves it to building: events
// submitted (1), claimed (2), stage (3).
func (e *env) runJob() (*fleet.Job, int64) {
	e.t.Helper()
	j := e.submit()
	cl := e.claim("f1")
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(e.t, err)
	return j, cl.LeaseEpoch
}

// TestEventsRideOnTheJob: a change's event is committed with the job (its
// ring) and no second document is written: a job's short history is read
// from the job alone.
func TestEventsRideOnTheJob(t *testing.T) {
	t.Parallel()
	e, faults := newEventFaultEnv(t)
	e.factory("f1")
	j, _ := e.runJob()

	require.Empty(t, e.stored(j.ID), "no event document written")
	faults.mu.Lock()
	require.Zero(t, faults.creates)
	faults.mu.Unlock()
	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "claimed", "stage"}, eventTypes(evs))
	require.Equal(t, fleet.EventID(j.ID, 2), evs[1].ID)
	require.Equal(t, j.ID, evs[1].JobID)
	require.Equal(t, prod, evs[1].ProductID)

	after, err := e.c.Events(e.ctx, prod, j.ID, 1, 1)
	require.NoError(t, err)
	require.Len(t, after, 1)
	require.Equal(t, int64(2), after[0].Seq, "after and limit apply to the merged list")
}

// TestEventsArchivedPastTheRing: a job that changes many times keeps its
// latest events and moves the older ones to the events container, each
// written once; its history reads whole.
func TestEventsArchivedPastTheRing(t *testing.T) {
	t.Parallel()
	e, faults := newEventFaultEnv(t)
	e.factory("f1")
	j, epoch := e.runJob()
	const reports = 30
	for i := range reports {
		_, err := e.c.ReportUsage(e.ctx, "f1", prod, j.ID, admission.UsageRequest{LeaseEpoch: epoch, Usage: fleet.Usage{USD: float64(i + 1)}})
		require.NoError(t, err)
	}
	held := e.job(j.ID)
	require.LessOrEqual(t, len(held.RecentEvents), 8, "the job keeps only its latest events")
	archived := held.EventSeq - int64(len(held.RecentEvents))
	require.Equal(t, upTo(archived), e.stored(j.ID), "what the job let go is in the container")
	faults.mu.Lock()
	require.Equal(t, int(archived), faults.creates, "each archived event written once")
	faults.mu.Unlock()
	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Len(t, evs, 3+reports)
}

// TestEventsRingBoundedWhileEventsDown: with the events container out of
// reach the job keeps its events, up to a bound past which its changes are
// refused (unavailable) and write nothing; when it is back, the next change
// archives what the job lets go.
func TestEventsRingBoundedWhileEventsDown(t *testing.T) {
	t.Parallel()
	e, faults := newEventFaultEnv(t)
	e.factory("f1")
	j, epoch := e.runJob()
	faults.set(all, true)
	usd := 0.0
	report := func() error {
		usd++
		_, err := e.c.ReportUsage(e.ctx, "f1", prod, j.ID, admission.UsageRequest{LeaseEpoch: epoch, Usage: fleet.Usage{USD: usd}})
		return err
	}
	var err error
	for range 100 {
		if err = report(); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, store.ErrUnavailable)
	held := e.job(j.ID)
	require.Len(t, held.RecentEvents, 32, "the job holds events up to the bound")
	before := e.rawJob(j.ID)
	require.ErrorIs(t, report(), store.ErrUnavailable)
	require.Equal(t, before, e.rawJob(j.ID), "a refused change writes nothing")

	faults.set(nil, false)
	require.NoError(t, report())
	require.Equal(t, upTo(held.EventSeq-3), e.stored(j.ID), "the change archived the events the job let go")
	require.Len(t, e.job(j.ID).RecentEvents, 4)
	requireContiguous(t, e.events(j.ID))
}

// TestNoEventOfAFailedCAS: a change whose job write fails, or loses a race
// and is retried, shows no event of the attempt that did not commit.
func TestNoEventOfAFailedCAS(t *testing.T) {
	t.Parallel()
	hooks := &hookStore{}
	e := newEnv(t, withStore(func(s store.Store) store.Store { hooks.Store = s; return hooks }))
	e.factory("f1")
	j := e.submit()
	cl := e.claim("f1")

	hooks.setBeforeReplace(once(func(string, string) error { return store.ErrUnavailable }))
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.ErrorIs(t, err, store.ErrUnavailable)
	hooks.setBeforeReplace(once(func(string, string) error { return store.ErrPrecondition }))
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err, "a lost race is retried")
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageReview, LeaseEpoch: cl.LeaseEpoch + 1})
	require.ErrorIs(t, err, fleet.ErrFenced)

	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "claimed", "stage"}, eventTypes(evs), "one event per committed change")
}

// TestEventArchiveCounts: /fleet/metrics counts the archive writes that
// failed (the job kept its events) and the events archived.
func TestEventArchiveCounts(t *testing.T) {
	t.Parallel()
	e, faults := newEventFaultEnv(t)
	e.factory("f1")
	j, epoch := e.runJob() // events 1-3
	report := func(usd float64) {
		_, err := e.c.ReportUsage(e.ctx, "f1", prod, j.ID, admission.UsageRequest{LeaseEpoch: epoch, Usage: fleet.Usage{USD: usd}})
		require.NoError(t, err)
	}
	for i := range 5 { // events 4-8: the ring is full
		report(float64(i + 1))
	}
	faults.set(all, false)
	report(6) // event 9: archiving 1-5 fails, the job keeps them
	st := e.c.Stats()
	require.Equal(t, int64(1), st.EventsDeferred)
	require.Zero(t, st.EventsRepaired)

	faults.set(nil, false)
	report(7) // event 10: 1-6 archived
	require.Equal(t, int64(6), e.c.Stats().EventsRepaired)
	require.Equal(t, upTo(6), e.stored(j.ID))
	require.Len(t, e.events(j.ID), 10)
}

// TestDispatchFeedWritesNoEvents: the dispatch function, which sees every
// job change, writes no event documents (they ride on the job).
func TestDispatchFeedWritesNoEvents(t *testing.T) {
	t.Parallel()
	e, faults := newEventFaultEnv(t)
	e.factory("f1")
	j, _ := e.runJob()
	faults.set(nil, true) // a query of the events container would fail the batch
	e.feedRepair(e.peer())
	faults.mu.Lock()
	defer faults.mu.Unlock()
	require.Zero(t, faults.creates)
	require.Empty(t, e.stored(j.ID))
}

// pointerFails fails every write of an artifact pointer.
type pointerFails struct{ store.Store }

func (s pointerFails) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Artifacts {
		return "", store.ErrUnavailable
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

// TestFailedUploadSaysItsArtifactWasNotKept: an upload is decided (and its
// event committed) by the job's CAS before its pointer is written; when the
// pointer's write then fails, the job's history says the artifact was not
// kept instead of leaving it listed as added.
func TestFailedUploadSaysItsArtifactWasNotKept(t *testing.T) {
	t.Parallel()
	blobs, err := blobfs.Open(filepath.Join(t.TempDir(), "blobs"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = blobs.Close() })
	e := newEnv(t, withBlobs(blobs), withStore(func(s store.Store) store.Store { return pointerFails{s} }))
	j := e.submit()
	_, err = e.upload(artifacts.Upload{JobID: j.ID, Name: "out.log", ActorID: "op"}, []byte("x"))
	require.ErrorIs(t, err, store.ErrUnavailable)
	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "artifact_added", "artifact_deleted"}, eventTypes(evs))
	require.Contains(t, evs[2].Message, "out.log not kept")
	require.JSONEq(t, string(evs[1].Data), string(evs[2].Data), "both name the same artifact")
}
