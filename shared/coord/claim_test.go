package coord_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/schedule"
)

// seedJobs declares products p00, p01, … (each owning notes) and fills
// each with perProduct queued jobs. It returns job id -> product.
//
// Each product's first job goes through Submit; the rest are copies of its
// stored document under new ids, written straight to the store. They are
// the documents Submit writes, minus the submit event and queue-state bump,
// at a third of the writes: the races below need many jobs, not many submits.
func seedJobs(t *testing.T, ctx context.Context, c *coord.Coordinator, s store.Store, nProducts, perProduct int) map[string]string {
	t.Helper()
	ids := make(map[string]string, nProducts*perProduct)
	for p := range nProducts {
		pid := productName(p)
		// A repo has one owner: each product takes it in turn to submit its
		// first job (claims route by repo, not by owner).
		_, err := c.DeclareProduct(ctx, catalog.ProductRequest{ID: pid, Repos: []string{repo}, MoveRepos: true})
		require.NoError(t, err)
		tmpl, created, err := c.Submit(ctx, pid, manifest("title: job 0 of "+pid))
		require.NoError(t, err)
		require.True(t, created)
		ids[tmpl.ID] = pid
		for i := 1; i < perProduct; i++ {
			j := *tmpl
			j.ID = fmt.Sprintf("%s-copy%04d", tmpl.ID, i)
			j.Title = fmt.Sprintf("job %d of %s", i, pid)
			body, err := json.Marshal(&j)
			require.NoError(t, err)
			_, err = s.Create(ctx, store.Jobs, pid, j.ID, body)
			require.NoError(t, err)
			ids[j.ID] = pid
		}
	}
	return ids
}

func productName(i int) string { return fmt.Sprintf("p%02d", i) }

