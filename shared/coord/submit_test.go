package coord_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestSubmit: the stored job is the manifest plus the defaults, queued.
func TestSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putProfile("backend", profileDoc("You work on the backend.\n"))
	v0 := e.queueVersion()
	j, created, err := e.c.Submit(e.ctx, prod, []byte(`---
title: Fix the login redirect
repo: notes
capabilities: [os:linux, engine:claude, has:git]
persona: backend
priority: high
budget: {wall: 45m, usd: 5}
---
Task body in Markdown, kept verbatim.
`))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, fleet.StageQueued, j.Stage)
	require.Equal(t, "Fix the login redirect", j.Title)
	require.Equal(t, []string{"os:linux", "engine:claude", "has:git"}, j.Capabilities)
	require.Equal(t, fleet.PriorityHigh, j.Priority)
	require.Equal(t, &fleet.JobProfile{Name: "backend", Version: 1, Capabilities: []string{}, Body: "You work on the backend.\n"}, j.Profile)
	require.Equal(t, fleet.Budget{Wall: fleet.Duration(45 * time.Minute), USD: 5}, j.Budget)
	require.Equal(t, "Task body in Markdown, kept verbatim.\n", j.Body)
	require.Equal(t, fleet.DefaultMaxAttempts, j.MaxAttempts)
	require.Equal(t, []string{}, j.Deps)
	require.Zero(t, j.LeaseEpoch)
	require.Zero(t, j.DispatchEpoch)
	require.Equal(t, t0, j.CreatedAt)
	require.Equal(t, t0, j.QueuedAt)
	require.Equal(t, j, e.job(j.ID), "Submit returns what it stored")
	require.Equal(t, v0+1, e.queueVersion())
	evs := e.events(j.ID)
	require.Len(t, evs, 1)
	require.Equal(t, fleet.EventSubmitted, evs[0].Type)
	require.Equal(t, int64(1), evs[0].Seq)
	require.Equal(t, fleet.StageQueued, evs[0].To)
}

