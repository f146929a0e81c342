package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// client calls the stack's HTTP front with one bearer token, as one
// operator or one factory would: its own connection pool, no proxy.
type client struct {
	base  string // http://127.0.0.1:port
	token string
	hc    *http.Client
}

func newClient(base, token string, conns int) *client {
	tr := &http.Transport{
		Proxy:               nil, // loopback only, whatever the environment says
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}
	return &client{base: base, token: token, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// apiError is a non-2xx answer.
type apiError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, strings.TrimSpace(e.Body))
}

// statusOf is the HTTP status of an apiError, 0 for any other error.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// call sends one request and decodes a 2xx answer into out (when not nil).
// body is nil, a string (sent as Markdown) or a value (sent as JSON).
// product, when set, goes in x-product-id.
func (c *client) call(ctx context.Context, method, path, product string, body, out any) error {
	var rd io.Reader
	contentType := ""
	switch b := body.(type) {
	case nil:
	case string:
		rd, contentType = strings.NewReader(b), "text/markdown"
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd, contentType = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if product != "" {
		req.Header.Set("x-product-id", product)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{Method: method, Path: path, Status: resp.StatusCode, Body: string(data)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

const api = "/api/fleet"

// putProduct declares a product owning repos.
func (c *client) putProduct(ctx context.Context, id string, repos []string) error {
	return c.call(ctx, http.MethodPut, api+"/products/"+id, "", map[string]any{"name": id, "repos": repos}, nil)
}

// enroll enrolls a static factory serving product and returns its token.
func (c *client) enroll(ctx context.Context, id, product string, seats int) (string, error) {
	var out struct {
		Token string `json:"token"`
	}
	err := c.call(ctx, http.MethodPost, api+"/factories/enroll", "", map[string]any{
		"factoryId": id, "kind": "static", "products": []string{product}, "seatLimit": seats,
	}, &out)
	if err == nil && out.Token == "" {
		err = fmt.Errorf("enroll %s: no token in the answer", id)
	}
	return out.Token, err
}

// manifest is a job manifest for repo needing caps.
func manifest(title, repo string, caps []string) string {
	return fmt.Sprintf("---\ntitle: %s\nrepo: %s\ncapabilities: [%s]\n---\nBenchmark job %s: do nothing.\n",
		title, repo, strings.Join(caps, ", "), title)
}

// submit submits a manifest and returns the job id.
func (c *client) submit(ctx context.Context, product, m string) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	if err := c.call(ctx, http.MethodPost, api+"/jobs", product, m, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", errors.New("submit: no job id in the answer")
	}
	return out.ID, nil
}

// accept is the push transport's claim; it returns the lease epoch.
func (c *client) accept(ctx context.Context, m protocol.DispatchMessage) (int64, error) {
	var out struct {
		LeaseEpoch int64 `json:"leaseEpoch"`
	}
	err := c.call(ctx, http.MethodPost, api+"/accept", m.ProductID,
		map[string]any{"jobId": m.JobID, "dispatchEpoch": m.DispatchEpoch}, &out)
	return out.LeaseEpoch, err
}

// patchStage moves the holder's job to stage under its lease epoch.
func (c *client) patchStage(ctx context.Context, product, id, stage string, epoch int64) error {
	return c.call(ctx, http.MethodPatch, api+"/jobs/"+id, product,
		map[string]any{"stage": stage, "leaseEpoch": epoch}, nil)
}

// cancel cancels a job as the operator.
func (c *client) cancel(ctx context.Context, product, id string) error {
	return c.call(ctx, http.MethodPost, api+"/jobs/"+id+"/actions/cancel", product,
		map[string]any{"reason": "benchmark cleanup"}, nil)
}

// jobSummary is what the bench reads of a job.
type jobSummary struct {
	ID    string `json:"id"`
	Stage string `json:"stage"`
}

// listJobs lists every job of product, following the cursor.
func (c *client) listJobs(ctx context.Context, product string) ([]jobSummary, error) {
	var all []jobSummary
	cursor := ""
	for range 10_000 { // 500 per page: far more pages than any run makes
		q := url.Values{"limit": {"500"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items  []jobSummary `json:"items"`
			Cursor string       `json:"cursor"`
		}
		if err := c.call(ctx, http.MethodGet, api+"/jobs?"+q.Encode(), product, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Cursor == "" {
			return all, nil
		}
		cursor = page.Cursor
	}
	return nil, errors.New("list jobs: too many pages")
}

// getJobRaw returns a job's JSON as the API serves it.
func (c *client) getJobRaw(ctx context.Context, product, id string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.call(ctx, http.MethodGet, api+"/jobs/"+id, product, nil, &out)
	return out, err
}

// coordStats is what the bench reads of the coordinator's own counters.
type coordStats struct {
	CASConflicts   int64 `json:"casConflicts"`
	Claims         int64 `json:"claims"`
	ClaimConflicts int64 `json:"claimConflicts"`
	Dispatched     int64 `json:"dispatched"`
	PublishFailed  int64 `json:"publishFailed"`
	EventsDeferred int64 `json:"eventsDeferred"`
	EventsRepaired int64 `json:"eventsRepaired"`
}

// handlerMetrics reads the handler process's store counts and coordinator
// counters from /api/fleet/metrics. The call itself runs store queries
// (see probe).
func (c *client) handlerMetrics(ctx context.Context) (storecount.Counts, coordStats, error) {
	var m struct {
		Coord    coordStats `json:"coordinator"`
		Adapters struct {
			Store *storecount.Counts `json:"store"`
		} `json:"adapters"`
	}
	if err := c.call(ctx, http.MethodGet, api+"/metrics", "", nil, &m); err != nil {
		return storecount.Counts{}, coordStats{}, err
	}
	if m.Adapters.Store == nil {
		return storecount.Counts{}, coordStats{}, errors.New("/api/fleet/metrics has no adapters.store section")
	}
	return *m.Adapters.Store, m.Coord, nil
}

// hostStatus is what the bench reads of GET /admin/host/status.
type hostStatus struct {
	Handler struct {
		PID      int   `json:"pid"`
		Restarts int64 `json:"restarts"`
	} `json:"handler"`
	Feeds map[string]struct {
		Batches       int64 `json:"batches"`
		Documents     int64 `json:"documents"`
		FailedBatches int64 `json:"failedBatches"`
	} `json:"feeds"`
	Store *storecount.Counts `json:"store"`
}

// feedTotals sums the feed triggers' counters.
func (h hostStatus) feedTotals() (batches, documents, failed int64) {
	for _, f := range h.Feeds {
		batches += f.Batches
		documents += f.Documents
		failed += f.FailedBatches
	}
	return
}

// hostStatus reads the emulator's status; it costs no store operation.
func (c *client) hostStatus(ctx context.Context) (hostStatus, error) {
	var st hostStatus
	if err := c.call(ctx, http.MethodGet, "/admin/host/status", "", nil, &st); err != nil {
		return st, err
	}
	if st.Store == nil {
		return st, errors.New("/admin/host/status has no store section")
	}
	return st, nil
}
