package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

const gate3 = "review: {reviewers: [alice, bob, carol], quorum: 2}"

// building has f1 claim job id and start building it.
func (e *env) building(id string) *protocol.Claimed {
	e.t.Helper()
	cl := e.claimJob("f1", id)
	_, err := e.c.Patch(e.ctx, "f1", prod, id, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
	require.NoError(e.t, err)
	return cl
}

// deliver takes a gated job through claim and building to review by f1,
// delivered at head; it returns the head.
func (e *env) deliver(id, head string) string {
	e.t.Helper()
	cl := e.building(id)
	j, err := e.c.Patch(e.ctx, "f1", prod, id, coord.PatchRequest{Stage: fleet.StageReview, LeaseEpoch: cl.LeaseEpoch, Checkpoint: &head})
	require.NoError(e.t, err)
	require.Equal(e.t, head, j.Review.Head, "the delivered checkpoint is the head under review")
	return head
}

func (e *env) vote(id, who string, approve bool, head, comment string) (*fleet.Job, error) {
	return e.c.Vote(e.ctx, prod, id, coord.VoteRequest{Reviewer: who, Approve: approve, Head: head, Comment: comment})
}

// TestReviewQuorum: approvals of two distinct listed reviewers pass the
// gate to testing; the same reviewer twice does not; a reviewer not listed
// is forbidden; a vote on another head is a conflict. The job and /explain
// show who voted and who is awaited, and every vote is an event.
func TestReviewQuorum(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit(gate3)
	require.Equal(t, []string{"alice", "bob", "carol"}, j.Review.Awaiting)
	head := e.deliver(j.ID, "aq/job/"+j.ID+"@c0ffee")

	got, err := e.vote(j.ID, "alice", true, head, "lgtm")
	require.NoError(t, err)
	require.Equal(t, fleet.StageReview, got.Stage)
	got, err = e.vote(j.ID, "alice", true, head, "really lgtm")
	require.NoError(t, err)
	require.Equal(t, fleet.StageReview, got.Stage, "the same reviewer twice is one approval")
	require.Equal(t, 1, got.Review.Approvals)
	require.Equal(t, []string{"bob", "carol"}, got.Review.Awaiting)

	before := e.rawJob(j.ID)
	_, err = e.vote(j.ID, "mallory", true, head, "")
	requireCode(t, err, fleet.CodeForbidden, "")
	_, err = e.vote(j.ID, "bob", true, "aq/job/"+j.ID+"@0ld", "")
	requireCode(t, err, fleet.CodeConflict, "head")
	require.Equal(t, before, e.rawJob(j.ID), "refused votes change nothing")

	ex, err := e.c.Explain(e.ctx, nil, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"bob", "carol"}, ex.Review.Awaiting)
	require.Equal(t, "alice", ex.Review.Votes[0].Reviewer)

	got, err = e.vote(j.ID, "bob", true, head, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageTesting, got.Stage, "quorum of two distinct reviewers")
	evs := e.events(j.ID)
	requireContiguous(t, evs)
	votes := 0
	for _, ev := range evs {
		if ev.Type == fleet.EventReviewVote {
			votes++
			require.Equal(t, fleet.ActorOperator, ev.Actor)
		}
	}
	require.Equal(t, 3, votes, "every accepted vote is an event")
	last := evs[len(evs)-1]
	require.Equal(t, "bob", last.ActorID)
	require.Equal(t, fleet.StageTesting, last.To)
	_, err = e.c.Act(e.ctx, "op", prod, j.ID, coord.ActionShip, "")
	require.NoError(t, err)
}

