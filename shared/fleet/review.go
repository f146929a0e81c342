package fleet

import (
	"fmt"
	"slices"
	"time"
)

// OnReject is what a rejection in review does to a job.
type OnReject string

// Rejection outcomes.
const (
	// RejectRequeue (the default) sends the job back to the queue with the
	// comment as review.feedback for the next attempt; no attempt is spent.
	RejectRequeue OnReject = "requeue"
	// RejectFail fails the job.
	RejectFail OnReject = "fail"
)

// OnRejects lists every rejection outcome, the default first.
func OnRejects() []OnReject { return []OnReject{RejectRequeue, RejectFail} }

// ParseOnReject validates onReject; "" means requeue.
func ParseOnReject(field, s string) (OnReject, error) {
	switch o := OnReject(s); {
	case o == "":
		return RejectRequeue, nil
	case slices.Contains(OnRejects(), o):
		return o, nil
	}
	return "", Invalid(field, "unknown onReject %q (want %s)", s, alternatives(OnRejects()))
}

// MaxReviewCommentLen bounds a vote's comment (and so review.feedback).
const MaxReviewCommentLen = 8000

// Vote is one reviewer's verdict on one head.
type Vote struct {
	Reviewer string    `json:"reviewer"`
	Approve  bool      `json:"approve"`
	Comment  string    `json:"comment,omitempty"`
	Head     string    `json:"head,omitempty"`
	At       time.Time `json:"at"`
}

// Review is the review gate of a job. Votes are bound to Head: a new head
// clears them. Approvals and Awaiting are derived from the rest (Tally)
// and stored so clients see who voted and who is still awaited.
type Review struct {
	Reviewers []string `json:"reviewers,omitempty"`
	Quorum    int      `json:"quorum,omitempty"`
	OnReject  OnReject `json:"onReject,omitempty"`
	// Head is what the reviewers vote on: the delivered checkpoint, e.g.
	// aq/job/<id>@<sha>.
	Head  string `json:"head,omitempty"`
	Votes []Vote `json:"votes,omitempty"`
	// Approvals counts distinct reviewers approving Head.
	Approvals int `json:"approvals"`
	// Awaiting are the listed reviewers who have not voted on Head.
	Awaiting []string `json:"awaiting,omitempty"`
	// Feedback is the comment of the rejection that sent the job back to
	// the queue, for the next attempt's engine.
	Feedback string `json:"feedback,omitempty"`
	// Minimum is the gate as the manifest set it, recorded when an
	// operator first changes the gate: a change may add reviewers or
	// raise the quorum, never go below it. Nil while unchanged.
	Minimum *Gate `json:"minimum,omitempty"`
}

// Gate is a review gate's reviewers and quorum.
type Gate struct {
	Reviewers []string `json:"reviewers,omitempty"`
	Quorum    int      `json:"quorum"`
}

// Clone returns a deep copy of r (nil for nil).
func (r *Review) Clone() *Review {
	if r == nil {
		return nil
	}
	c := *r
	c.Reviewers = slices.Clone(r.Reviewers)
	c.Votes = slices.Clone(r.Votes)
	c.Awaiting = slices.Clone(r.Awaiting)
	if r.Minimum != nil {
		c.Minimum = &Gate{Reviewers: slices.Clone(r.Minimum.Reviewers), Quorum: r.Minimum.Quorum}
	}
	return &c
}

// Tally recomputes Approvals and Awaiting from the votes.
func (r *Review) Tally() {
	voted := make(map[string]bool, len(r.Votes))
	r.Approvals = 0
	for _, v := range r.Votes {
		if voted[v.Reviewer] {
			continue
		}
		voted[v.Reviewer] = true
		if v.Approve {
			r.Approvals++
		}
	}
	r.Awaiting = nil
	for _, name := range r.Reviewers {
		if !voted[name] {
			r.Awaiting = append(r.Awaiting, name)
		}
	}
}

// QuorumReached reports whether enough distinct reviewers approved Head.
func (r *Review) QuorumReached() bool { return r.Approvals >= max(r.Quorum, 1) }

// SetHead makes head the one under review; a different head than the
// current one clears the votes (they were about other code).
func (r *Review) SetHead(head string) {
	if head != r.Head {
		r.Votes = nil
	}
	r.Head = head
	r.Tally()
}

// Cast records reviewer's vote on head: their earlier vote on the same head
// is replaced, so one reviewer counts once however often they vote. A
// reviewer not listed (when reviewers are listed) is forbidden; a vote on
// another head than the current one is a conflict.
func (r *Review) Cast(v Vote) error {
	if len(r.Reviewers) > 0 && !slices.Contains(r.Reviewers, v.Reviewer) {
		return &Error{Code: CodeForbidden, Message: fmt.Sprintf("%s is not a reviewer of this job (reviewers: %v)", v.Reviewer, r.Reviewers)}
	}
	if v.Head != r.Head {
		return &Error{Code: CodeConflict, Field: "head", Message: fmt.Sprintf("head %q is not the one under review (%q): votes are bound to the head they saw", v.Head, r.Head)}
	}
	r.Votes = slices.DeleteFunc(r.Votes, func(old Vote) bool { return old.Reviewer == v.Reviewer })
	if len(r.Votes) >= MaxVotes {
		// A gate listing no reviewers takes any operator's vote: bounded,
		// so the job's document cannot outgrow the store (growth.go).
		return &Error{Code: CodeConflict, Message: fmt.Sprintf("the gate holds %d votes on head %q, the most it keeps: list the reviewers that decide", len(r.Votes), r.Head)}
	}
	r.Votes = append(r.Votes, v)
	r.Tally()
	return nil
}

// ValidateGate checks reviewers and quorum: reviewers are plain names (they
// are matched against operator principal names), listed once; the quorum is
// between 1 and the number of reviewers (at least 1 without reviewers). A
// quorum of 0 takes the default: every listed reviewer, or 1.
func (r *Review) ValidateGate(field string) error {
	if len(r.Reviewers) > MaxReviewers {
		return Invalid(field+".reviewers", "has %d entries, at most %d allowed", len(r.Reviewers), MaxReviewers)
	}
	seen := make(map[string]bool, len(r.Reviewers))
	for i, rv := range r.Reviewers {
		f := fmt.Sprintf("%s.reviewers[%d]", field, i)
		if err := ValidateName(f, rv); err != nil {
			return Invalid(f, "must be an operator's name (letters, digits, '.', '_', '-'), got %q", rv)
		}
		// A repeated reviewer would count twice against the quorum
		// check yet vote once: the quorum could never be reached.
		if seen[rv] {
			return Invalid(f, "%q appears twice", rv)
		}
		seen[rv] = true
	}
	if r.Quorum == 0 {
		r.Quorum = max(1, len(r.Reviewers))
	}
	if r.Quorum < 1 || (len(r.Reviewers) > 0 && r.Quorum > len(r.Reviewers)) {
		return Invalid(field+".quorum", "must be between 1 and the number of reviewers")
	}
	if r.OnReject == "" {
		r.OnReject = RejectRequeue
	}
	return nil
}
