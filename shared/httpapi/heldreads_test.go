package httpapi

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// TestFactoryReadsOnlyHeldJobs (issue 23 item 7): a factory reads the runs,
// events, explanation, DAG and artifacts of a job only while it holds it
// (API.md, Auth); another factory of the same product, and the holder once
// it released the job, get 403 forbidden. The job document itself stays
// readable to both (the factory's branch GC and recovery read jobs it no
// longer holds), and an operator reads everything in its scope.
func TestFactoryReadsOnlyHeldJobs(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	bystander := f.enroll("f3", []string{"p1"}, "r9")
	held := "/api/fleet/jobs/" + w.held
	var a fleet.Artifact
	f.ok(http.StatusCreated, &a, "POST", held+"/artifacts?name=output.log&kind=log&leaseEpoch="+strconv.FormatInt(w.heldEpoch, 10),
		w.f1, "engine output\n", contentType("text/plain"))
	reads := []string{
		held + "/runs", held + "/events", held + "/explain", held + "/dag", held + "/artifacts",
		"/api/fleet/artifacts/" + a.ID, "/api/fleet/artifacts/" + a.ID + "/content",
	}
	refused := func(token, who string) {
		t.Helper()
		for _, path := range reads {
			for _, opts := range [][]reqOption{nil, {product("p1")}} {
				res := f.call("GET", path, token, nil, opts...)
				require.Equal(t, http.StatusForbidden, res.status, "%s: %s: %s", who, path, res)
				require.Equal(t, fleet.CodeForbidden, res.errorOf(t).Code)
			}
		}
		f.ok(http.StatusOK, nil, "GET", held, token, nil)
	}
	for _, path := range reads {
		f.ok(http.StatusOK, nil, "GET", path, w.f1, nil)
	}
	refused(bystander, "another factory of p1")

	f.ok(http.StatusOK, nil, "POST", held+"/lease/release", w.f1, map[string]any{"leaseEpoch": w.heldEpoch})
	refused(w.f1, "the holder after its release")
	for _, path := range reads {
		f.ok(http.StatusOK, nil, "GET", path, p1Token, nil)
	}
}

// TestHeldReadsReadTheJobOnce: the holder check is the job lookup itself.
// A factory of two products asking without x-product-id costs the store
// what an operator of the same products does, on every held read.
func TestHeldReadsReadTheJobOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("other", "r2")
	tok := f.enroll("f1", []string{"p1", "other"}, "r1", "r2")
	j := f.submit("p1", manifest("r1"))
	require.Equal(t, j.ID, f.claim(tok).Job.ID)
	cost := func(path, token string) storecount.Counts {
		t.Helper()
		f.ok(http.StatusOK, nil, "GET", path, token, nil) // fills the token cache
		before := f.counts.Snapshot()
		f.ok(http.StatusOK, nil, "GET", path, token, nil)
		return f.counts.Snapshot().Sub(before)
	}
	held := "/api/fleet/jobs/" + j.ID
	for _, path := range []string{held + "/runs", held + "/events", held + "/explain", held + "/dag", held + "/artifacts"} {
		require.Equal(t, cost(path, multiToken), cost(path, tok), "%s: the factory's store calls (right) against an operator's (left)", path)
	}
}
