package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
)

// Live output (API.md "Live output"): the headers and bodies of the log
// routes, and their calls.

// Log headers.
const (
	// HeaderLogSize is the offset after the last byte of the run's log:
	// on a GET, where the answer ends (read on from there); on an append,
	// where the log stands, a 409 gap included (resend from there).
	HeaderLogSize = "X-Fleet-Log-Size"
	// HeaderLogStart is the offset of the first byte the log still keeps:
	// earlier ones passed the cap (FLEET_MAX_LOG_BYTES) and were dropped.
	HeaderLogStart = "X-Fleet-Log-Start"
	// HeaderLogComplete is "true" once the run has ended: its log grows no
	// more.
	HeaderLogComplete = "X-Fleet-Log-Complete"
	// HeaderLogEpoch is the lease epoch of the run the answer is the log of.
	HeaderLogEpoch = "X-Fleet-Log-Epoch"
)

// Log stream event types. A chunk is the default type (message), its data
// the chunk's text as a JSON string, its id the offset after it.
const (
	// LogEventDropped says bytes before the id were dropped by the cap;
	// its data is a sentence (a JSON string) saying how many.
	LogEventDropped = "dropped"
	// LogEventEnd ends the stream of a run that has ended: its id is the
	// log's size, and nothing follows.
	LogEventEnd = "end"
)

// LogAppended answers an append: where the log stands after it.
type LogAppended struct {
	Size  int64 `json:"size"`
	Start int64 `json:"start"`
}

func logPath(id string, rest ...string) string {
	return jobPath(id, append([]string{"log"}, rest...)...)
}

// AppendLog sends a chunk of the holder's run log starting at offset. It
// is safe to repeat (a chunk already stored is accepted again), so
// transient failures are retried. A gap is an *Error with code conflict
// whose LogSize says where to resend from.
func (c *Client) AppendLog(ctx context.Context, product, jobID string, leaseEpoch, offset int64, chunk []byte) (LogAppended, error) {
	q := url.Values{"leaseEpoch": {strconv.FormatInt(leaseEpoch, 10)}, "offset": {strconv.FormatInt(offset, 10)}}
	if chunk == nil {
		chunk = []byte{}
	}
	var out LogAppended
	_, err := c.call(ctx, Request{Method: http.MethodPost, Path: logPath(jobID), Query: q, Product: product, Exact: true,
		Body: chunk, ContentType: "application/octet-stream", Retry: true}, nil, &out)
	return out, err
}

// LogSize is the log size a log answer reported (HeaderLogSize), e.g. on
// the 409 of a gap; ok is false when it said none.
func LogSize(err error) (size int64, ok bool) {
	e, isErr := errors.AsType[*Error](err)
	if !isErr || e.Header == nil {
		return 0, false
	}
	v, perr := strconv.ParseInt(e.Header.Get(HeaderLogSize), 10, 64)
	return v, perr == nil && v >= 0
}

// LogRequest reads a job's log.
type LogRequest struct {
	Product string
	JobID   string
	// Epoch is the run's lease epoch; 0 is the run holding the lease now,
	// else the newest.
	Epoch  int64
	Offset int64
}

func (r LogRequest) query() url.Values {
	q := url.Values{}
	if r.Epoch > 0 {
		q.Set("epoch", strconv.FormatInt(r.Epoch, 10))
	}
	if r.Offset > 0 {
		q.Set("offset", strconv.FormatInt(r.Offset, 10))
	}
	return q
}

// OpenLog opens GET /fleet/jobs/{id}/log: the caller reads and closes the
// body; the Header* values describe it.
func (c *Client) OpenLog(ctx context.Context, r LogRequest) (*http.Response, error) {
	return c.Open(ctx, Request{Method: http.MethodGet, Path: logPath(r.JobID), Query: r.query(), Product: r.Product, Exact: r.Product != "",
		Accept: "text/plain", Retry: true})
}

// LogStreamPath is the path of a job's log stream, for Stream.
func LogStreamPath(jobID string, epoch int64) string {
	p := logPath(jobID, "stream")
	if epoch > 0 {
		p += "?epoch=" + strconv.FormatInt(epoch, 10)
	}
	return p
}
