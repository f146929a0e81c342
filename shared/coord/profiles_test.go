package coord_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/explain"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

func profileDoc(body string, front ...string) []byte {
	return []byte("---\n" + strings.Join(front, "\n") + "\n---\n" + body)
}

func (e *env) putProfile(name string, doc []byte) *fleet.Profile {
	e.t.Helper()
	p, err := e.c.PutProfile(e.ctx, catalog.PutProfileRequest{ProductID: prod, Name: name, Document: doc, Actor: "alice"})
	require.NoError(e.t, err)
	return p
}

// TestPutProfileVersions: every PUT is a new version; earlier versions stay
// readable as written; the latest and the version list follow.
func TestPutProfileVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v1 := e.putProfile("backend", profileDoc("Be careful.\n", "capabilities: [gpu:a100]", "engine: codex", "budget: {wall: 1h, usd: 2}"))
	require.Equal(t, int64(1), v1.Version)
	require.Equal(t, []string{"gpu:a100"}, v1.Capabilities)
	require.Equal(t, "codex", v1.Engine)
	require.Equal(t, fleet.Budget{Wall: fleet.Duration(time.Hour), USD: 2}, v1.Budget)
	require.Equal(t, "alice", v1.CreatedBy)
	v2 := e.putProfile("backend", profileDoc("Be bold.\n", "name: backend"))
	require.Equal(t, int64(2), v2.Version)

	latest, err := e.c.GetProfile(e.ctx, prod, "backend", 0)
	require.NoError(t, err)
	require.Equal(t, v2, latest)
	old, err := e.c.GetProfile(e.ctx, prod, "backend", 1)
	require.NoError(t, err)
	require.Equal(t, v1, old)
	_, err = e.c.GetProfile(e.ctx, prod, "backend", 3)
	requireCode(t, err, fleet.CodeNotFound, "")
	_, err = e.c.GetProfile(e.ctx, "p2", "backend", 0)
	requireCode(t, err, fleet.CodeNotFound, "")

	vs, err := e.c.ProfileVersions(e.ctx, prod, "backend")
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Equal(t, []int64{1, 2}, []int64{vs[0].Version, vs[1].Version})
	require.Equal(t, len("Be careful.\n"), vs[0].BodyBytes)

	e.putProfile("reviewer", profileDoc("Review.\n"))
	list, err := e.c.ListProfiles(e.ctx, prod)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "backend", list[0].Name)
	require.Equal(t, int64(2), list[0].Version)
	require.Equal(t, "reviewer", list[1].Name)
}

// TestPutProfileRace: racing PUTs of one name get distinct versions, and
// every version holds the document its PUT sent: none is overwritten.
func TestPutProfileRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	peers := []*coord.Coordinator{e.c, e.peer()}
	var wg sync.WaitGroup
	got := make([]*fleet.Profile, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = peers[i%2].PutProfile(e.ctx, catalog.PutProfileRequest{
				ProductID: prod, Name: "backend", Document: profileDoc(fmt.Sprintf("writer %d\n", i))})
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		require.False(t, seen[got[i].Version], "version %d handed out twice", got[i].Version)
		seen[got[i].Version] = true
		stored, err := e.c.GetProfile(e.ctx, prod, "backend", got[i].Version)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("writer %d\n", i), stored.Body)
	}
	latest, err := e.c.GetProfile(e.ctx, prod, "backend", 0)
	require.NoError(t, err)
	require.Equal(t, int64(n), latest.Version)
}

