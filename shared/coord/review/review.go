// Package review is the review gate (API.md "Review gate"): the holder
// delivers a gated job for review, reviewers vote on the head delivered,
// a quorum of approvals passes it to testing, a rejection sends it back
// to the queue with the comment (or fails it). coord's façade calls it.
package review

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Lifecycle is what the gate asks of the job lifecycle.
type Lifecycle interface {
	// Move applies m in one compare-and-swap with its event.
	Move(ctx context.Context, m kernel.Move) (*fleet.Job, error)
}

// Service is the review gate.
type Service struct {
	k    *kernel.Kernel
	life Lifecycle
}

// New builds the gate.
func New(k *kernel.Kernel, life Lifecycle) *Service { return &Service{k: k, life: life} }

// The review gate (API.md, "Review gate"). A gated job delivered by its
// holder goes to review with review.head = the delivered checkpoint.
// Reviewers vote on that head; a new head clears the votes. Approvals of
// quorum distinct reviewers move it to testing (the only way past the gate:
// fleet.CheckJobTransition refuses the others); one rejection sends it back
// to the queue with the comment as review.feedback and no attempt spent, or
// fails it with onReject: fail. Each request and vote is one job event.

// maxHeadLen bounds a review head (a checkpoint: branch@sha).
const maxHeadLen = 1024

// deliverForReview makes head the one j's reviewers vote on. The feedback
// of an earlier rejection was for the attempt that made this head.
func DeliverForReview(j *fleet.Job, head string) {
	if j.Review == nil {
		return
	}
	j.Review.SetHead(head)
	j.Review.Feedback = ""
}

// ReviewRequest is a POST /fleet/jobs/{id}/review/request. Nil fields keep
// what the gate has.
type ReviewRequest struct {
	// Actor is fleet.ActorFactory (the holder, fenced by LeaseEpoch: the
	// job is delivered for review; it may send only Head) or
	// fleet.ActorOperator (the job is in review already).
	Actor      fleet.Actor
	ActorID    string
	LeaseEpoch *int64
	Reviewers  []string
	Quorum     *int
	Head       *string
}