// TestReviewRejection: a rejection sends the job back to the queue with
// the comment as review.feedback and no attempt spent; the next delivery
// brings a new head with fresh votes. With onReject: fail it fails.
func TestReviewRejection(t *testing.T) {
	t.Parallel()
	t.Run("requeue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.factory("f1")
		j := e.submit(gate3)
		head := e.deliver(j.ID, "aq/job/"+j.ID+"@1")
		_, err := e.vote(j.ID, "carol", true, head, "")
		require.NoError(t, err)
		got, err := e.vote(j.ID, "alice", false, head, "rename the flag")
		require.NoError(t, err)
		require.Equal(t, fleet.StageQueued, got.Stage)
		require.Equal(t, "rename the flag", got.Review.Feedback)
		require.Equal(t, 0, got.Attempts, "a rejection spends no attempt")
		require.Empty(t, got.Review.Votes)
		require.Equal(t, head, got.Checkpoint, "the next attempt starts from the reviewed work")

		head2 := e.deliver(j.ID, "aq/job/"+j.ID+"@2")
		got = e.job(j.ID)
		require.Empty(t, got.Review.Feedback, "consumed by the attempt that delivered the new head")
		_, err = e.vote(j.ID, "alice", true, head, "")
		requireCode(t, err, fleet.CodeConflict, "head")
		_, err = e.vote(j.ID, "alice", true, head2, "")
		require.NoError(t, err)
		got, err = e.vote(j.ID, "bob", true, head2, "")
		require.NoError(t, err)
		require.Equal(t, fleet.StageTesting, got.Stage)
	})
	t.Run("fail", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.factory("f1")
		j := e.submit("review: {reviewers: [alice], onReject: fail}")
		head := e.deliver(j.ID, "aq/job/"+j.ID+"@1")
		got, err := e.vote(j.ID, "alice", false, head, "wrong approach")
		require.NoError(t, err)
		require.Equal(t, fleet.StageFailed, got.Stage)
		require.Contains(t, got.LastFailure.Reason, "wrong approach")
	})
}

// TestReviewRequest: an operator's request changes the gate of a job in
// review (a new head clears the votes, a lower quorum the votes already
// meet passes it); the holder's request delivers its job for review,
// fenced.
func TestReviewRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit(gate3)
	cl := e.building(j.ID)
	head := "aq/job/" + j.ID + "@1"
	_, err := e.c.RequestReview(e.ctx, prod, j.ID, coord.ReviewRequest{Actor: fleet.ActorFactory, ActorID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch + 1), Head: &head})
	requireCode(t, err, fleet.CodeFenced, "")
	got, err := e.c.RequestReview(e.ctx, prod, j.ID, coord.ReviewRequest{Actor: fleet.ActorFactory, ActorID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch), Head: &head})
	require.NoError(t, err)
	require.Equal(t, fleet.StageReview, got.Stage)
	require.Equal(t, head, got.Review.Head)
	_, held := got.Lease()
	require.False(t, held)

	_, err = e.vote(j.ID, "alice", true, head, "")
	require.NoError(t, err)
	head2 := "aq/job/" + j.ID + "@2"
	got, err = e.c.RequestReview(e.ctx, prod, j.ID, coord.ReviewRequest{Actor: fleet.ActorOperator, ActorID: "op", Head: &head2})
	require.NoError(t, err)
	require.Empty(t, got.Review.Votes, "a new head clears the votes")
	_, err = e.vote(j.ID, "alice", true, head2, "")
	require.NoError(t, err)
	got, err = e.c.RequestReview(e.ctx, prod, j.ID, coord.ReviewRequest{Actor: fleet.ActorOperator, ActorID: "op",
		Reviewers: []string{"alice", "bob", "carol", "dave"}, Quorum: ptr(2)})
	require.NoError(t, err)
	require.Equal(t, fleet.StageReview, got.Stage)
	require.Equal(t, 1, got.Review.Approvals, "adding a reviewer keeps the votes on the same head")
	require.Equal(t, []string{"bob", "carol", "dave"}, got.Review.Awaiting)
	evs := e.events(j.ID)
	require.Equal(t, fleet.EventReviewRequested, evs[len(evs)-1].Type)
	got, err = e.vote(j.ID, "dave", true, head2, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageTesting, got.Stage, "the added reviewer's approval counts")

	_, err = e.c.RequestReview(e.ctx, prod, j.ID, coord.ReviewRequest{Actor: fleet.ActorOperator, ActorID: "op", Quorum: ptr(3)})
	requireCode(t, err, fleet.CodeConflict, "")
	_, err = e.c.RequestReview(e.ctx, prod, j.ID, coord.ReviewRequest{Actor: fleet.ActorOperator, ActorID: "op", Reviewers: []string{"a", "a"}})
	requireCode(t, err, fleet.CodeInvalid, "reviewers[1]")
}

