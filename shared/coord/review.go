package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/review"
	"github.com/gigafactory/fleet/shared/fleet"
)

// The review gate's use cases live in coord/review; these are its façade.

type (
	ReviewRequest = review.ReviewRequest
	VoteRequest   = review.VoteRequest
)

// RequestReview asks for a review (review.Service.RequestReview).
func (c *Coordinator) RequestReview(ctx context.Context, productID, jobID string, req ReviewRequest) (*fleet.Job, error) {
	return c.review.RequestReview(ctx, productID, jobID, req)
}

// Vote records a reviewer's vote (review.Service.Vote).
func (c *Coordinator) Vote(ctx context.Context, productID, jobID string, req VoteRequest) (*fleet.Job, error) {
	return c.review.Vote(ctx, productID, jobID, req)
}

// Vote is a forge reviewer's vote, cast as an operator's is (pulls.Lifecycle).
func (l lifecycle) Vote(ctx context.Context, productID, jobID string, v VoteRequest) (*fleet.Job, error) {
	return l.c.Vote(ctx, productID, jobID, v)
}
