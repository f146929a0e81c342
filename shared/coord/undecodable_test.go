package coord_test

import (
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/pulls"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// writeUndecodableJob writes a job document of product p1 straight into
// the SQLite file's jobs table, past the store's checks, as a hand edit or
// a version with other field types would leave it: valid JSON that names
// stage and the filter fields, but whose attempts is a string, so it does
// not decode into a fleet.Job. fields are added to it (stage, times).
func writeUndecodableJob(t *testing.T, e *env, id string, fields map[string]any) {
	t.Helper()
	doc := map[string]any{"id": id, "productId": prod, "repo": repo, "priority": "normal", "targetFactoryId": "", "attempts": "three"}
	for k, v := range fields {
		doc[k] = v
	}
	writeRaw(t, e, store.Jobs, prod, id, doc)
	_, err := e.c.GetJob(e.ctx, prod, id)
	require.ErrorContains(t, err, "decode job "+id, "the document written must not decode")
}

// writeRaw inserts doc into container's table of the env's SQLite file
// with its own connection, bypassing the store.
func writeRaw(t *testing.T, e *env, container, pk, id string, doc map[string]any) {
	t.Helper()
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", "file:"+e.path+"?_busy_timeout=5000")
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	_, err = db.ExecContext(e.ctx, `INSERT INTO "`+container+`" (pk, id, rev, body)
		VALUES (?, ?, (SELECT v + 1 FROM store_seq WHERE one = 1), ?)`, pk, id, string(body))
	require.NoError(t, err)
}

// TestUndecodableJobDoesNotStallSweeps: a job document that does not
// decode, stored before the jobs a sweep or a claim has to reach (a
// lower rowid, so first in every page, with the page shrunk to one job),
// is skipped, logged and counted; the sweep goes on past it and does its
// work on the others, tick after tick. A decision that nothing is left
// counts it as present: the reaper, whose only undecodable lease sits
// before a live one, does not mark itself quiet and reaps that lease once
// it expires.
func TestUndecodableJobDoesNotStallSweeps(t *testing.T) {
	t.Parallel()
	past := t0.Add(-time.Hour).Format(time.RFC3339)
	for _, tc := range []struct {
		name string
		// stage is the undecodable document's stage (its lease expired
		// an hour ago when it holds one).
		stage fleet.Stage
		run   func(t *testing.T, e *env, pub *gcPublisher)
	}{
		{"reaper: a lease behind it expires", fleet.StageAssigned, func(t *testing.T, e *env, _ *gcPublisher) {
			e.submit()
			cl := e.claim("f1")
			// The lease is live: nothing to reap, but a lease exists, so
			// the reaper must not mark itself quiet.
			n, err := e.c.Reap(e.ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			e.clock.Advance(coord.DefaultLeaseTTL + time.Second)
			n, err = e.c.Reap(e.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n, "the expired lease behind the undecodable one is reaped")
			got := e.job(cl.Job.ID)
			require.Equal(t, fleet.StageQueued, got.Stage)
			require.Equal(t, cl.LeaseEpoch+1, got.LeaseEpoch)
		}},
		{"redispatch: the queue behind it is routed", fleet.StageQueued, func(t *testing.T, e *env, pub *gcPublisher) {
			j := e.submit() // no change feed here: only the sweep routes it
			routed := 0
			for range 2 { // a page of one: the undecodable job, then j
				n, err := e.c.Redispatch(e.ctx)
				require.NoError(t, err)
				routed += n
			}
			require.Equal(t, 1, routed)
			require.Equal(t, "f1", e.job(j.ID).TargetFactoryID)
			require.Len(t, pub.sent(), 1)
		}},
		{"redispatch: a blocked job it cannot read", fleet.StageBlocked, func(t *testing.T, e *env, _ *gcPublisher) {
			j := e.submit()
			n, err := e.c.Redispatch(e.ctx)
			require.NoError(t, err, "the pass over blocked jobs skips the undecodable one")
			require.Equal(t, 1, n)
			require.Equal(t, "f1", e.job(j.ID).TargetFactoryID)
		}},
		{"gcsweep: the ended jobs beside it are sent", fleet.StageShipped, func(t *testing.T, e *env, pub *gcPublisher) {
			j := e.submit()
			cl := e.claim("f1")
			for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
				_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: st, LeaseEpoch: cl.LeaseEpoch})
				require.NoError(t, err)
			}
			for i := range 2 {
				n, err := e.c.GCSweep(e.ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n, "tick %d: the plan that skipped a job is never taken as whole", i)
			}
			require.Len(t, pub.gcs, 2)
			require.Equal(t, map[string][]string{repo: {j.ID}}, pub.gcs[1].Repos)
		}},
		{"fleet change: an unroutable job behind it is routed", fleet.StageQueued, func(t *testing.T, e *env, _ *gcPublisher) {
			j := e.submit("capabilities: [engine:codex]") // no factory has it
			require.Empty(t, e.job(j.ID).TargetFactoryID)
			e.factory("f2", caps("os:linux", "engine:codex", "has:git")) // the fleet changed: waiting jobs are routed
			require.Equal(t, "f2", e.job(j.ID).TargetFactoryID)
		}},
		{"poll claim: the queue behind it is claimed", fleet.StageQueued, func(t *testing.T, e *env, _ *gcPublisher) {
			j := e.submit()
			e.factory("scoped", products(prod))
			for _, f := range []string{"scoped", "f1"} { // a token of p1 pages the partition; an unscoped one reads across
				cl, err := e.c.Claim(e.ctx, e.as(f))
				require.NoError(t, err, "factory %s", f)
				if f == "scoped" {
					require.NotNil(t, cl)
					require.Equal(t, j.ID, cl.Job.ID)
					continue
				}
				require.Nil(t, cl, "the one decodable job is taken")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pub := &gcPublisher{}
			// feedConfig: the sweeps trust their quiet marks, so a wrong
			// mark would hide work.
			e := newEnv(t, withConfig(feedConfig), withPublisher(pub))
			coord.SetSweepPage(e.c, 1)
			e.factory("f1")
			fields := map[string]any{"stage": tc.stage}
			if tc.stage.Leased() {
				fields["holderFactoryId"], fields["leaseExpiresAt"] = "gone", past
			}
			writeUndecodableJob(t, e, "bad1", fields)
			tc.run(t, e, pub)
			require.Positive(t, e.c.Stats().UndecodableDocs, "the skipped document is counted")
		})
	}
}

