package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
)

// Event is one server-sent event of a stream.
type Event struct {
	ID   string
	Type string
	Data string
}

// StreamRequest is one read of an event stream.
type StreamRequest struct {
	// Path is the stream below /api/fleet, e.g. "/jobs/abc/events/stream".
	Path    string
	Product string
	// After is the id to resume after, sent as Last-Event-ID.
	After string
	// Opened, when set, is called once the server has accepted the stream.
	Opened func()
	// Header, when set, is given the accepted stream's response headers
	// (a log stream names its run's epoch there).
	Header func(http.Header)
}

// Stream reads the event stream r names and calls fn for every event with
// data, until the server ends the stream, fn returns an error, or ctx
// ends. It returns the id of the last event seen (a bare id line counts:
// it moves the resume point), so the caller resumes where it stood.
func (c *Client) Stream(ctx context.Context, r StreamRequest, fn func(Event) error) (string, error) {
	req := Request{Method: http.MethodGet, Path: r.Path, Product: r.Product, Accept: "text/event-stream"}
	if r.After != "" {
		req.Header = http.Header{HeaderLastEventID: {r.After}}
	}
	resp, err := c.Open(ctx, req)
	if err != nil {
		return r.After, err
	}
	defer resp.Body.Close()
	if r.Opened != nil {
		r.Opened()
	}
	if r.Header != nil {
		r.Header(resp.Header)
	}
	return readEvents(ctx, resp.Body, r.After, fn)
}

// readEvents parses text/event-stream from body.
func readEvents(ctx context.Context, body io.Reader, last string, fn func(Event) error) (string, error) {
	rd := bufio.NewReaderSize(body, 64<<10)
	var ev Event
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return last, nil
			}
			return last, &Error{Code: errCodeUnavailable, Message: "the stream broke: " + err.Error(), Err: err}
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if ev.ID != "" {
				last = ev.ID
			}
			if ev.Data != "" {
				if ev.Type == "" {
					ev.Type = "message"
				}
				if err := fn(ev); err != nil {
					return last, err
				}
			}
			ev = Event{}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "id":
			ev.ID = v
		case "event":
			ev.Type = v
		case "data":
			if ev.Data != "" {
				ev.Data += "\n"
			}
			ev.Data += v
		}
	}
}