// TestReviewGateCannotBeWeakened: the holder of a gated job (alice, bob,
// carol; quorum 2) may not change reviewers or quorum at all; an operator
// may add reviewers or raise the quorum but never drop a reviewer of the
// manifest or go below its quorum (403 naming the field), and never ask for
// more approvals than there are reviewers (400). A refused request changes
// nothing, and the holder's attempt (reviewers [opa], quorum 1) leaves the
// gate needing two of the manifest's reviewers.
func TestReviewGateCannotBeWeakened(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit(gate3)
	cl := e.building(j.ID)
	head := "aq/job/" + j.ID + "@1"
	holder := func(reviewers []string, quorum *int) coord.ReviewRequest {
		return coord.ReviewRequest{Actor: fleet.ActorFactory, ActorID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch), Head: &head, Reviewers: reviewers, Quorum: quorum}
	}
	operator := func(reviewers []string, quorum *int) coord.ReviewRequest {
		return coord.ReviewRequest{Actor: fleet.ActorOperator, ActorID: "op", Reviewers: reviewers, Quorum: quorum}
	}
	refuse := func(req coord.ReviewRequest, code fleet.Code, field string) {
		t.Helper()
		before := e.rawJob(j.ID)
		_, err := e.c.RequestReview(e.ctx, prod, j.ID, req)
		requireCode(t, err, code, field)
		require.Equal(t, before, e.rawJob(j.ID), "a refused request changes nothing")
	}

	// The holder, while building: only its head.
	refuse(holder([]string{"opa"}, ptr(1)), fleet.CodeForbidden, "reviewers")
	refuse(holder(nil, ptr(1)), fleet.CodeForbidden, "quorum")
	refuse(holder([]string{"alice", "bob", "carol"}, nil), fleet.CodeForbidden, "reviewers")
	refuse(holder(nil, ptr(3)), fleet.CodeForbidden, "quorum")
	got, err := e.c.RequestReview(e.ctx, prod, j.ID, holder(nil, nil))
	require.NoError(t, err)
	require.Equal(t, fleet.StageReview, got.Stage)
	require.Equal(t, []string{"alice", "bob", "carol"}, got.Review.Reviewers)
	require.Equal(t, 2, got.Review.Quorum)
	_, err = e.vote(j.ID, "opa", true, head, "")
	requireCode(t, err, fleet.CodeForbidden, "")
	got, err = e.vote(j.ID, "alice", true, head, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageReview, got.Stage, "one approval is not the manifest's quorum")

	// An operator, while in review: never below the manifest.
	for _, tc := range []struct {
		name      string
		reviewers []string
		quorum    *int
		code      fleet.Code
		field     string
	}{
		{"replace the reviewers", []string{"opa"}, ptr(1), fleet.CodeForbidden, "reviewers"},
		{"drop a reviewer", []string{"alice", "bob"}, nil, fleet.CodeForbidden, "reviewers"},
		{"any operator instead of the list", []string{}, nil, fleet.CodeForbidden, "reviewers"},
		{"lower the quorum", nil, ptr(1), fleet.CodeForbidden, "quorum"},
		{"add a reviewer, lower the quorum", []string{"alice", "bob", "carol", "dave"}, ptr(1), fleet.CodeForbidden, "quorum"},
		{"quorum above the reviewers", nil, ptr(4), fleet.CodeInvalid, "quorum"},
		{"quorum above the new reviewers", []string{"alice", "bob", "carol", "dave"}, ptr(5), fleet.CodeInvalid, "quorum"},
		{"quorum zero", nil, ptr(0), fleet.CodeInvalid, "quorum"},
	} {
		t.Run(tc.name, func(t *testing.T) { refuse(operator(tc.reviewers, tc.quorum), tc.code, tc.field) })
	}
	got, err = e.c.RequestReview(e.ctx, prod, j.ID, operator([]string{"alice", "bob", "carol", "dave"}, ptr(3)))
	require.NoError(t, err)
	require.Equal(t, fleet.StageReview, got.Stage)
	require.Equal(t, &fleet.Gate{Reviewers: []string{"alice", "bob", "carol"}, Quorum: 2}, got.Review.Minimum,
		"the manifest's gate is kept as the minimum")
	// Back down to the manifest is allowed; below it is not, whatever the
	// gate is now.
	got, err = e.c.RequestReview(e.ctx, prod, j.ID, operator(nil, ptr(2)))
	require.NoError(t, err)
	require.Equal(t, 2, got.Review.Quorum)
	refuse(operator([]string{"alice", "bob", "dave"}, ptr(2)), fleet.CodeForbidden, "reviewers")
	refuse(operator(nil, ptr(1)), fleet.CodeForbidden, "quorum")
	got, err = e.vote(j.ID, "dave", true, head, "")
	require.NoError(t, err)
	require.Equal(t, fleet.StageTesting, got.Stage, "two of the (widened) reviewers")
}

// TestGatedDeliveryNeedsHead: a gated job is delivered for review with a
// checkpoint, the head its reviewers vote on.
func TestGatedDeliveryNeedsHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit(gate3)
	cl := e.building(j.ID)
	_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageReview, LeaseEpoch: cl.LeaseEpoch})
	requireCode(t, err, fleet.CodeInvalid, "checkpoint")
}