// TestUndecodableJobDoesNotStallTheForgeSweep: the forge sweep re-drives a
// due pull request sync past a job document that does not decode and
// also says forgeDue.
func TestUndecodableJobDoesNotStallTheForgeSweep(t *testing.T) {
	t.Parallel()
	e, _, up := flakyForgeEnv(t, fleet.ForgeConfig{})
	writeUndecodableJob(t, e, "bad1", map[string]any{"stage": fleet.StageReview, "forgeDue": true})
	up(false)
	j := e.submit()
	require.True(t, e.deliverPR(j.ID, "aq/job/"+j.ID+"@1").ForgeDue, "the forge was down")

	up(true)
	e.clock.Advance(time.Hour)
	n, err := e.c.ForgeSweep(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := e.job(j.ID)
	require.False(t, got.ForgeDue)
	require.Equal(t, 1, got.PullRequest.Number)
	require.Positive(t, e.c.Stats().UndecodableDocs)
}

// TestUndecodableEchoStateDoesNotStallTheEchoSweep: the echo sweep
// delivers a due job's events past an open echo state that does not
// decode.
func TestUndecodableEchoStateDoesNotStallTheEchoSweep(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	writeRaw(t, e.env, store.Echoes, "bad1", "bad1", map[string]any{"id": "bad1", "jobId": "bad1", "productId": prod, "open": true, "attempts": "three"})
	e.hook.setDown(hookURL, true)
	j := e.ingest("PROJ-9")
	require.Zero(t, e.feed(j.ID), "the webhook is down: the sweep retries")

	e.hook.setDown(hookURL, false)
	e.clock.Advance(time.Minute)
	require.Equal(t, 1, e.sweep())
	require.Equal(t, []int64{1}, e.hook.seqs(t, j.ID))
	require.Positive(t, e.c.Stats().UndecodableDocs)
}

// TestUndecodableJobLeavesTheListWhole: a product's job list (the API's
// GET /fleet/jobs, the console's jobs page) leaves out a job document that
// does not decode, logged and counted, and lists the others, on the page
// the document is on and after it. Before, the whole list failed.
func TestUndecodableJobLeavesTheListWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	older := e.submit()
	e.clock.Advance(time.Second) // ids begin with their creation time
	newer := e.submit()
	// Between the two in the list's order (newest first, by id).
	writeUndecodableJob(t, e, older.ID+"z", map[string]any{"stage": fleet.StageQueued})

	jobs, next, err := e.c.ListJobs(e.ctx, prod, "", 10, "")
	require.NoError(t, err)
	require.Empty(t, next)
	require.Equal(t, []string{newer.ID, older.ID}, jobIDs(jobs))
	require.Positive(t, e.c.Stats().UndecodableDocs, "the skipped document is counted")

	var got []string
	cursor := ""
	for range 5 { // pages of one: the undecodable document's page is empty, not an error
		jobs, cursor, err = e.c.ListJobs(e.ctx, prod, fleet.StageQueued, 1, cursor)
		require.NoError(t, err)
		got = append(got, jobIDs(jobs)...)
		if cursor == "" {
			break
		}
	}
	require.Equal(t, []string{newer.ID, older.ID}, got)
}

