// Package fleetapi is the factory's client for the coordinator's worker
// routes under /api/fleet: heartbeat, claim, accept, fenced patch, lease
// renew and release, fail, and job reads. It speaks the shared domain types
// and turns the API's error shape into *Error, so callers branch on codes
// (IsFenced) rather than on status numbers.
package fleetapi

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// Error is an answer of the API other than success.
type Error struct {
	Status  int
	Code    string
	Message string
	Field   string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

func codeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsFenced reports a 409 fenced: this factory no longer holds the lease.
func IsFenced(err error) bool { return codeOf(err) == string(fleet.CodeFenced) }

// IsConflict reports a 409 conflict: a lost race or an illegal transition.
func IsConflict(err error) bool { return codeOf(err) == string(fleet.CodeConflict) }

// IsNotFound reports a 404.
func IsNotFound(err error) bool { return codeOf(err) == string(fleet.CodeNotFound) }

// IsPermanent reports an answer that will not change on retry (4xx other
// than 429).
func IsPermanent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests
}

// Client calls the coordinator as one factory.
type Client struct {
	base      string // .../api/fleet
	token     string
	productID string
	http      *http.Client
	// Attempts is how many times an idempotent call is tried when the
	// network fails or the API answers 429/5xx.
	Attempts int
	// Backoff is the first retry delay; it doubles with jitter.
	Backoff time.Duration
}

// New returns a client for the coordinator at baseURL (without /api).
// productID, if set, is sent as x-product-id on routes that are not about
// one job.
func New(baseURL, token, productID string) *Client {
	return &Client{
		base: baseURL + "/api/fleet", token: token, productID: productID,
		http: &http.Client{Timeout: 30 * time.Second}, Attempts: 4, Backoff: 250 * time.Millisecond,
	}
}

// Heartbeat is the factory's report of itself.
type Heartbeat struct {
	Capabilities []string `json:"capabilities"`
	Repos        []string `json:"repos"`
	Load         int      `json:"load"`
	Health       string   `json:"health"`
	SeatLimit    int      `json:"seatLimit"`
}

// Heartbeat sends hb.
func (c *Client) Heartbeat(ctx context.Context, hb Heartbeat) error {
	return c.do(ctx, http.MethodPost, "/factories/heartbeat", c.productID, hb, nil, true)
}