// TestSubmitIdempotent: the same idempotencyKey returns the same job with
// created=false and stores one document, also when the submits race.
func TestSubmitIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := manifest("idempotencyKey: tracker-4711")
	first, created, err := e.c.Submit(e.ctx, prod, m)
	require.NoError(t, err)
	require.True(t, created)
	v1 := e.queueVersion()

	again, created, err := e.c.Submit(e.ctx, prod, m)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, v1, e.queueVersion(), "a repeated submit changes nothing")

	// A key is scoped to its product.
	_, err = e.c.PutProduct(e.ctx, "p2", "", []string{"docs"})
	require.NoError(t, err)
	other, created, err := e.c.Submit(e.ctx, "p2", manifest("repo: docs", "idempotencyKey: tracker-4711"))
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, first.ID, other.ID)

	// Racing submits of a new key: one creates, all get the same job.
	raced := manifest("idempotencyKey: tracker-4712")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		creates int
		errs    []error
	)
	for range 16 {
		wg.Go(func() {
			j, created, err := e.c.Submit(e.ctx, prod, raced)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids[j.ID]++
			if created {
				creates++
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, ids, 1)
	require.Equal(t, 1, creates)

	page, err := e.raw.Query(e.ctx, store.Jobs, store.Query{PartitionKey: prod, Where: []store.Cond{store.Eq("idempotencyKey", "tracker-4711")}})
	require.NoError(t, err)
	require.Len(t, page.Items, 1, "one document per key")
	page, err = e.raw.Query(e.ctx, store.Jobs, store.Query{PartitionKey: prod})
	require.NoError(t, err)
	require.Len(t, page.Items, 2)
	for id := range ids {
		require.Len(t, e.events(id), 1, "one submitted event however many submits")
	}
}

// TestSubmitRejects: bad submissions name the field at fault and store
// nothing.
func TestSubmitRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	shipped := e.submit()
	tests := []struct {
		name     string
		product  string
		manifest []byte
		code     fleet.Code
		field    string
	}{
		{"unknown dep", prod, manifest("deps: [j-does-not-exist]"), fleet.CodeInvalid, "deps[0]"},
		{"second dep unknown", prod, manifest(fmt.Sprintf("deps: [%s, nope]", shipped.ID)), fleet.CodeInvalid, "deps[1]"},
		{"dep in another product", "p2", manifest("repo: docs", fmt.Sprintf("deps: [%s]", shipped.ID)), fleet.CodeInvalid, "deps[0]"},
		{"repo not owned", prod, manifest("repo: someone-elses"), fleet.CodeRepoNotOwned, "repo"},
		{"undeclared product", "nobody", manifest(), fleet.CodeRepoNotOwned, "repo"},
		{"bad product id", "../p1", manifest(), fleet.CodeInvalid, "productId"},
		{"no repo", prod, []byte("---\ntitle: x\n---\nbody\n"), fleet.CodeInvalid, "repo"},
		{"bad capability", prod, manifest("capabilities: [nocolon]"), fleet.CodeInvalid, "capabilities[0]"},
		{"unknown parent", prod, manifest("parentId: j-nope"), fleet.CodeInvalid, "parentId"},
		{"unknown priority", prod, manifest("priority: urgent"), fleet.CodeInvalid, "priority"},
		{"not a manifest", prod, []byte("just text"), fleet.CodeInvalid, "manifest"},
	}
	_, err := e.c.PutProduct(e.ctx, "p2", "", []string{"docs"})
	require.NoError(t, err)
	for _, tc := range tests {
		before, err := e.raw.ReadChanges(e.ctx, store.Jobs, "", 1000)
		require.NoError(t, err)
		_, _, err = e.c.Submit(e.ctx, tc.product, tc.manifest)
		requireCode(t, err, tc.code, tc.field)
		if tc.code == fleet.CodeRepoNotOwned {
			require.ErrorIs(t, err, fleet.ErrRepoNotOwned, tc.name)
		}
		after, err := e.raw.ReadChanges(e.ctx, store.Jobs, before.Continuation, 1000)
		require.NoError(t, err)
		var written []string
		for _, it := range after.Items {
			written = append(written, it.ID)
		}
		require.Empty(t, written, "%s: a rejected submit wrote jobs", tc.name)
	}
}

// TestDeps: a job whose deps have not shipped is blocked; it is queued, with
// an event and a queue-state bump, once its deps are satisfied: all of them
// by default, any one with depsMode any.
func TestDeps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode     string
		unblocks int // after how many of the two deps shipped
	}{
		{"all", 2},
		{"any", 1},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			// The deps outrank the waiter, so once it is unblocked a claim
			// still takes a dep first.
			a := e.submit("title: dep a", "priority: high")
			e.clock.Advance(time.Second)
			b := e.submit("title: dep b", "priority: high")
			e.clock.Advance(time.Second)
			waiter := e.submit(fmt.Sprintf("deps: [%s, %s]", a.ID, b.ID), "depsMode: "+tc.mode, "title: waiter")
			require.Equal(t, fleet.StageBlocked, waiter.Stage)
			require.Equal(t, fleet.DepsMode(tc.mode), waiter.DepsMode)
			require.True(t, e.job(a.ID).HasDependants)
			require.True(t, e.job(b.ID).HasDependants)

			remaining := map[string]bool{a.ID: true, b.ID: true}
			for i := range 2 {
				// Only the deps are claimable: a blocked job never is.
				cl := e.claim("f1")
				require.True(t, remaining[cl.Job.ID], "claimed %s, want one of the deps", cl.Job.ID)
				delete(remaining, cl.Job.ID)
				dep := cl.Job
				_, err := e.c.Patch(e.ctx, "f1", prod, dep.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
				require.NoError(t, err)
				v0 := e.queueVersion()
				_, err = e.c.Patch(e.ctx, "f1", prod, dep.ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: cl.LeaseEpoch})
				require.NoError(t, err)

				got := e.job(waiter.ID)
				if i+1 < tc.unblocks {
					require.Equal(t, fleet.StageBlocked, got.Stage, "after %d of 2 deps shipped", i+1)
					require.Equal(t, v0, e.queueVersion())
					continue
				}
				if i+1 == tc.unblocks {
					require.Equal(t, fleet.StageQueued, got.Stage, "after %d of 2 deps shipped", i+1)
					require.Equal(t, v0+1, e.queueVersion())
					evs := e.events(waiter.ID)
					requireContiguous(t, evs)
					require.Equal(t, []string{"submitted", "unblocked"}, eventTypes(evs))
					require.Equal(t, fleet.StageBlocked, evs[1].From)
					require.Equal(t, fleet.StageQueued, evs[1].To)
					require.Equal(t, fleet.ActorSystem, evs[1].Actor)
				}
			}
		})
	}
}

// TestDepsAlreadyShipped: deps that shipped before the submit leave the
// job queued straight away.
func TestDepsAlreadyShipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	dep := e.submit()
	cl := e.claim("f1")
	_, err := e.c.Patch(e.ctx, "f1", prod, dep.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)
	_, err = e.c.Patch(e.ctx, "f1", prod, dep.ID, coord.PatchRequest{Stage: fleet.StageShipped, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)
	j := e.submit(fmt.Sprintf("deps: [%s]", dep.ID))
	require.Equal(t, fleet.StageQueued, j.Stage)
	require.False(t, e.job(dep.ID).HasDependants, "a shipped dep needs no dependants flag")
}

