package lintest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/lintest"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// The workload: one job per product, so a claim by a factory serving only
// that product is an operation on that job alone (a claim that finds
// nothing says so of that one job) and the history partitions by job.
const (
	jobs         = 12
	perProduct   = 3 // factories serving each product
	coordinators = 3 // processes: each its own store handle and caches
	clients      = 8 // goroutines issuing operations
	opsPerClient = 150
	// The lease is short on the real clock so leases expire during the
	// run and the reaper revokes some of them.
	leaseTTL = 25 * time.Millisecond
)

// TestJobOperationsAreLinearizable runs the workload on the real
// coordinator over SQLite and checks the recorded history with Porcupine.
func TestJobOperationsAreLinearizable(t *testing.T) {
	t.Parallel()
	h := run(t, func(s store.Store) store.Store { return s })
	res, info := check(t, h)
	require.Equal(t, porcupine.Ok, res, "history of %d operations is not linearizable; see %s", len(h.ops), visualize(t, info))
}

// TestBrokenCASIsCaught proves the check can fail: the same workload on a
// store whose job writes ignore the revision (blindStore) makes two racing
// claimers both win, and Porcupine must say the history is not
// linearizable.
func TestBrokenCASIsCaught(t *testing.T) {
	t.Parallel()
	h := run(t, func(s store.Store) store.Store { return blindStore{s} })
	res, info := check(t, h)
	require.Equal(t, porcupine.Illegal, res, "a store that ignores the CAS revision went unnoticed (%d operations)", len(h.ops))
	// The view of a failed check is written where a failing run leaves it.
	path := visualize(t, info)
	require.FileExists(t, path)
	t.Logf("visualization: %s", path)
}

func check(t *testing.T, h *history) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(lintest.Model, h.ops, 30*time.Second)
	t.Logf("porcupine: %d operations over %d jobs, %s in %v", len(h.ops), jobs, res, time.Since(start).Round(time.Millisecond))
	outcomes := map[string]int{}
	for _, op := range h.ops {
		outcomes[fmt.Sprintf("%s=%s", op.Input.(lintest.Input).Kind, op.Output.(lintest.Output).Outcome)]++
	}
	t.Logf("outcomes: %v", outcomes)
	return res, info
}

// visualize writes Porcupine's HTML view of a failed check to the test's
// artifact directory (kept with go test -artifacts -outputdir DIR) and
// returns its path.
func visualize(t *testing.T, info porcupine.LinearizationInfo) string {
	path := filepath.Join(t.ArtifactDir(), "linearizability.html")
	if err := porcupine.VisualizePath(lintest.Model, info, path); err != nil {
		return "no visualization: " + err.Error()
	}
	return path
}

// history is the recorded operations, timed on one monotonic clock.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in lintest.Input, call, ret int64, out lintest.Output) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// world is the coordinators, products, factories and jobs of one run.
type world struct {
	t      *testing.T
	coords []*coord.Coordinator
	jobIDs []string
	prods  []string
	// tokens[j][k] is the k-th factory serving job j's product.
	tokens [][]*fleet.Token
	// hints[j] is the last lease a claim on j handed out, so most factory
	// operations name a current holder and epoch and the rest a stale one.
	hints []atomic.Pointer[lintest.State]
	h     *history
}