// RequestReview asks for a review: it sets the gate's head (a new head
// clears the votes) and, from an operator, its reviewers and quorum. From
// the holder it delivers the building job for review; from an operator it
// changes the gate of a job in review, which passes it at once if the votes
// already make the quorum. The gate never drops below the manifest's: the
// holder, the party under review, may not touch reviewers or quorum, and an
// operator may add reviewers or raise the quorum only (403 otherwise).
func (c *Service) RequestReview(ctx context.Context, productID, jobID string, req ReviewRequest) (*fleet.Job, error) {
	if req.Actor == fleet.ActorFactory {
		switch {
		case req.Reviewers != nil:
			return nil, holderMayNot("reviewers")
		case req.Quorum != nil:
			return nil, holderMayNot("quorum")
		}
	}
	if req.Head != nil {
		if err := validateHead("head", *req.Head); err != nil {
			return nil, err
		}
	}
	if req.Reviewers != nil {
		if err := (&fleet.Review{Reviewers: req.Reviewers, Quorum: 1}).ValidateGate("review"); err != nil {
			return nil, reviewField(err)
		}
	}
	if req.Quorum != nil && *req.Quorum < 1 {
		return nil, fleet.Invalid("quorum", "must be at least 1")
	}
	// gate is the job's gate with the request applied, made by guard on
	// each CAS attempt and used by decide and effect of the same attempt.
	var gate *fleet.Review
	guard := func(j *fleet.Job) error {
		if err := kernel.CheckEpoch(req.Actor, req.LeaseEpoch); err != nil {
			return err
		}
		if req.Actor == fleet.ActorFactory {
			if err := j.CheckFence(req.ActorID, *req.LeaseEpoch); err != nil {
				return err
			}
		} else if j.Stage != fleet.StageReview {
			return fleet.Errorf(fleet.CodeConflict, "job %s is %s: an operator requests a review of a job in review (its holder delivers it)", j.ID, j.Stage)
		}
		gate = j.Review.Clone()
		if gate == nil {
			gate = &fleet.Review{}
		}
		if req.Reviewers != nil || req.Quorum != nil {
			// Only an operator gets here (the holder was refused above).
			// Until the first change the gate is the manifest's.
			if gate.Minimum == nil {
				gate.Minimum = &fleet.Gate{Reviewers: slices.Clone(gate.Reviewers), Quorum: max(gate.Quorum, 1)}
			}
		}
		if req.Reviewers != nil {
			gate.Reviewers = req.Reviewers
			if req.Quorum == nil {
				gate.Quorum = 0 // the default for the new list
			}
		}
		if req.Quorum != nil {
			gate.Quorum = *req.Quorum
		}
		if err := gate.ValidateGate("review"); err != nil {
			return reviewField(err)
		}
		if err := checkMinimum(gate); err != nil {
			return err
		}
		head := gate.Head
		switch {
		case req.Head != nil:
			head = *req.Head
		case req.Actor == fleet.ActorFactory && j.Checkpoint != "":
			head = j.Checkpoint
		}
		if head == "" {
			return fleet.Invalid("head", "is required: the checkpoint the reviewers vote on")
		}
		if head != gate.Head {
			gate.Feedback = ""
		}
		// Votes of reviewers no longer listed no longer count.
		if len(gate.Reviewers) > 0 {
			kept := gate.Votes[:0]
			for _, v := range gate.Votes {
				if slices.Contains(gate.Reviewers, v.Reviewer) {
					kept = append(kept, v)
				}
			}
			gate.Votes = kept
		}
		gate.SetHead(head)
		return nil
	}
	m := kernel.Move{ProductID: productID, JobID: jobID, Actor: req.Actor, ActorID: req.ActorID, Event: fleet.EventReviewRequested,
		Guard: guard,
		Decide: func(j *fleet.Job) fleet.Stage {
			if req.Actor == fleet.ActorFactory {
				return fleet.StageReview
			}
			if gate.QuorumReached() {
				return fleet.StageTesting
			}
			return fleet.StageReview
		},
		Effect: func(j *fleet.Job) {
			j.Review = gate
			if req.Actor == fleet.ActorFactory {
				j.Checkpoint = gate.Head
			}
		}}
	if req.Actor == fleet.ActorOperator {
		// The gate, not the operator, passes the job: an operator's own
		// review -> testing skips the gate.
		m.Actor, m.EventActor, m.MayStay = fleet.ActorSystem, fleet.ActorOperator, true
	}
	after, err := c.life.Move(ctx, m)
	if err != nil {
		return nil, err
	}
	return after, nil
}

// VoteRequest is an operator's POST /fleet/jobs/{id}/review.
type VoteRequest struct {
	// Reviewer is the operator principal's name.
	Reviewer string
	Approve  bool
	Comment  string
	Head     string
}