// Claim takes the best queued job this factory is eligible for; nil when
// there is none. Each claim carries a fresh requestId and is retried with
// it: the coordinator answers a retry with the lease the lost try took.
func (c *Client) Claim(ctx context.Context) (*protocol.Claimed, error) {
	var id [16]byte
	_, _ = crand.Read(id[:])
	body := map[string]string{"requestId": "claim-" + hex.EncodeToString(id[:])}
	var out protocol.Claimed
	status, err := c.call(ctx, http.MethodPost, "/claim", c.productID, body, &out, true)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

// Accept claims the job a dispatch message offered. A 409 conflict means
// the message is stale or someone else has the job.
func (c *Client) Accept(ctx context.Context, msg protocol.DispatchMessage) (*protocol.Claimed, error) {
	var out protocol.Claimed
	body := map[string]any{"jobId": msg.JobID, "dispatchEpoch": msg.DispatchEpoch, "productId": msg.ProductID}
	// Not retried blindly: a lost answer to a successful accept would
	// come back as a 409 on retry; the caller re-reads the job instead.
	if err := c.do(ctx, http.MethodPost, "/accept", msg.ProductID, body, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetJob reads a job.
func (c *Client) GetJob(ctx context.Context, productID, id string) (*fleet.Job, error) {
	var j fleet.Job
	if err := c.do(ctx, http.MethodGet, "/jobs/"+url.PathEscape(id), productID, nil, &j, true); err != nil {
		return nil, err
	}
	return &j, nil
}

// Patch is a holder's fenced update; Stage "" changes only the checkpoint.
type Patch struct {
	Stage      fleet.Stage `json:"stage,omitempty"`
	LeaseEpoch int64       `json:"leaseEpoch"`
	Checkpoint *string     `json:"checkpoint,omitempty"`
	// Usage, Head and Diff report on the run: the delivering patch
	// carries the final usage, the pushed head and its diff stat.
	Usage *fleet.Usage    `json:"usage,omitempty"`
	Head  string          `json:"head,omitempty"`
	Diff  *fleet.DiffStat `json:"diff,omitempty"`
}

// Patch applies p to job id. A checkpoint-only patch is idempotent and
// retried; a stage change is tried once, since repeating one that
// succeeded unseen answers 409.
func (c *Client) Patch(ctx context.Context, productID, id string, p Patch) (*fleet.Job, error) {
	var j fleet.Job
	if err := c.do(ctx, http.MethodPatch, "/jobs/"+url.PathEscape(id), productID, p, &j, p.Stage == ""); err != nil {
		return nil, err
	}
	return &j, nil
}

// Renew extends the lease and returns its new expiry and whether the
// holder has been asked to stop (cancel, preemption).
func (c *Client) Renew(ctx context.Context, productID, id string, epoch int64) (protocol.Renewal, error) {
	var out protocol.Renewal
	err := c.do(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/lease/renew", productID, map[string]any{"leaseEpoch": epoch}, &out, true)
	return out, err
}

// Acknowledgement is a release that answers a cancel or a preemption.
type Acknowledgement struct {
	LeaseEpoch int64                `json:"leaseEpoch"`
	Outcome    fleet.ReleaseOutcome `json:"outcome"`
	Checkpoint *string              `json:"checkpoint,omitempty"`
}

// Acknowledge releases the lease with an outcome: the job ends cancelled,
// or goes back to the queue after a preemption. Retried on transient
// failures: the alternative is waiting out the grace; a repeat of one that
// succeeded unseen is fenced, and so is one the coordinator forced first.
func (c *Client) Acknowledge(ctx context.Context, productID, id string, ack Acknowledgement) error {
	return c.do(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/lease/release", productID, ack, nil, true)
}

// Release gives the job back to the queue, checkpoint kept.
func (c *Client) Release(ctx context.Context, productID, id string, epoch int64) error {
	return c.do(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/lease/release", productID, map[string]any{"leaseEpoch": epoch}, nil, false)
}

// ReportUsage sends the run's cumulative usage (and the engine running
// it). Cumulative figures make it safe to retry.
func (c *Client) ReportUsage(ctx context.Context, productID, id string, epoch int64, engine string, u fleet.Usage) error {
	body := map[string]any{"leaseEpoch": epoch, "usd": u.USD, "inputTokens": u.InputTokens, "outputTokens": u.OutputTokens}
	if engine != "" {
		body["engine"] = engine
	}
	return c.do(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/usage", productID, body, nil, true)
}

// Fail reports a failure and frees the lease at once, with the run's
// final usage when known. The reason is sanitised first
// (SanitizeReason): it often quotes an engine's output.
func (c *Client) Fail(ctx context.Context, productID, id string, epoch int64, reason string, retryable bool, usage *fleet.Usage) (*fleet.Job, error) {
	var j fleet.Job
	body := map[string]any{"jobId": id, "leaseEpoch": epoch, "reason": SanitizeReason(reason), "retryable": retryable, "productId": productID}
	if usage != nil {
		body["usage"] = usage
	}
	if err := c.do(ctx, http.MethodPost, "/fail", productID, body, &j, false); err != nil {
		return nil, err
	}
	return &j, nil
}

// PostChildren posts the children the holder's engine proposed, fenced by
// epoch; the coordinator releases the lease and the job waits for them.
// Retried like an idempotent call: the same children again are answered
// with the same jobs and change nothing, even once the lease is gone.
func (c *Client) PostChildren(ctx context.Context, productID, id string, epoch int64, manifests []string) ([]fleet.Job, error) {
	var out struct {
		Items []fleet.Job `json:"items"`
	}
	body := map[string]any{"leaseEpoch": epoch, "children": manifests}
	if err := c.do(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/children", productID, body, &out, true); err != nil {
		return nil, err
	}
	return out.Items, nil
}

func (c *Client) do(ctx context.Context, method, path, productID string, in, out any, idempotent bool) error {
	_, err := c.call(ctx, method, path, productID, in, out, idempotent)
	return err
}

// call sends one request, retrying transient failures of idempotent calls,
// and decodes a 2xx body into out. It returns the final status.
func (c *Client) call(ctx context.Context, method, path, productID string, in, out any, idempotent bool) (int, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
	}
	attempts := 1
	if idempotent {
		attempts = max(c.Attempts, 1)
	}
	delay := c.Backoff
	for i := 1; ; i++ {
		status, retryAfter, err := c.once(ctx, method, path, productID, body, out)
		if err == nil || i >= attempts || !transient(err) || ctx.Err() != nil {
			return status, err
		}
		wait := delay + rand.N(delay/2+1)
		if retryAfter > wait {
			wait = retryAfter
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, err
		case <-t.C:
		}
		delay *= 2
	}
}

// transient reports a failure worth retrying: the network, 429 or 5xx.
func transient(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusTooManyRequests || e.Status >= 500
	}
	return !errors.Is(err, context.Canceled)
}

func (c *Client) once(ctx context.Context, method, path, productID string, body []byte, out any) (int, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if productID != "" {
		req.Header.Set("x-product-id", productID)
	}
	status, retryAfter, err := c.answer(c.http, req, out)
	if err != nil {
		return status, retryAfter, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return status, 0, nil
}

// answer sends req and decodes a 2xx body into out, or the API's error
// shape into an *Error.
func (c *Client) answer(hc *http.Client, req *http.Request, out any) (int, time.Duration, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, 0, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil && resp.StatusCode != http.StatusNoContent && len(data) > 0 {
			if err := json.Unmarshal(data, out); err != nil {
				return resp.StatusCode, 0, fmt.Errorf("decode answer: %w", err)
			}
		}
		return resp.StatusCode, 0, nil
	}
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	apiErr := &Error{Status: resp.StatusCode}
	if json.Unmarshal(data, &eb) == nil && eb.Error.Code != "" {
		apiErr.Code, apiErr.Message, apiErr.Field = eb.Error.Code, eb.Error.Message, eb.Error.Field
	} else {
		apiErr.Code, apiErr.Message = http.StatusText(resp.StatusCode), string(bytes.TrimSpace(data[:min(len(data), 200)]))
	}
	var retryAfter time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		retryAfter = time.Duration(s) * time.Second
	}
	return resp.StatusCode, retryAfter, apiErr
}

// Artifact is one file of a run to upload.
type Artifact struct {
	Name        string
	Kind        fleet.ArtifactKind
	ContentType string
	Path        string
}

// UploadArtifact uploads the file a names as an artifact of the job's run
// at epoch: streamed from disk with its length declared (the Functions host
// forwards a body only with Content-Length). A transient failure is tried
// again from the start of the file; a retry after an upload that succeeded
// unseen only adds a second pointer to the same stored bytes.
func (c *Client) UploadArtifact(ctx context.Context, productID, jobID string, epoch int64, a Artifact) (*fleet.Artifact, error) {
	q := url.Values{"name": {a.Name}, "kind": {string(a.Kind)}, "leaseEpoch": {strconv.FormatInt(epoch, 10)}}
	path := "/jobs/" + url.PathEscape(jobID) + "/artifacts?" + q.Encode()
	// No client timeout: a large file takes as long as it takes; ctx bounds it.
	hc := &http.Client{Transport: c.http.Transport}
	if _, err := os.Stat(a.Path); err != nil {
		return nil, fmt.Errorf("upload %s: %w", a.Name, err)
	}
	delay := c.Backoff
	for i := 1; ; i++ {
		out, retryAfter, err := c.uploadOnce(ctx, hc, path, productID, a)
		if err == nil || i >= max(c.Attempts, 1) || !transient(err) || ctx.Err() != nil {
			return out, err
		}
		wait := max(delay+rand.N(delay/2+1), retryAfter)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		delay *= 2
	}
}

func (c *Client) uploadOnce(ctx context.Context, hc *http.Client, path, productID string, a Artifact) (*fleet.Artifact, time.Duration, error) {
	f, err := os.Open(a.Path)
	if err != nil {
		return nil, 0, fmt.Errorf("upload %s: %w", a.Name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("upload %s: %w", a.Name, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, f)
	if err != nil {
		return nil, 0, fmt.Errorf("upload %s: %w", a.Name, err)
	}
	req.ContentLength = fi.Size()
	if fi.Size() == 0 {
		req.Body = http.NoBody
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", a.ContentType)
	if productID != "" {
		req.Header.Set("x-product-id", productID)
	}
	var out fleet.Artifact
	_, retryAfter, err := c.answer(hc, req, &out)
	if err != nil {
		return nil, retryAfter, fmt.Errorf("upload %s: %w", a.Name, err)
	}
	return &out, 0, nil
}