// TestPutProfileAfterOrphanVersion: a PUT that died between creating its
// version and moving the latest pointer does not wedge the profile: the
// next PUT moves the pointer past it and takes the version after.
func TestPutProfileAfterOrphanVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putProfile("backend", profileDoc("one\n"))
	orphan := fmt.Sprintf(`{"id":%q,"kind":"version","name":"backend","productId":%q,"version":2,"capabilities":[],"budget":{},"body":"two\n","createdAt":"2026-01-01T00:00:00Z"}`,
		fleet.ProfileVersionID("backend", 2), prod)
	_, err := e.raw.Create(e.ctx, store.Profiles, prod, fleet.ProfileVersionID("backend", 2), []byte(orphan))
	require.NoError(t, err)
	p := e.putProfile("backend", profileDoc("three\n"))
	require.Equal(t, int64(3), p.Version)
	latest, err := e.c.GetProfile(e.ctx, prod, "backend", 0)
	require.NoError(t, err)
	require.Equal(t, "three\n", latest.Body)
}

// TestPutProfileInvalid: bad documents are 400 naming the field, and store
// nothing.
func TestPutProfileInvalid(t *testing.T) {
	t.Parallel()
	tooMany := make([]string, fleet.MaxCapabilities+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("has:c%d", i)
	}
	for _, tt := range []struct {
		name, profile string
		doc           []byte
		code          fleet.Code
		field         string
	}{
		{"body too large", "p", profileDoc(strings.Repeat("x", fleet.MaxProfileBodyBytes+1)), fleet.CodeInvalid, "body"},
		{"too many capabilities", "p", profileDoc("b", "capabilities: ["+strings.Join(tooMany, ", ")+"]"), fleet.CodeInvalid, "capabilities"},
		{"bad capability", "p", profileDoc("b", "capabilities: [gpu]"), fleet.CodeInvalid, "capabilities[0]"},
		{"capabilities not a list", "p", profileDoc("b", "capabilities: gpu:a100"), fleet.CodeInvalid, "capabilities"},
		{"unknown field", "p", profileDoc("b", "persona: x"), fleet.CodeInvalid, "persona"},
		{"name differs", "p", profileDoc("b", "name: q"), fleet.CodeInvalid, "name"},
		{"bad engine", "p", profileDoc("b", "engine: a b"), fleet.CodeInvalid, "engine"},
		{"bad budget", "p", profileDoc("b", "budget: {wall: soon}"), fleet.CodeInvalid, "budget.wall"},
		{"no front matter", "p", []byte("just text\n"), fleet.CodeInvalid, "profile"},
		{"bad name", "a:b", profileDoc("b"), fleet.CodeInvalid, "name"},
		{"invalid UTF-8", "p", profileDoc("\xff"), fleet.CodeInvalid, "body"},
		{"terminal escape in the body", "p", profileDoc("\x1b]52;c;aGk=\x07b"), fleet.CodeInvalid, "body"},
		{"lone carriage return in the body", "p", profileDoc("safe\rb"), fleet.CodeInvalid, "body"},
		{"bidi override in the body", "p", profileDoc("a\u202eb"), fleet.CodeInvalid, "body"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			before := e.snapshotContainers(store.Profiles)
			_, err := e.c.PutProfile(e.ctx, catalog.PutProfileRequest{ProductID: prod, Name: tt.profile, Document: tt.doc})
			requireCode(t, err, tt.code, tt.field)
			require.Equal(t, before, e.snapshotContainers(store.Profiles))
		})
	}
}

