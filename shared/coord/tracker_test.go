package coord_test

import (
	"testing"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

func ingestReq(rev int64, lines ...string) echo.IngestRequest {
	return echo.IngestRequest{ProductID: prod, Ref: fleet.TrackerRef{Source: "jira", ItemID: "PROJ-4711", Revision: rev}, Manifest: manifest(lines...)}
}

// TestIngest: an item becomes one job carrying its reference; the same item
// again is that job; a higher revision before start replaces its manifest
// (one event, a fresh dispatch decision), a lower or equal one changes
// nothing, and a higher one after the job was assigned is a conflict.
func TestIngest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j, out, err := e.c.Ingest(e.ctx, ingestReq(1, "title: first"))
	require.NoError(t, err)
	require.Equal(t, echo.IngestCreated, out)
	require.Equal(t, &fleet.TrackerRef{Source: "jira", ItemID: "PROJ-4711", Revision: 1}, j.Tracker)
	require.Equal(t, "tracker:jira:PROJ-4711", j.IdempotencyKey)
	require.Equal(t, j, e.job(j.ID))

	again, out, err := e.c.Ingest(e.ctx, ingestReq(1, "title: first"))
	require.NoError(t, err)
	require.Equal(t, echo.IngestUnchanged, out)
	require.Equal(t, j.ID, again.ID)

	// The same key by plain submit is the same job: one rule.
	sub, created, err := e.c.Submit(e.ctx, prod, manifest("idempotencyKey: tracker:jira:PROJ-4711"))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, j.ID, sub.ID)

	up, out, err := e.c.Ingest(e.ctx, ingestReq(3, "title: third", "priority: high", "capabilities: [engine:codex]"))
	require.NoError(t, err)
	require.Equal(t, echo.IngestUpdated, out)
	require.Equal(t, j.ID, up.ID)
	require.Equal(t, "third", up.Title)
	require.Equal(t, fleet.PriorityHigh, up.Priority)
	require.Equal(t, []string{"engine:codex"}, up.Capabilities)
	require.Equal(t, int64(3), up.Tracker.Revision)
	require.Equal(t, up, e.job(j.ID))
	evs := e.events(j.ID)
	require.Equal(t, []string{"submitted", "tracker_updated"}, eventTypes(evs))
	require.Contains(t, evs[1].Message, "revision 3 replaced revision 1")

	older, out, err := e.c.Ingest(e.ctx, ingestReq(2, "title: second"))
	require.NoError(t, err)
	require.Equal(t, echo.IngestUnchanged, out)
	require.Equal(t, "third", older.Title)
	require.Len(t, e.events(j.ID), 2, "an older revision writes nothing")

	// Assigned once: started, whatever the stage is now.
	e.factory("f1", caps("engine:codex"))
	cl := e.claim("f1")
	require.Equal(t, j.ID, cl.Job.ID)
	_, _, err = e.c.Ingest(e.ctx, ingestReq(4, "title: fourth"))
	requireCode(t, err, fleet.CodeConflict, "revision")
	require.ErrorContains(t, err, "has started")
	require.Equal(t, "third", e.job(j.ID).Title)
}

// TestIngestBadInput: every bad field is named and nothing is written.
func TestIngestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := ingestReq(1)
	for _, tc := range []struct {
		name  string
		edit  func(r *echo.IngestRequest)
		field string
	}{
		{"no source", func(r *echo.IngestRequest) { r.Ref.Source = "" }, "source"},
		{"source with colon", func(r *echo.IngestRequest) { r.Ref.Source = "a:b" }, "source"},
		{"no item", func(r *echo.IngestRequest) { r.Ref.ItemID = "" }, "itemId"},
		{"item on two lines", func(r *echo.IngestRequest) { r.Ref.ItemID = "a\nb" }, "itemId"},
		{"zero revision", func(r *echo.IngestRequest) { r.Ref.Revision = 0 }, "revision"},
		{"own key", func(r *echo.IngestRequest) { r.Manifest = manifest("idempotencyKey: mine") }, "idempotencyKey"},
		{"bad manifest", func(r *echo.IngestRequest) { r.Manifest = manifest("priority: urgent") }, "priority"},
		{"parent", func(r *echo.IngestRequest) { r.Manifest = manifest("parentId: j1") }, "parentId"},
	} {
		req := good
		tc.edit(&req)
		_, _, err := e.c.Ingest(e.ctx, req)
		requireCode(t, err, fleet.CodeInvalid, tc.field)
	}
	jobs, _, err := e.c.ListJobs(e.ctx, prod, "", 0, "")
	require.NoError(t, err)
	require.Empty(t, jobs)

	// An update refused for its manifest leaves the job as it was.
	j, _, err := e.c.Ingest(e.ctx, ingestReq(1))
	require.NoError(t, err)
	_, _, err = e.c.Ingest(e.ctx, ingestReq(2, "repo: elsewhere"))
	requireCode(t, err, fleet.CodeRepoNotOwned, "repo")
	require.Equal(t, j, e.job(j.ID))
}