// TestQueueStateVersion: the version moves when a job enters queued
// (submit, release, reap, retry, requeue) and not on other moves.
func TestQueueStateVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	require.Zero(t, e.queueVersion())
	j := e.submit()
	require.Equal(t, int64(1), e.queueVersion(), "submit")
	cl := e.claim("f1")
	require.Equal(t, int64(1), e.queueVersion(), "claim")
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(t, err)
	require.Equal(t, int64(1), e.queueVersion(), "building")
	_, err = e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{LeaseEpoch: cl.LeaseEpoch, Checkpoint: ptr("c1")})
	require.NoError(t, err)
	_, err = e.c.Renew(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	require.Equal(t, int64(1), e.queueVersion(), "checkpoint and renew")
	_, err = e.c.Release(e.ctx, "f1", prod, j.ID, cl.LeaseEpoch)
	require.NoError(t, err)
	require.Equal(t, int64(2), e.queueVersion(), "release")
	e.claim("f1")
	e.clock.Advance(e.c.Config().LeaseTTL)
	_, err = e.c.Reap(e.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), e.queueVersion(), "reap")
	_, err = e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionCancel, "")
	require.NoError(t, err)
	require.Equal(t, int64(3), e.queueVersion(), "cancel")
	_, err = e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionRequeue, "")
	require.NoError(t, err)
	require.Equal(t, int64(4), e.queueVersion(), "requeue")
	e.submit("deps: [" + j.ID + "]")
	require.Equal(t, int64(4), e.queueVersion(), "a blocked submit")
}

// TestSubmitEncodedTooLarge: a manifest under the size limit whose JSON
// encoding is not (1 MiB of quotes, two bytes each once escaped, or of
// control characters, six) is too_large naming the body, checked before
// any write: no job, no event, and the dependencies it names are not
// marked. ('<' is stored as itself, one byte: kernel's codec.)
func TestSubmitEncodedTooLarge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, char string }{{"quotes", `"`}, {"control characters", "\x01"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			dep := e.submit()
			depBefore := e.rawJob(dep.ID)
			src := manifest(fmt.Sprintf("deps: [%s]", dep.ID))
			src = append(src, strings.Repeat(tc.char, fleet.MaxManifestBytes-len(src))...)
			require.Len(t, src, fleet.MaxManifestBytes)

			_, _, err := e.c.Submit(e.ctx, prod, src)
			requireCode(t, err, fleet.CodeTooLarge, "body")
			require.Equal(t, depBefore, e.rawJob(dep.ID), "the dependency was marked")
			jobs, _, err := e.c.ListJobs(e.ctx, prod, "", 100, "")
			require.NoError(t, err)
			require.Len(t, jobs, 1, "a job was stored")
		})
	}
}

// TestStoreTooLargeIsTooLarge: whatever the coordinator's own bounds, a
// document the store refuses for its size is too_large, never a 500.
func TestStoreTooLargeIsTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withStore(func(s store.Store) store.Store { return &tooLargeStore{Store: s} }))
	_, _, err := e.c.Submit(e.ctx, prod, manifest())
	require.ErrorIs(t, err, fleet.ErrTooLarge)
	require.ErrorIs(t, err, store.ErrTooLarge)
}

// tooLargeStore refuses every job it is asked to create as too large.
type tooLargeStore struct{ store.Store }

func (s *tooLargeStore) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	if container == store.Jobs {
		return "", fmt.Errorf("sqlite: create: %w", store.ErrTooLarge)
	}
	return s.Store.Create(ctx, container, pk, id, body)
}

// TestSubmitFinishesAfterCallerLeaves: once the job is created, its event
// and queue-state bump are written even if the caller's context ends right
// then (a client disconnect, a host timeout), as in every transition.
func TestSubmitFinishesAfterCallerLeaves(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEnv(t, withStore(func(s store.Store) store.Store { return &cancelOnCreate{Store: s, cancel: cancel} }))
	j, created, err := e.c.Submit(ctx, prod, manifest())
	require.NoError(t, err)
	require.True(t, created)
	require.Error(t, ctx.Err(), "the caller left right after the create")
	require.Equal(t, []string{"submitted"}, eventTypes(e.events(j.ID)))
}

// cancelOnCreate cancels the caller's context as soon as a job is created.
type cancelOnCreate struct {
	store.Store
	cancel context.CancelFunc
}

func (s *cancelOnCreate) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	rev, err := s.Store.Create(ctx, container, pk, id, body)
	if container == store.Jobs {
		s.cancel()
	}
	return rev, err
}
