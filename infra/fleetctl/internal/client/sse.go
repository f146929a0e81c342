package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
)

// Event is one server-sent event.
type Event struct {
	ID   string
	Type string
	Data string
}

// Stream reads the event stream at path from after (sent as Last-Event-ID
// when set) and calls fn for every event with data, until the server ends
// the stream, fn returns an error, or ctx ends. It returns the id of the
// last event seen (a bare id line counts: it moves the resume point), so the
// caller can resume where it stood. opened, when set, is called once the
// server has accepted the stream.
func (c *Client) Stream(ctx context.Context, path, after string, opened func(), fn func(Event) error) (string, error) {
	req := Request{Method: http.MethodGet, Path: path, Accept: "text/event-stream"}
	hc := c.HTTP
	// A stream outlives any whole-request timeout.
	if hc == nil || hc.Timeout != 0 {
		cl := http.Client{}
		if hc != nil {
			cl.Transport = hc.Transport
		}
		hc = &cl
	}
	sc := *c
	sc.HTTP = hc
	resp, err := sc.openWith(ctx, req, after)
	if err != nil {
		return after, err
	}
	defer resp.Body.Close()
	if opened != nil {
		opened()
	}
	last := after
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var ev Event
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return last, nil
			}
			return last, &Error{Code: "unavailable", Message: "the stream broke: " + err.Error()}
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

func (c *Client) openWith(ctx context.Context, req Request, lastID string) (*http.Response, error) {
	if lastID == "" {
		return c.open(ctx, req)
	}
	return c.openHeader(ctx, req, "Last-Event-ID", lastID)
}