// Vote records a reviewer's vote on the head under review and moves the job
// when it decides: to testing at quorum, back to the queue (or failed) on
// a rejection.
func (c *Service) Vote(ctx context.Context, productID, jobID string, req VoteRequest) (*fleet.Job, error) {
	if err := fleet.ValidateText("comment", req.Comment, fleet.MaxReviewCommentLen); err != nil {
		return nil, err
	}
	if err := validateHead("head", req.Head); err != nil {
		return nil, err
	}
	var gate *fleet.Review
	vote := fleet.Vote{Reviewer: req.Reviewer, Approve: req.Approve, Comment: req.Comment, Head: req.Head}
	verdict := "approved"
	if !req.Approve {
		verdict = "rejected"
	}
	var message string
	m := kernel.Move{ProductID: productID, JobID: jobID, Actor: fleet.ActorSystem, EventActor: fleet.ActorOperator, ActorID: req.Reviewer,
		Event: fleet.EventReviewVote, MayStay: true,
		Guard: func(j *fleet.Job) error {
			if j.Stage != fleet.StageReview {
				return fleet.Errorf(fleet.CodeConflict, "job %s is %s, not in review", j.ID, j.Stage)
			}
			if j.Review == nil {
				return fleet.Errorf(fleet.CodeConflict, "job %s has no review gate: ship or reject it, or request a review first", j.ID)
			}
			gate = j.Review.Clone()
			vote.At = c.k.Now()
			if err := gate.Cast(vote); err != nil {
				return err
			}
			message = fmt.Sprintf("%s %s %s (%d of %d approvals)", req.Reviewer, verdict, req.Head, gate.Approvals, gate.Quorum)
			if req.Comment != "" {
				message += ": " + req.Comment
			}
			return nil
		},
		Decide: func(j *fleet.Job) fleet.Stage {
			switch {
			case !req.Approve && gate.OnReject == fleet.RejectFail:
				return fleet.StageFailed
			case !req.Approve:
				return fleet.StageQueued
			case gate.QuorumReached():
				return fleet.StageTesting
			}
			return fleet.StageReview
		},
		Effect: func(j *fleet.Job) {
			j.Review = gate
			switch j.Stage {
			case fleet.StageQueued:
				// Back for another attempt, which the comment is for; it
				// spends none of the job's attempts. The next delivery
				// brings a new head and fresh votes.
				j.Review.Feedback = req.Comment
				j.Review.Head, j.Review.Votes = "", nil
				j.Review.Tally()
			case fleet.StageFailed:
				j.LastFailure = &fleet.Failure{Reason: strings.TrimSpace("rejected in review by " + req.Reviewer + ": " + req.Comment), At: j.UpdatedAt}
			}
		}}
	// The message is made by guard, on the job as the CAS read it.
	m.MessageOf = func() string { return message }
	after, err := c.life.Move(ctx, m)
	if err != nil {
		return nil, err
	}
	return after, nil
}

// holderMayNot refuses a holder's change of the gate it is reviewed by.
func holderMayNot(field string) error {
	return &fleet.Error{Code: fleet.CodeForbidden, Field: field, Message: "the holder may send only leaseEpoch and head: " +
		"the party under review cannot change its own gate's " + field + " (an operator may add reviewers or raise the quorum)"}
}

// checkMinimum refuses a gate below its minimum (the manifest's): every
// reviewer listed there must stay listed, and the quorum may not drop. A
// list where the manifest had none (any operator) only narrows who votes.
func checkMinimum(gate *fleet.Review) error {
	m := gate.Minimum
	if m == nil {
		return nil
	}
	for _, rv := range m.Reviewers {
		if !slices.Contains(gate.Reviewers, rv) {
			return &fleet.Error{Code: fleet.CodeForbidden, Field: "reviewers", Message: fmt.Sprintf(
				"%s is a reviewer the manifest set (%v): reviewers may be added, never removed", rv, m.Reviewers)}
		}
	}
	if gate.Quorum < m.Quorum {
		return &fleet.Error{Code: fleet.CodeForbidden, Field: "quorum", Message: fmt.Sprintf(
			"quorum %d is below the manifest's %d: the quorum may be raised, never lowered", gate.Quorum, m.Quorum)}
	}
	return nil
}

func validateHead(field, head string) error {
	if strings.TrimSpace(head) == "" {
		return fleet.Invalid(field, "is required: the checkpoint under review, e.g. aq/job/<id>@<sha>")
	}
	return fleet.ValidateText(field, head, maxHeadLen)
}

// reviewField names request fields as the request does (reviewers[1], not
// review.reviewers[1]).
func reviewField(err error) error {
	var fe *fleet.Error
	if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "review.") {
		out := *fe
		out.Field = strings.TrimPrefix(fe.Field, "review.")
		return &out
	}
	return err
}
