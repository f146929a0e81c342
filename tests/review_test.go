package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReviewGateOnTheStack: a gated job (quorum 2 of alice, bob, carol)
// delivered by a real factory waits in review: the operator cannot ship it
// past the gate, alice twice is not a quorum, a vote on another head is
// 409, carol's rejection sends it back with her comment, which the next
// engine run reads from $FLEET_JOB_REVIEW_FEEDBACK_FILE; the old head's
// votes no longer count, and alice and bob on the new head pass it to
// testing.
func TestReviewGateOnTheStack(t *testing.T) {
	t.Parallel()
	admin, alice, bob, carol := randomToken("adm_"), randomToken("alice_"), randomToken("bob_"), randomToken("carol_")
	s := startStack(t, "FLEET_OPERATOR_TOKEN=admin:"+admin+",alice:"+alice+",bob:"+bob+",carol:"+carol)
	s.Token = admin
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `cp "$FLEET_JOB_REVIEW_FEEDBACK_FILE" feedback.txt
echo "attempt $FLEET_JOB_LEASE_EPOCH" >> work.txt`)
	id := s.Submit("demo", "---\ntitle: gated\nrepo: app\ncapabilities: [engine:fake]\nreview: {reviewers: [alice, bob, carol], quorum: 2}\n---\nDo it well.\n")
	startFactory(t, s, "fa", "demo", 1, repo, eng)

	headOf := func() string {
		j := facWaitStage(t, s, "demo", id, "review", 60*time.Second)
		return j["review"].(map[string]any)["head"].(string)
	}
	vote := func(token string, approve bool, head, comment string) Response {
		return s.As(token, http.MethodPost, "/jobs/"+id+"/review", "demo", map[string]any{"approve": approve, "head": head, "comment": comment})
	}
	head1 := headOf()
	require.Equal(t, "aq/job/"+id+"@"+repo.Ref(t, "aq/job/"+id), head1)
	require.Equal(t, "", repo.Show(t, "aq/job/"+id, "feedback.txt"), "no feedback on the first attempt")

	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/ship", "demo", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, "no way around the gate: %s", r.Body)
	require.Equal(t, http.StatusOK, vote(alice, true, head1, "").Status)
	require.Equal(t, http.StatusOK, vote(alice, true, head1, "still fine").Status)
	require.Equal(t, "review", facStage(t, s, "demo", id), "the same reviewer twice is no quorum")
	r = vote(bob, true, "aq/job/"+id+"@0000000", "")
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Equal(t, http.StatusForbidden, vote(admin, true, head1, "").Status, "admin is no reviewer")

	r = vote(carol, false, head1, "please rename the flag")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, float64(0), r.Map(t)["attempts"], "a rejection spends no attempt")
	head2 := headOf()
	require.NotEqual(t, head1, head2)
	require.Equal(t, "please rename the flag", repo.Show(t, "aq/job/"+id, "feedback.txt"), "the next engine run read the feedback")

	require.Equal(t, http.StatusConflict, vote(bob, true, head1, "").Status, "a vote on the old head")
	require.Equal(t, http.StatusOK, vote(alice, true, head2, "").Status)
	r = vote(bob, true, head2, "")
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "testing", r.Map(t)["stage"])

	r = s.Op(http.MethodGet, "/jobs/"+id+"/explain", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status)
	rv := r.Map(t)["review"].(map[string]any)
	require.Equal(t, []any{"carol"}, rv["awaiting"])
	require.Equal(t, float64(2), rv["approvals"])
	require.Equal(t, http.StatusOK, s.Op(http.MethodPost, "/jobs/"+id+"/actions/ship", "demo", map[string]any{}).Status)
}

// TestReviewGateHolderCannotWeakenOnTheStack is issue 23 item 5 against the
// real binary: the holder of a job gated on two of alice and bob asks for
// a review by opa alone (reviewers [opa], quorum 1) and is refused with 403
// naming reviewers; delivered with its head only, opa's approval counts for
// nothing and alice's alone does not pass the gate.
func TestReviewGateHolderCannotWeakenOnTheStack(t *testing.T) {
	t.Parallel()
	admin, alice, opa := randomToken("adm_"), randomToken("alice_"), randomToken("opa_")
	s := startStack(t, "FLEET_OPERATOR_TOKEN=admin:"+admin+",alice:"+alice+",bob:"+randomToken("bob_")+",opa:"+opa)
	s.Token = admin
	s.Product("demo", "r1")
	ft := s.Factory("f1", "demo", 1, []string{"os:linux"}, []string{"r1"})
	id := s.Submit("demo", "---\ntitle: gated\nrepo: r1\ncapabilities: [os:linux]\nreview: {reviewers: [alice, bob], quorum: 2}\n---\nDo it.\n")
	r := s.As(ft, http.MethodPost, "/claim", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	epoch := r.Map(t)["leaseEpoch"]
	r = s.As(ft, http.MethodPatch, "/jobs/"+id, "demo", map[string]any{"stage": "building", "leaseEpoch": epoch})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	head := "aq/job/" + id + "@1"

	r = s.As(ft, http.MethodPost, "/jobs/"+id+"/review/request", "demo", map[string]any{"leaseEpoch": epoch, "head": head, "reviewers": []string{"opa"}, "quorum": 1})
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Equal(t, "reviewers", r.Map(t)["error"].(map[string]any)["field"])
	require.Equal(t, "building", facStage(t, s, "demo", id), "a refused request changes nothing")

	r = s.As(ft, http.MethodPost, "/jobs/"+id+"/review/request", "demo", map[string]any{"leaseEpoch": epoch, "head": head})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	vote := map[string]any{"approve": true, "head": head}
	require.Equal(t, http.StatusForbidden, s.As(opa, http.MethodPost, "/jobs/"+id+"/review", "demo", vote).Status, "opa is no reviewer")
	r = s.As(alice, http.MethodPost, "/jobs/"+id+"/review", "demo", vote)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, "review", r.Map(t)["stage"], "one approval is not the manifest's quorum")
}