// TestSubmitPersona: a job naming a persona snapshots its latest version:
// capabilities merged, defaults where the manifest is silent, the body
// carried. A later version changes neither the job nor its re-runs.
func TestSubmitPersona(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putProfile("backend", profileDoc("Version one.\n", "capabilities: [has:git, gpu:a100]", "engine: codex", "budget: {wall: 1h, usd: 2}"))
	j := e.submit("persona: backend", "budget: {usd: 5}")
	require.Equal(t, []string{"engine:claude", "has:git", "gpu:a100"}, j.Capabilities, "manifest's first; its engine kept")
	require.Equal(t, fleet.Budget{Wall: fleet.Duration(time.Hour), USD: 5}, j.Budget, "the profile fills only what the manifest left out")
	require.Equal(t, &fleet.JobProfile{Name: "backend", Version: 1, Capabilities: []string{"has:git", "gpu:a100"}, Body: "Version one.\n"}, j.Profile)

	noEngine := e.submit("persona: backend", "capabilities: [os:linux]")
	require.Equal(t, []string{"os:linux", "has:git", "gpu:a100", "engine:codex"}, noEngine.Capabilities)

	e.putProfile("backend", profileDoc("Version two.\n"))
	e.factory("f1", caps("os:linux", "engine:claude", "has:git", "gpu:a100"))
	cl := e.claim("f1")
	require.Equal(t, j.ID, cl.Job.ID)
	require.Equal(t, int64(1), cl.Job.Profile.Version)
	require.Equal(t, "Version one.\n", cl.Job.Profile.Body)
	_, err := e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "flaky", Retryable: true})
	require.NoError(t, err)
	// Past the first retry backoff (30s), within StaleAfter: a factory
	// silent longer is stale or down, and claims nothing.
	e.clock.Advance(time.Minute)
	again := e.claim("f1")
	require.Equal(t, j.ID, again.Job.ID)
	require.Equal(t, j.Profile, again.Job.Profile, "a retry runs the version it was submitted with")

	// An operator's requeue of a failed job re-runs it under v1 too.
	_, err = e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: again.LeaseEpoch, Reason: "broken", Retryable: false})
	require.NoError(t, err)
	requeued, err := e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionRequeue, "try again")
	require.NoError(t, err)
	require.Equal(t, fleet.StageQueued, requeued.Stage)
	third := e.claim("f1")
	require.Equal(t, j.ID, third.Job.ID)
	require.Equal(t, j.Profile, third.Job.Profile, "a requeue runs the version it was submitted with")
}

// TestSubmitUnknownPersona: 400 naming persona, nothing stored.
func TestSubmitUnknownPersona(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putProfile("backend", profileDoc("b"))
	before := e.snapshotContainers(store.Jobs, store.Events)
	_, _, err := e.c.Submit(e.ctx, prod, manifest("persona: frontend"))
	requireCode(t, err, fleet.CodeInvalid, "persona")
	require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Events))
	// A profile of another product is not this product's.
	_, err = e.c.PutProfile(e.ctx, catalog.PutProfileRequest{ProductID: "p2", Name: "frontend", Document: profileDoc("b")})
	require.NoError(t, err)
	_, _, err = e.c.Submit(e.ctx, prod, manifest("persona: frontend"))
	requireCode(t, err, fleet.CodeInvalid, "persona")
}

// TestSubmitPersonaTooManyCapabilities: a merge past the bound is 400
// naming persona.
func TestSubmitPersonaTooManyCapabilities(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	list := make([]string, fleet.MaxCapabilities)
	for i := range list {
		list[i] = fmt.Sprintf("has:c%d", i)
	}
	e.putProfile("wide", profileDoc("b", "capabilities: ["+strings.Join(list, ", ")+"]"))
	_, _, err := e.c.Submit(e.ctx, prod, manifest("persona: wide"))
	requireCode(t, err, fleet.CodeInvalid, "persona")
}

// TestExplainProfileCapabilities: /explain names the profile's
// capabilities, and one no factory has makes the job unroutable.
func TestExplainProfileCapabilities(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	e.putProfile("gpu", profileDoc("b", "capabilities: [gpu:a100]"))
	j := e.submit("persona: gpu")
	ex, err := e.c.Explain(e.ctx, nil, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, &explain.ProfileExplanation{Name: "gpu", Version: 1, Capabilities: []string{"gpu:a100"}}, ex.Profile)
	require.False(t, ex.Schedule.Routable)
	require.Contains(t, ex.Schedule.Reason, "gpu:a100")
	cl, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, cl, "no factory has gpu:a100")

	plain := e.submit()
	ex, err = e.c.Explain(e.ctx, nil, prod, plain.ID)
	require.NoError(t, err)
	require.Nil(t, ex.Profile)
}