func jobIDs(jobs []*fleet.Job) []string {
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestUndecodableDocumentsLeaveTheFleetWorking: a factory document that
// does not decode, and a job whose lease fields do not (what the seat
// count reads of every leased job on its first refresh, then of every
// changed job from the change feed), are left out, logged and counted:
// the factory list the scheduler, the fleet map and the claims read is
// the others', and a job submitted after them is dispatched. Before, every
// read of the factory list failed on them, and with it every dispatch.
func TestUndecodableDocumentsLeaveTheFleetWorking(t *testing.T) {
	t.Parallel()
	badLease := func(t *testing.T, e *env) {
		writeRaw(t, e, store.Jobs, prod, "jbad1", map[string]any{"id": "jbad1", "productId": prod, "stage": fleet.StageAssigned,
			"holderFactoryId": "f1", "leaseExpiresAt": "soon"})
	}
	for name, tc := range map[string]struct {
		write func(t *testing.T, e *env)
		// fromFeed: the list was read before the write, so the next
		// refresh reads the jobs' change feed instead of every lease.
		fromFeed bool
	}{
		"a factory": {write: func(t *testing.T, e *env) {
			writeRaw(t, e, store.Factories, "bad1", "bad1", map[string]any{"id": "bad1", "seatLimit": "four"})
		}},
		"a job's lease, every lease read": {write: badLease},
		"a job's lease, in the feed": {write: func(t *testing.T, e *env) {
			// Through the store, so that its change feed carries it.
			_, err := e.raw.Upsert(e.ctx, store.Jobs, prod, "jbad1", []byte(`{"id":"jbad1","productId":"`+prod+`","stage":"assigned","holderFactoryId":"f1","leaseExpiresAt":"soon"}`))
			require.NoError(t, err)
		}, fromFeed: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, _ := dispatchEnv(t)
			e.factory("f1")
			// dispatched reads the factory list as the scheduler does (with
			// its seat counts) and dispatches a new job.
			dispatched := func() {
				t.Helper()
				e.clock.Advance(2 * time.Second) // past the factory list's TTL (1 s): it is read again
				j := e.submit()
				_, err := e.c.DispatchChanged(e.ctx, onlyJob(e.feed("").Items, j.ID))
				require.NoError(t, err)
				require.Equal(t, "f1", e.job(j.ID).TargetFactoryID)
			}
			if tc.fromFeed {
				dispatched()
			}
			tc.write(t, e)
			dispatched()
			fs, err := e.c.ListFactories(e.ctx, "")
			require.NoError(t, err)
			require.Len(t, fs, 1)
			require.Equal(t, "f1", fs[0].ID)
			require.Positive(t, e.c.Stats().UndecodableDocs, "the skipped document is counted")
		})
	}
}