func run(t *testing.T, wrap func(store.Store) store.Store) *history {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleet.db")
	meet := newRendezvous()
	w := &world{t: t, h: &history{}, hints: make([]atomic.Pointer[lintest.State], jobs)}
	cfg := coord.Config{LeaseTTL: leaseTTL, RetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond}
	for range coordinators {
		s, err := sqlite.Open(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		c, err := coord.New(cfg, coord.Deps{Store: rendezvousStore{Store: observingStore{wrap(s)}, r: meet}, Clock: clock.System{}})
		require.NoError(t, err)
		w.coords = append(w.coords, c)
	}
	setup := w.coords[0]
	for j := range jobs {
		prod, repo := fmt.Sprintf("p%d", j), fmt.Sprintf("r%d", j)
		_, err := setup.PutProduct(ctx, prod, prod, []string{repo})
		require.NoError(t, err)
		var toks []*fleet.Token
		for k := range perProduct {
			id := fmt.Sprintf("f%d-%d", j, k)
			caps := []string{"os:linux", "engine:claude"}
			_, secret, err := setup.Enroll(ctx, catalog.EnrollRequest{FactoryID: id, Products: []string{prod}, Capabilities: caps, SeatLimit: 4})
			require.NoError(t, err)
			tok, err := setup.AuthenticateFactory(ctx, secret)
			require.NoError(t, err)
			_, err = setup.Heartbeat(ctx, tok, catalog.Heartbeat{Capabilities: caps, Repos: []string{repo}})
			require.NoError(t, err)
			toks = append(toks, tok)
		}
		// Submitted through the setup coordinator: the others' caches are
		// cold, so their first claims read the job from the store and meet
		// at the rendezvous.
		job, _, err := setup.Submit(ctx, prod, []byte(fmt.Sprintf("---\ntitle: job %d\nrepo: %s\ncapabilities: [engine:claude]\n---\nwork\n", j, repo)))
		require.NoError(t, err)
		w.prods, w.jobIDs, w.tokens = append(w.prods, prod), append(w.jobIDs, job.ID), append(w.tokens, toks)
	}

	w.h.start = time.Now()
	// Round one: two factories of each product claim its job at once from
	// two processes; the rendezvous makes them read the same revision.
	var wg sync.WaitGroup
	for j := range jobs {
		for k := range 2 {
			wg.Go(func() { w.claim(ctx, k, w.coords[1+k], j, k) })
		}
	}
	wg.Wait()
	// Then every kind of operation at random from every client.
	for cl := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(cl), 17))
			for range opsPerClient {
				w.random(ctx, cl, rng)
			}
		})
	}
	wg.Wait()
	return w.h
}

// random issues one random operation as client cl.
func (w *world) random(ctx context.Context, cl int, rng *rand.Rand) {
	c := w.coords[rng.IntN(len(w.coords))]
	j := rng.IntN(jobs)
	// A factory operation names the last claim's holder and epoch most of
	// the time, and otherwise another factory or an older epoch.
	holder, epoch := rng.IntN(perProduct), int64(0)
	if hint := w.hints[j].Load(); hint != nil {
		epoch = hint.Epoch
		if rng.IntN(5) > 0 {
			fmt.Sscanf(hint.Holder, fmt.Sprintf("f%d-%%d", j), &holder)
		} else {
			epoch -= int64(rng.IntN(2))
		}
	}
	tok := w.tokens[j][holder]
	fid := tok.FactoryID
	in := lintest.Input{Job: j, Factory: fid, Epoch: epoch}
	pid, id := w.prods[j], w.jobIDs[j]
	switch n := rng.IntN(100); {
	case n < 25:
		w.claim(ctx, cl, c, j, holder)
	case n < 47:
		in.Kind, in.Stage = lintest.OpPatch, []fleet.Stage{fleet.StageBuilding, fleet.StageBuilding, fleet.StageTesting, fleet.StageShipped}[rng.IntN(4)]
		w.do(cl, in, func() (*fleet.Job, error) {
			return c.Patch(ctx, fid, pid, id, coord.PatchRequest{Stage: in.Stage, LeaseEpoch: epoch})
		})
	case n < 57:
		in.Kind = lintest.OpRenew
		w.do(cl, in, func() (*fleet.Job, error) {
			_, err := c.Renew(ctx, fid, pid, id, epoch)
			return nil, err
		})
	case n < 63:
		in.Kind = lintest.OpRelease
		w.do(cl, in, func() (*fleet.Job, error) { return c.Release(ctx, fid, pid, id, epoch) })
	case n < 71:
		in.Kind, in.Retryable = lintest.OpFail, rng.IntN(3) > 0
		w.do(cl, in, func() (*fleet.Job, error) {
			return c.Fail(ctx, fid, pid, id, coord.FailRequest{LeaseEpoch: epoch, Reason: "engine exited 1", Retryable: in.Retryable})
		})
	case n < 78:
		w.reap(ctx, cl, c)
	default:
		actions := []struct {
			a  coord.Action
			to fleet.Stage
		}{
			{coord.ActionRequeue, fleet.StageQueued}, {coord.ActionRequeue, fleet.StageQueued}, {coord.ActionRequeue, fleet.StageQueued},
			{coord.ActionShip, fleet.StageShipped}, {coord.ActionReject, fleet.StageFailed}, {coord.ActionCancel, fleet.StageCancelled},
		}
		act := actions[rng.IntN(len(actions))]
		w.do(cl, lintest.Input{Job: j, Kind: lintest.OpAct, Stage: act.to}, func() (*fleet.Job, error) {
			return c.Act(ctx, "ops", pid, id, act.a, "linearizability run")
		})
	}
}

