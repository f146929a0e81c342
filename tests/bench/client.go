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

	"github.com/gigafactory/fleet/local/hostemu"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

// client calls the stack's HTTP front with one bearer token, as one
// operator or one factory would: its own connection pool, no proxy. The
// fleet routes go through the shared client (shared/api), tried once so
// that a measured call is one request; admin calls the host emulator's own
// routes, which are no part of the fleet API.
type client struct {
	fleet *api.Client
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
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return &client{base: base, token: token, hc: hc,
		fleet: api.New(api.Config{BaseURL: base, Token: token, HTTPClient: hc, Attempts: 1})}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// statusOf is the HTTP status of an API answer, 0 for any other error.
func statusOf(err error) int {
	if e, ok := errors.AsType[*api.Error](err); ok {
		return e.Status
	}
	return 0
}

// admin calls one of the host emulator's /admin routes with body as JSON
// and decodes a 2xx answer into out (when not nil).
func (c *client) admin(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
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
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// putProduct declares a product owning repos.
func (c *client) putProduct(ctx context.Context, id string, repos []string) error {
	_, err := c.fleet.PutProduct(ctx, id, api.ProductRequest{Name: id, Repos: repos})
	return err
}

// enroll enrolls a static factory serving product and returns its token.
func (c *client) enroll(ctx context.Context, id, product string, seats int) (string, error) {
	out, err := c.fleet.Enroll(ctx, api.EnrollRequest{FactoryID: id, Kind: fleet.KindStatic, Products: []string{product}, SeatLimit: seats})
	if err != nil {
		return "", err
	}
	if out.Token == "" {
		return "", fmt.Errorf("enroll %s: no token in the answer", id)
	}
	return out.Token, nil
}

// manifest is a job manifest for repo needing caps.
func manifest(title, repo string, caps []string) string {
	return fmt.Sprintf("---\ntitle: %s\nrepo: %s\ncapabilities: [%s]\n---\nBenchmark job %s: do nothing.\n",
		title, repo, strings.Join(caps, ", "), title)
}

// submit submits a manifest (raw Markdown) and returns the job id.
func (c *client) submit(ctx context.Context, product, m string) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	req := api.Request{Method: http.MethodPost, Path: "/jobs", Product: product, Body: []byte(m), ContentType: "text/markdown"}
	if _, err := c.fleet.JSON(ctx, req, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", errors.New("submit: no job id in the answer")
	}
	return out.ID, nil
}

// accept is the push transport's claim; it returns the lease epoch.
func (c *client) accept(ctx context.Context, m protocol.DispatchMessage) (int64, error) {
	cl, err := c.fleet.Accept(ctx, api.AcceptRequest{JobID: m.JobID, DispatchEpoch: &m.DispatchEpoch, ProductID: m.ProductID})
	if err != nil {
		return 0, err
	}
	return cl.LeaseEpoch, nil
}

// patchStage moves the holder's job to stage under its lease epoch.
func (c *client) patchStage(ctx context.Context, product, id string, stage fleet.Stage, epoch int64) error {
	return c.fleet.Patch(ctx, product, id, api.PatchRequest{Stage: &stage, LeaseEpoch: &epoch})
}

// cancel cancels a job as the operator.
func (c *client) cancel(ctx context.Context, product, id string) error {
	_, err := c.fleet.Act(ctx, product, id, "cancel", "benchmark cleanup")
	return err
}

// listJobs lists every job of product, following the cursor.
func (c *client) listJobs(ctx context.Context, product string) ([]*fleet.Job, error) {
	var all []*fleet.Job
	cursor := ""
	for range 10_000 { // 500 per page: far more pages than any run makes
		page, err := c.fleet.ListJobs(ctx, api.ListJobsOptions{Product: product, Limit: 500, Cursor: cursor})
		if err != nil {
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
	return c.fleet.JSON(ctx, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(id), Product: product}, nil)
}

// jobInstants reads a job's createdAt and dispatch.at.
func (c *client) jobInstants(ctx context.Context, id string) (created, stamped time.Time, err error) {
	var j struct {
		CreatedAt time.Time `json:"createdAt"`
		Dispatch  struct {
			At time.Time `json:"at"`
		} `json:"dispatch"`
	}
	if _, err := c.fleet.JSON(ctx, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(id), Product: latencyProduct}, &j); err != nil {
		return time.Time{}, time.Time{}, err
	}
	if j.CreatedAt.IsZero() || j.Dispatch.At.IsZero() {
		return time.Time{}, time.Time{}, fmt.Errorf("job %s has no createdAt or dispatch.at", id)
	}
	return j.CreatedAt, j.Dispatch.At, nil
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
	// BumpsSkipped counts change-feed batches whose ledger bump found no
	// sweep armed, so wrote nothing (a refused conditional increment).
	BumpsSkipped int64 `json:"ledgerBumpsSkipped"`
	// SeatFeedDecoded and SeatFeedNoted count the job versions the
	// factory list's refreshes read: decoded, or taken from the note the
	// handler made as it wrote them.
	SeatFeedDecoded int64 `json:"seatFeedDecoded"`
	SeatFeedNoted   int64 `json:"seatFeedNoted"`
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
	if _, err := c.fleet.JSON(ctx, api.Request{Method: http.MethodGet, Path: "/metrics"}, &m); err != nil {
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
	Feeds map[string]hostemu.FeedStatus `json:"feeds"`
	Store *storecount.Counts            `json:"store"`
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
	if err := c.admin(ctx, http.MethodGet, "/admin/host/status", nil, &st); err != nil {
		return st, err
	}
	if st.Store == nil {
		return st, errors.New("/admin/host/status has no store section")
	}
	return st, nil
}