// TestUndecodableDocumentsLeaveListsWhole: each listing a person or the
// console reads leaves out a document that does not decode (logged and
// counted) and lists the others, where one such document used to fail the
// whole list: a job's runs and artifacts, a product's profiles, the repos,
// the alerts of the metrics. A field of the wrong type stands for a hand
// edit or a version that wrote other types.
func TestUndecodableDocumentsLeaveListsWhole(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		container string
		pk        func(j *fleet.Job) string
		extra     map[string]any
		list      func(e *env, j *fleet.Job) (int, error)
	}{
		"a job's runs": {store.Runs, func(j *fleet.Job) string { return j.ID }, nil, func(e *env, j *fleet.Job) (int, error) {
			rs, err := e.c.Runs(e.ctx, prod, j.ID)
			return len(rs), err
		}},
		"a job's artifacts": {store.Artifacts, func(j *fleet.Job) string { return j.ID }, nil, func(e *env, j *fleet.Job) (int, error) {
			as, err := e.c.Artifacts(e.ctx, prod, j.ID)
			return len(as), err
		}},
		"a product's profiles": {store.Profiles, func(*fleet.Job) string { return prod }, map[string]any{"kind": "latest"}, func(e *env, _ *fleet.Job) (int, error) {
			ps, err := e.c.ListProfiles(e.ctx, prod)
			return len(ps), err
		}},
		"the repos": {store.Products, func(*fleet.Job) string { return "p2" }, nil, func(e *env, _ *fleet.Job) (int, error) {
			rs, err := e.c.Repos(e.ctx, nil, "")
			return len(rs), err
		}},
		"the alerts": {store.Budgets, func(*fleet.Job) string { return prod }, nil, func(e *env, _ *fleet.Job) (int, error) {
			m, err := e.c.Metrics(e.ctx, prod)
			if err != nil {
				return 0, err
			}
			return len(m.Alerts), nil
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			j := e.submit()
			before, err := tc.list(e, j)
			require.NoError(t, err)
			doc := map[string]any{"id": 5} // a number where every document has a string
			for k, v := range tc.extra {
				doc[k] = v
			}
			writeRaw(t, e, tc.container, tc.pk(j), "bad1", doc)
			after, err := tc.list(e, j)
			require.NoError(t, err)
			require.Equal(t, before, after, "the others are listed as before")
			require.Positive(t, e.c.Stats().UndecodableDocs, "the skipped document is counted")
		})
	}
}

// TestUndecodableProductDoesNotStopTheForgeWebhooks: the products a forge
// webhook is matched against (every product, read together) leave out one
// that does not decode, logged and counted: a webhook for another
// product's pull request still applies. Before, every webhook failed.
func TestUndecodableProductDoesNotStopTheForgeWebhooks(t *testing.T) {
	t.Parallel()
	e, double := forgeEnv(t, fleet.ForgeConfig{})
	writeRaw(t, e, store.Products, "bad1", "bad1", map[string]any{"id": 5})
	j := e.submit()
	e.deliverPR(j.ID, "aq/job/"+j.ID+"@1")
	out, why := e.hook(double.Closed(1, false))
	require.Equal(t, pulls.Applied, out, why)
	require.Equal(t, fleet.StageCancelled, e.job(j.ID).Stage)
	require.Positive(t, e.c.Stats().UndecodableDocs, "the skipped document is counted")
}