// claim is a poll claim on job j by its product's k-th factory.
func (w *world) claim(ctx context.Context, cl int, c *coord.Coordinator, j, k int) {
	tok := w.tokens[j][k]
	in := lintest.Input{Job: j, Kind: lintest.OpClaim, Factory: tok.FactoryID}
	w.do(cl, in, func() (*fleet.Job, error) {
		got, err := c.Claim(ctx, coord.ClaimRequest{Token: tok})
		if err != nil || got == nil {
			return nil, err
		}
		if got.Job.ID != w.jobIDs[j] {
			return nil, fmt.Errorf("claim for product %s returned job %s of %s", w.prods[j], got.Job.ID, got.Job.ProductID)
		}
		return got.Job, nil
	})
}

// reap runs the reaper and records one operation per job it wrote: the
// reaper names no job, so what it did to each is observed at the store.
func (w *world) reap(ctx context.Context, cl int, c *coord.Coordinator) {
	ctx, wrote := withWrites(ctx)
	call := w.h.now()
	_, err := c.Reap(ctx)
	ret := w.h.now()
	require.NoError(w.t, err)
	for j, id := range w.jobIDs {
		body, ok := wrote.jobs[id]
		if !ok {
			continue
		}
		var job fleet.Job
		require.NoError(w.t, json.Unmarshal(body, &job))
		w.h.add(cl, lintest.Input{Job: j, Kind: lintest.OpReap}, call, ret, lintest.Output{Outcome: lintest.OK, Job: stateOf(&job)})
	}
}

// do times op and records it with its outcome.
func (w *world) do(cl int, in lintest.Input, op func() (*fleet.Job, error)) {
	call := w.h.now()
	job, err := op()
	ret := w.h.now()
	out := lintest.Output{Outcome: outcome(w.t, in, err)}
	switch {
	case out.Outcome == lintest.OK && job != nil:
		out.Job = stateOf(job)
		if in.Kind == lintest.OpClaim {
			w.hints[in.Job].Store(&out.Job)
		}
	case out.Outcome == lintest.OK && in.Kind == lintest.OpClaim:
		out.Outcome = lintest.None
	}
	w.h.add(cl, in, call, ret, out)
}

func stateOf(j *fleet.Job) lintest.State {
	return lintest.State{Stage: j.Stage, Epoch: j.LeaseEpoch, Holder: j.HolderFactoryID, CancelRequested: j.CancelRequested}
}

// outcome classifies an operation's error the way a client would read it.
func outcome(t *testing.T, in lintest.Input, err error) lintest.Outcome {
	var contended *coord.ConflictError
	var illegal *fleet.IllegalTransitionError
	switch {
	case err == nil:
		return lintest.OK
	case errors.As(err, &contended):
		return lintest.Contended
	case errors.As(err, &illegal):
		return lintest.Illegal
	case fleet.CodeOf(err) == fleet.CodeFenced:
		return lintest.Fenced
	}
	t.Errorf("%s on job %d: unexpected error %v", in.Kind, in.Job, err)
	return lintest.Contended
}