// claimRace runs one goroutine per entry of claimers, released together;
// each polls Claim on its coordinator as its factory until no job is left.
// It returns, per job id, every factory that was handed the job.
func claimRace(t *testing.T, ctx context.Context, claimers []claimer) map[string][]*protocol.Claimed {
	t.Helper()
	var (
		mu    sync.Mutex
		got   = map[string][]*protocol.Claimed{}
		start = make(chan struct{})
		wg    sync.WaitGroup
		errs  = make(chan error, len(claimers))
	)
	for _, cl := range claimers {
		wg.Go(func() {
			<-start
			for {
				c, err := cl.c.Claim(ctx, cl.req)
				if err != nil {
					errs <- fmt.Errorf("claim as %s: %w", cl.req.Token.FactoryID, err)
					return
				}
				if c == nil {
					return
				}
				mu.Lock()
				got[c.Job.ID] = append(got[c.Job.ID], c)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return got
}

type claimer struct {
	c   *coord.Coordinator
	req coord.ClaimRequest
}

// requireExactlyOnce checks every job was handed out exactly once, at
// leaseEpoch 1, and that the store agrees with what the claimers were told.
func requireExactlyOnce(t *testing.T, ctx context.Context, c *coord.Coordinator, ids map[string]string, got map[string][]*protocol.Claimed) {
	t.Helper()
	total := 0
	for id := range ids {
		require.Len(t, got[id], 1, "job %s was handed out %d times", id, len(got[id]))
	}
	for _, cls := range got {
		total += len(cls)
	}
	require.Len(t, got, len(ids), "claims of jobs that were never submitted")
	require.Equal(t, len(ids), total)
	for id, pid := range ids {
		cl := got[id][0]
		require.Equal(t, int64(1), cl.LeaseEpoch)
		j, err := c.GetJob(ctx, pid, id)
		require.NoError(t, err)
		require.Equal(t, fleet.StageAssigned, j.Stage, "job %s", id)
		require.Equal(t, int64(1), j.LeaseEpoch, "job %s", id)
		require.Equal(t, cl.Job.HolderFactoryID, j.HolderFactoryID, "job %s: store and claimer disagree on the holder", id)
		require.Equal(t, int64(2), j.EventSeq, "job %s: one submit and one claim", id)
	}
}

// The claim races below size the herd, not just the crowd: Claim reads the
// whole queue of the factory's products and every poller ranks it the same
// way, so all pollers of a product chase the same job and all but one lose a
// CAS on it. Spreading the jobs over products keeps the test fast under
// -race while every job is still fought over by several goroutines at once.

// TestClaimExactlyOnce: 64 goroutines, one factory each, race to poll-claim
// 1,000 jobs spread over 16 products (4 factories per product, and all 64
// on one store, one writer and one job cache). Every job goes to exactly
// one claimer.
func TestClaimExactlyOnce(t *testing.T) {
	t.Parallel()
	const nProducts, perProduct, goroutines = 16, 63, 64 // 1,008 jobs
	e := newEnv(t)
	ids := seedJobs(t, e.ctx, e.c, e.raw, nProducts, perProduct)
	claimers := make([]claimer, goroutines)
	for i := range claimers {
		id := fmt.Sprintf("f%02d", i)
		e.factory(id, products(productName(i%nProducts)))
		claimers[i] = claimer{e.c, e.as(id)}
	}

	got := claimRace(t, e.ctx, claimers)
	requireExactlyOnce(t, e.ctx, e.c, ids, got)

	left, err := e.c.Claim(e.ctx, e.as("f00"))
	require.NoError(t, err)
	require.Nil(t, left, "nothing is left to claim")
	st := e.c.Stats()
	require.Equal(t, int64(len(ids)), st.Claims)
	require.Zero(t, st.EventsDeferred, "a duplicate claim event would collide on its id")
	t.Logf("%d claims, %d lost claim races, %d CAS conflicts", st.Claims, st.ClaimConflicts, st.CASConflicts)
}

// TestClaimExactlyOnceSharedFactories: a few factories, each polled by many
// goroutines at once (a factory with many seats), all on one product, so
// every job is fought over by every goroutine and a factory races itself.
func TestClaimExactlyOnceSharedFactories(t *testing.T) {
	t.Parallel()
	const jobs, goroutines, factories = 100, 24, 3
	e := newEnv(t)
	ids := seedJobs(t, e.ctx, e.c, e.raw, 1, jobs)
	for i := range factories {
		e.factory(fmt.Sprintf("f%d", i))
	}
	claimers := make([]claimer, goroutines)
	for i := range claimers {
		claimers[i] = claimer{e.c, e.as(fmt.Sprintf("f%d", i%factories))}
	}
	requireExactlyOnce(t, e.ctx, e.c, ids, claimRace(t, e.ctx, claimers))
}

// TestClaimExactlyOnceTwoCoordinators: two coordinators on one SQLite file
// through separate connection pools (two processes' worth), each with its
// own job cache, race for the same jobs. The caches are only an
// optimisation: nothing is ever handed out twice.
func TestClaimExactlyOnceTwoCoordinators(t *testing.T) {
	t.Parallel()
	const nProducts, perProduct, perCoordinator = 4, 50, 16
	e := newEnv(t)
	other := e.peer()
	ids := seedJobs(t, e.ctx, e.c, e.raw, nProducts, perProduct)
	// Both caches start warm: A's from the submits, B's from the change
	// feed (B has no transport, so it only caches what the feed showed it).
	// Every claim by one makes the other's copy stale.
	feed, err := e.raw.ReadChanges(e.ctx, store.Jobs, "", 1000)
	require.NoError(t, err)
	_, err = other.DispatchChanged(e.ctx, feed.Items)
	require.NoError(t, err)

	var claimers []claimer
	for i := range perCoordinator {
		a, b := fmt.Sprintf("a%02d", i), fmt.Sprintf("b%02d", i)
		e.factory(a, products(productName(i%nProducts)))
		e.factory(b, products(productName(i%nProducts)))
		claimers = append(claimers, claimer{e.c, e.as(a)}, claimer{other, e.as(b)})
	}
	got := claimRace(t, e.ctx, claimers)
	requireExactlyOnce(t, e.ctx, other, ids, got)

	byA := 0
	for _, cls := range got {
		if cls[0].Job.HolderFactoryID[0] == 'a' {
			byA++
		}
	}
	t.Logf("coordinator A claimed %d, B claimed %d; conflicts A %d, B %d", byA, len(ids)-byA,
		e.c.Stats().ClaimConflicts, other.Stats().ClaimConflicts)
	require.NotZero(t, byA, "A never won: the race did not happen")
	require.NotEqual(t, len(ids), byA, "B never won: the race did not happen")
}

// TestAcceptExactlyOnce: the push path. Many goroutines accept the same
// dispatch (same job, same dispatchEpoch) at once, as the target factory
// and as others: exactly one wins and every other gets a conflict.
func TestAcceptExactlyOnce(t *testing.T) {
	t.Parallel()
	pub := &recordingPublisher{}
	e := newEnv(t, withPublisher(pub))
	e.factory("f1")
	j := e.submit()
	n, err := e.c.Redispatch(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	msgs := pub.sent()
	require.Len(t, msgs, 1)
	msg := msgs[0]
	require.Equal(t, "f1", msg.TargetFactoryID)
	require.Equal(t, j.ID+":1", msg.MessageID())

	const goroutines = 48
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		winners []*protocol.Claimed
		others  []error
	)
	for i := range goroutines {
		factoryID := "f1"
		if i%4 == 3 {
			factoryID = "intruder" // right epoch, wrong factory
		}
		wg.Go(func() {
			<-start
			cl, err := e.c.Accept(e.ctx, factoryID, msg.ProductID, msg.JobID, msg.DispatchEpoch)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				winners = append(winners, cl)
			} else {
				others = append(others, err)
			}
		})
	}
	close(start)
	wg.Wait()

	require.Len(t, winners, 1)
	require.Equal(t, "f1", winners[0].Job.HolderFactoryID)
	require.Equal(t, int64(1), winners[0].LeaseEpoch)
	require.Len(t, others, goroutines-1)
	for _, err := range others {
		require.ErrorIs(t, err, fleet.ErrConflict)
		require.NotErrorIs(t, err, fleet.ErrFenced)
	}
	got := e.job(j.ID)
	require.Equal(t, fleet.StageAssigned, got.Stage)
	require.Equal(t, int64(1), got.LeaseEpoch)
	require.Equal(t, "f1", got.HolderFactoryID)
	require.Equal(t, int64(2), got.EventSeq)
}

// TestClaimRacesAccept: both transports at once. The dispatched factory
// accepts while other factories poll for the same job: one of them gets it.
func TestClaimRacesAccept(t *testing.T) {
	t.Parallel()
	const rounds, pollers = 20, 6
	pub := &recordingPublisher{}
	// Capability fit alone routes: the jobs target wins stay leased, and
	// their counted leases would otherwise score it below the idle pollers
	// (and fill it) in later rounds.
	e := newEnv(t, withPublisher(pub), withConfig(coord.Config{Weights: schedule.Weights{CapabilityFit: 1}}))
	e.factory("target", seats(rounds))
	pushWins := 0
	for i := range pollers {
		e.factory(fmt.Sprintf("poller%d", i), caps(append([]string{"tier:spare"}, baseCaps...)...))
	}
	for round := range rounds {
		j := e.submit(fmt.Sprintf("title: round %d", round))
		_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
		require.NoError(t, err)
		got := e.job(j.ID)
		require.Equal(t, "target", got.TargetFactoryID, "the tighter capability fit wins the dispatch")

		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			winners []string
			errs    []error
		)
		record := func(who string, cl *protocol.Claimed, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case cl != nil && cl.Job.ID != j.ID:
				errs = append(errs, fmt.Errorf("%s got job %s, not %s", who, cl.Job.ID, j.ID))
			case cl != nil:
				winners = append(winners, who)
			}
		}
		wg.Go(func() {
			<-start
			cl, err := e.c.Accept(e.ctx, "target", prod, j.ID, got.DispatchEpoch)
			if errors.Is(err, fleet.ErrConflict) {
				err = nil
			}
			record("target", cl, err)
		})
		for i := range pollers {
			wg.Go(func() {
				<-start
				who := fmt.Sprintf("poller%d", i)
				cl, err := e.c.Claim(e.ctx, e.as(who))
				record(who, cl, err)
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs)
		require.Len(t, winners, 1, "round %d: %v", round, winners)
		require.Equal(t, winners[0], e.job(j.ID).HolderFactoryID)
		if winners[0] == "target" {
			pushWins++
		}
	}
	t.Logf("push won %d of %d rounds", pushWins, rounds)
}
