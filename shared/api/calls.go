package api

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/gigafactory/fleet/shared/fleet"
)

// The typed calls. A call that names a product sends exactly it as
// x-product-id (none when ""; job routes then find the job across the
// products the token sees); the others send the client's default. Only
// calls that are safe to repeat are retried: reads, replacing writes, and
// writes the API makes idempotent (a claim's request id, cumulative usage,
// children by idempotency key). Those that are not (accept, fail, a stage
// change, a plain release) are tried once: a lost success would come back
// as a 409 on retry, and the caller re-reads the job instead.

func jobPath(id string, rest ...string) string {
	p := "/jobs/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Submit posts a manifest; created is false when its idempotencyKey named
// an existing job (200).
func (c *Client) Submit(ctx context.Context, product, manifest string) (j *fleet.Job, created bool, err error) {
	j = new(fleet.Job)
	status, err := c.call(ctx, Request{Method: http.MethodPost, Path: "/jobs", Product: product}, SubmitRequest{Manifest: &manifest}, j)
	if err != nil {
		return nil, false, err
	}
	return j, status == http.StatusCreated, nil
}

// ListJobsOptions filters and pages GET /fleet/jobs.
type ListJobsOptions struct {
	Product string
	Stage   fleet.Stage
	Limit   int
	Cursor  string
}

// ListJobs reads one page of a product's jobs.
func (c *Client) ListJobs(ctx context.Context, o ListJobsOptions) (*JobPage, error) {
	q := url.Values{}
	if o.Stage != "" {
		q.Set("stage", string(o.Stage))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var out JobPage
	_, err := c.call(ctx, Request{Method: http.MethodGet, Path: "/jobs", Query: q, Product: o.Product, Retry: true}, nil, &out)
	return &out, err
}

// GetJob reads a job.
func (c *Client) GetJob(ctx context.Context, product, id string) (*fleet.Job, error) {
	var j fleet.Job
	if _, err := c.call(ctx, Request{Method: http.MethodGet, Path: jobPath(id), Product: product, Exact: true, Retry: true}, nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Patch is a holder's fenced update. A checkpoint-only patch is retried;
// a stage change is tried once, since repeating one that succeeded unseen
// answers 409. It asks for no job back (PreferMinimal): nothing a holder
// does next depends on it, and the coordinator would encode, and this
// client decode, the whole job on every patch for nothing.
func (c *Client) Patch(ctx context.Context, product, id string, p PatchRequest) error {
	req := Request{Method: http.MethodPatch, Path: jobPath(id), Product: product, Exact: true, Retry: p.Stage == nil,
		Header: http.Header{HeaderPrefer: {PreferMinimal}}}
	_, err := c.call(ctx, req, p, nil)
	return err
}

// Act takes an operator action (ship, requeue, reject, cancel) on a job.
func (c *Client) Act(ctx context.Context, product, id, action, reason string) (*fleet.Job, error) {
	var j fleet.Job
	req := Request{Method: http.MethodPost, Path: jobPath(id, "actions", url.PathEscape(action)), Product: product, Exact: true}
	if _, err := c.call(ctx, req, ActionRequest{Reason: reason}, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Claim takes the best queued job this factory is eligible for; nil when
// there is none. A claim without a request id gets a fresh one, and is
// retried with it: the coordinator answers a retry with the lease the lost
// try took.
func (c *Client) Claim(ctx context.Context, r ClaimRequest) (*Claimed, error) {
	if r.RequestID == "" {
		var id [16]byte
		_, _ = crand.Read(id[:])
		r.RequestID = "claim-" + hex.EncodeToString(id[:])
	}
	var out Claimed
	status, err := c.call(ctx, Request{Method: http.MethodPost, Path: "/claim", Retry: true}, r, &out)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

// Accept claims the job a dispatch message offered. A 409 conflict means
// the message is stale or someone else has the job. Not retried: a lost
// answer to a successful accept would come back as a 409.
func (c *Client) Accept(ctx context.Context, r AcceptRequest) (*Claimed, error) {
	var out Claimed
	if _, err := c.call(ctx, Request{Method: http.MethodPost, Path: "/accept", Product: r.ProductID, Exact: true}, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Renew extends the lease and returns its new expiry and whether the
// holder has been asked to stop (cancel, preemption).
func (c *Client) Renew(ctx context.Context, product, id string, epoch int64) (Renewal, error) {
	var out Renewal
	_, err := c.call(ctx, Request{Method: http.MethodPost, Path: jobPath(id, "lease", "renew"), Product: product, Exact: true, Retry: true},
		LeaseRequest{LeaseEpoch: &epoch}, &out)
	return out, err
}

// Release gives the lease back: plainly (the job goes back to the queue,
// checkpoint kept; tried once), or with an outcome acknowledging a cancel
// or a preemption (retried: the alternative is waiting out the grace, and
// a repeat of one that succeeded unseen is fenced).
func (c *Client) Release(ctx context.Context, product, id string, r ReleaseRequest) (*fleet.Job, error) {
	var j fleet.Job
	req := Request{Method: http.MethodPost, Path: jobPath(id, "lease", "release"), Product: product, Exact: true, Retry: r.Outcome != nil}
	if _, err := c.call(ctx, req, r, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Fail reports a failure and frees the lease at once. Tried once.
func (c *Client) Fail(ctx context.Context, r FailRequest) (*fleet.Job, error) {
	var j fleet.Job
	if _, err := c.call(ctx, Request{Method: http.MethodPost, Path: "/fail", Product: r.ProductID, Exact: true}, r, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// ReportUsage sends the run's cumulative usage; cumulative figures make
// it safe to retry.
func (c *Client) ReportUsage(ctx context.Context, product, id string, r UsageRequest) (*fleet.Job, error) {
	var j fleet.Job
	if _, err := c.call(ctx, Request{Method: http.MethodPost, Path: jobPath(id, "usage"), Product: product, Exact: true, Retry: true}, r, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// PostChildren gives a job children. Retried: the same children again are
// answered with the same jobs and change nothing.
func (c *Client) PostChildren(ctx context.Context, product, id string, r ChildrenRequest) ([]*fleet.Job, error) {
	var out List[*fleet.Job]
	if _, err := c.call(ctx, Request{Method: http.MethodPost, Path: jobPath(id, "children"), Product: product, Exact: true, Retry: true}, r, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// Runs lists a job's runs.
func (c *Client) Runs(ctx context.Context, product, id string) ([]fleet.Run, error) {
	var out List[fleet.Run]
	_, err := c.call(ctx, Request{Method: http.MethodGet, Path: jobPath(id, "runs"), Product: product, Exact: true, Retry: true}, nil, &out)
	return out.Items, err
}

// Events lists a job's events after seq after (0: from the start).
func (c *Client) Events(ctx context.Context, product, id string, after int64) ([]fleet.Event, error) {
	var out List[fleet.Event]
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	_, err := c.call(ctx, Request{Method: http.MethodGet, Path: jobPath(id, "events"), Query: q, Product: product, Exact: true, Retry: true}, nil, &out)
	return out.Items, err
}

// Explain says why a job is where it is.
func (c *Client) Explain(ctx context.Context, product, id string) (*Explanation, error) {
	var out Explanation
	if _, err := c.call(ctx, Request{Method: http.MethodGet, Path: jobPath(id, "explain"), Product: product, Exact: true, Retry: true}, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Heartbeat sends the factory's report of itself.
func (c *Client) Heartbeat(ctx context.Context, hb HeartbeatRequest) (*fleet.Factory, error) {
	var f fleet.Factory
	if _, err := c.call(ctx, Request{Method: http.MethodPost, Path: "/factories/heartbeat", Retry: true}, hb, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// Enroll enrols a factory and returns its token, shown only here.
func (c *Client) Enroll(ctx context.Context, r EnrollRequest) (*EnrollResponse, error) {
	var out EnrollResponse
	if _, err := c.call(ctx, Request{Method: http.MethodPost, Path: "/factories/enroll"}, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Factories lists the factories serving the client's product (or every
// product of the token's scope).
func (c *Client) Factories(ctx context.Context) ([]*fleet.Factory, error) {
	var out List[*fleet.Factory]
	_, err := c.call(ctx, Request{Method: http.MethodGet, Path: "/factories", Retry: true}, nil, &out)
	return out.Items, err
}

// PutProduct declares a product and its repos; repeating it is harmless.
func (c *Client) PutProduct(ctx context.Context, id string, r ProductRequest) (*fleet.Product, error) {
	var out fleet.Product
	if _, err := c.call(ctx, Request{Method: http.MethodPut, Path: "/products/" + url.PathEscape(id), Retry: true}, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutBudget sets a product's budget; repeating it is harmless.
func (c *Client) PutBudget(ctx context.Context, product string, r BudgetRequest) (*Budget, error) {
	var out Budget
	if _, err := c.call(ctx, Request{Method: http.MethodPut, Path: "/budgets/" + url.PathEscape(product), Retry: true}, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetBudget reads a product's budget.
func (c *Client) GetBudget(ctx context.Context, product string) (*Budget, error) {
	var out Budget
	if _, err := c.call(ctx, Request{Method: http.MethodGet, Path: "/budgets/" + url.PathEscape(product), Retry: true}, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Metrics reads the fleet at a glance, for the client's product or, to an
// unscoped token without one, the whole fleet.
func (c *Client) Metrics(ctx context.Context) (*Metrics, error) {
	var out Metrics
	if _, err := c.call(ctx, Request{Method: http.MethodGet, Path: "/metrics", Retry: true}, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ArtifactUpload is one artifact to upload: its bytes come from Open,
// called again for each try.
type ArtifactUpload struct {
	Name        string
	Kind        fleet.ArtifactKind
	ContentType string
	// LeaseEpoch is the holder's epoch; nil for an operator's upload.
	LeaseEpoch *int64
	Open       func() (io.ReadCloser, int64, error)
}

// OpenFile opens the file at path as an artifact body.
func OpenFile(path string) func() (io.ReadCloser, int64, error) {
	return func() (io.ReadCloser, int64, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, 0, err
		}
		return f, fi.Size(), nil
	}
}

// UploadArtifact uploads an artifact of a job with its length declared
// (the Functions host forwards a body only with Content-Length). A
// transient failure is tried again from the start; a retry after an
// upload that succeeded unseen only adds a second pointer to the same
// stored bytes.
func (c *Client) UploadArtifact(ctx context.Context, product, jobID string, a ArtifactUpload) (*fleet.Artifact, error) {
	q := url.Values{"name": {a.Name}, "kind": {string(a.Kind)}}
	if a.LeaseEpoch != nil {
		q.Set("leaseEpoch", strconv.FormatInt(*a.LeaseEpoch, 10))
	}
	req := Request{Method: http.MethodPost, Path: jobPath(jobID, "artifacts"), Query: q, Product: product, Exact: true,
		ContentType: a.ContentType, Open: a.Open, Retry: true}
	resp, err := c.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out fleet.Artifact
	if err := decodeJSON(resp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Vote approves or rejects the head of a job in review, as the operator
// the token names.
func (c *Client) Vote(ctx context.Context, product, id string, v VoteRequest) (*fleet.Job, error) {
	var j fleet.Job
	if _, err := c.call(ctx, Request{Method: http.MethodPost, Path: jobPath(id, "review"), Product: product, Exact: true}, v, &j); err != nil {
		return nil, err
	}
	return &j, nil
}