// TestUndecodableDocumentAlert: the metrics pass over an active job that
// does not decode (before, they failed whole, and with them the console's
// fleet map and alerts page), and the fleet-wide metrics carry an alert
// naming the document; a product's metrics do not, as the document may be
// any product's.
func TestUndecodableDocumentAlert(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.submit()
	undecodable := func(m *coord.Metrics) []fleet.Alert {
		var out []fleet.Alert
		for _, a := range m.Alerts {
			if a.Kind == fleet.AlertUndecodable {
				out = append(out, a)
			}
		}
		return out
	}
	m, err := e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Empty(t, undecodable(m))

	writeUndecodableJob(t, e, "bad1", map[string]any{"stage": fleet.StageQueued})
	e.clock.Advance(time.Minute)
	m, err = e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Equal(t, 1, m.Jobs[string(fleet.StageQueued)], "the job that decodes is counted")
	alerts := undecodable(m)
	require.Len(t, alerts, 1)
	require.Equal(t, store.Jobs+"/bad1", alerts[0].Subject)
	require.Equal(t, fleet.SeverityWarning, alerts[0].Severity)
	require.Contains(t, alerts[0].Message, "attempts")
	require.Equal(t, e.clock.Now().UTC(), alerts[0].Since.UTC())

	m, err = e.c.Metrics(e.ctx, prod)
	require.NoError(t, err)
	require.Empty(t, undecodable(m), "a product's metrics do not name another's documents")

	// Deleted: nothing passes over it any more, and a day later the
	// alert has cleared.
	require.NoError(t, e.raw.Delete(e.ctx, store.Jobs, prod, "bad1", ""))
	e.clock.Advance(coord.DeadLetterAlertWindow - time.Second)
	m, err = e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Len(t, undecodable(m), 1, "within a day of the last time")
	e.clock.Advance(time.Second)
	m, err = e.c.Metrics(e.ctx, "")
	require.NoError(t, err)
	require.Empty(t, undecodable(m))
}

// TestUndecodableJobLeavesDecisionsWorking: the decisions that read a set
// of jobs by a filter (the leased jobs a preemption or a new seat cap
// counts, a product's blocked jobs when a dependency ships, a tree's
// members, the jobs a raised cap releases, a retried claim's lease) pass
// over a job document that does not decode, logged and counted, and
// decide on the others. Before, each failed whole: one such document
// stopped every critical job's preemption, a product's seat cap, its
// dependants and the release of its held jobs. The prune, which must never
// take a factory that may hold a lease, counts it as one.
func TestUndecodableJobLeavesDecisionsWorking(t *testing.T) {
	t.Parallel()
	future := t0.Add(time.Hour).Format(time.RFC3339)
	bad := func(t *testing.T, e *env, fields map[string]any) {
		t.Helper()
		writeUndecodableJob(t, e, "bad1", fields)
	}
	leasedTo := func(f string) map[string]any {
		return map[string]any{"stage": fleet.StageAssigned, "holderFactoryId": f, "leaseExpiresAt": future}
	}
	for name, run := range map[string]func(t *testing.T) *env{
		"preemption": func(t *testing.T) *env {
			e, _, cls := fullFleet(t, coord.Config{}, fleet.PriorityLow, fleet.PriorityNormal)
			bad(t, e, leasedTo("f1"))
			e.submit("priority: critical")
			_, err := e.c.Redispatch(e.ctx)
			require.NoError(t, err)
			require.True(t, e.job(cls[0].Job.ID).PreemptRequested, "the low-priority run is asked to stop")
			return e
		},
		"a seat cap set while jobs run": func(t *testing.T) *env {
			e := newEnv(t)
			e.factory("f1")
			e.submit()
			e.claim("f1")
			bad(t, e, leasedTo("f1"))
			require.Equal(t, 1, e.capSeats(2).Running(), "the run that decodes is counted")
			return e
		},
		"dependants settle": func(t *testing.T) *env {
			e := newEnv(t)
			e.factory("f1")
			dep := e.submit("title: dep", "priority: high")
			waiter := e.submit("deps: ["+dep.ID+"]", "title: waiter")
			bad(t, e, map[string]any{"stage": fleet.StageBlocked})
			e.endDep(dep.ID, fleet.StageShipped)
			require.Equal(t, fleet.StageQueued, e.job(waiter.ID).Stage)
			return e
		},
		"a tree's view": func(t *testing.T) *env {
			e := newEnv(t)
			e.factory("f1")
			root := e.submit("title: root")
			bad(t, e, map[string]any{"stage": fleet.StageQueued, "rootId": root.ID})
			v, err := e.c.DAG(e.ctx, prod, root.ID)
			require.NoError(t, err)
			require.Len(t, v.Nodes, 1)
			require.Equal(t, root.ID, v.Nodes[0].ID)
			return e
		},
		"a raised cap releases the held jobs": func(t *testing.T) *env {
			e, pub := dispatchEnv(t)
			e.factory("f1")
			e.capSeats(1)
			a, b := e.submit(), e.submit()
			_, err := e.c.DispatchChanged(e.ctx, e.feed("").Items)
			require.NoError(t, err)
			epochs := map[string]int64{}
			for _, m := range pub.sent() {
				epochs[m.JobID] = m.DispatchEpoch
			}
			_, err = e.c.Accept(e.ctx, "f1", prod, a.ID, epochs[a.ID])
			require.NoError(t, err)
			_, err = e.c.Accept(e.ctx, "f1", prod, b.ID, epochs[b.ID])
			requireCode(t, err, fleet.CodeConflict, "")
			require.Empty(t, e.job(b.ID).TargetFactoryID, "held by the cap")
			bad(t, e, map[string]any{"stage": fleet.StageQueued})
			e.capSeats(2)
			require.Equal(t, "f1", e.job(b.ID).TargetFactoryID, "routed at once")
			return e
		},
		"a retried claim": func(t *testing.T) *env {
			e := newEnv(t)
			e.factory("f1")
			j := e.submit()
			req := e.as("f1")
			req.RequestID = "claim-0001"
			first, err := e.c.Claim(e.ctx, req)
			require.NoError(t, err)
			bad(t, e, map[string]any{"stage": fleet.StageAssigned, "holderFactoryId": "f1", "claimRequestId": req.RequestID, "leaseExpiresAt": future})
			again, err := e.c.Claim(e.ctx, req)
			require.NoError(t, err)
			require.NotNil(t, again)
			require.Equal(t, j.ID, again.Job.ID)
			require.Equal(t, first.LeaseEpoch, again.LeaseEpoch)
			return e
		},
		"the prune counts it as a lease": func(t *testing.T) *env {
			e := newEnv(t)
			e.factory("busy")
			e.factory("gone")
			bad(t, e, leasedTo("busy"))
			e.clock.Advance(coord.DefaultPruneAfter)
			require.Equal(t, 1, e.prune())
			require.Equal(t, []string{"busy"}, e.factoryIDs())
			return e
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := run(t)
			require.Positive(t, e.c.Stats().UndecodableDocs, "the skipped document is counted")
		})
	}
}

// TestUndecodableEventLeavesTheHistoryWhole: a job's history past its ring
// is read from the events container; an archived event that does not
// decode is left out, logged and counted, and the others are listed.
// Before, the whole history failed, and with it the tracker echo of every
// later event of that job.
func TestUndecodableEventLeavesTheHistoryWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j, epoch := e.runJob()
	const reports = 20
	for i := range reports {
		_, err := e.c.ReportUsage(e.ctx, "f1", prod, j.ID, admission.UsageRequest{LeaseEpoch: epoch, Usage: fleet.Usage{USD: float64(i + 1)}})
		require.NoError(t, err)
	}
	require.Contains(t, e.stored(j.ID), int64(5), "seq 5 is archived")
	_, err := e.raw.Upsert(e.ctx, store.Events, j.ID, fleet.EventID(j.ID, 5), []byte(`{"id":"`+fleet.EventID(j.ID, 5)+`","jobId":"`+j.ID+`","seq":"five"}`))
	require.NoError(t, err)

	evs := e.events(j.ID)
	require.Len(t, evs, 3+reports-1)
	for i, ev := range evs {
		want := int64(i + 1)
		if want >= 5 {
			want++
		}
		require.Equal(t, want, ev.Seq)
	}
	require.Positive(t, e.c.Stats().UndecodableDocs, "the skipped document is counted")
}
