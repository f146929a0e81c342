package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sseEvent is one server-sent event as a plain client parses it.
type sseEvent struct {
	ID, Event, Data string
}

// sseClient is a text/event-stream reader over plain net/http and bufio:
// what a script without an SSE library does. It remembers the last id as
// EventSource does (a block with only an id moves it too).
type sseClient struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	blocks chan sseBlock
	done   chan struct{}
	LastID string
}

// sseBlock is one block: an event, or a bare id (hasID, no data).
type sseBlock struct {
	ev    sseEvent
	hasID bool
}

// openSSE connects to url with the operator token and optional headers
// (name, value pairs).
func openSSE(t *testing.T, url, token string, headers ...string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	c := &sseClient{t: t, resp: resp, cancel: cancel, blocks: make(chan sseBlock, 1000), done: make(chan struct{})}
	t.Cleanup(c.Close)
	go c.read()
	return c
}

func (c *sseClient) read() {
	defer close(c.done)
	rd := bufio.NewReader(c.resp.Body)
	var b sseBlock
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if b.hasID || b.ev.Data != "" {
				c.blocks <- b
			}
			b = sseBlock{}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			b.ev.ID, b.hasID = value, true
		case "event":
			b.ev.Event = value
		case "data":
			if b.ev.Data != "" {
				b.ev.Data += "\n"
			}
			b.ev.Data += value
		}
	}
}

// Next returns the next event, or ok false when the server ended the
// stream. It fails the test when nothing comes within a minute.
func (c *sseClient) Next() (sseEvent, bool) {
	c.t.Helper()
	timeout := time.After(time.Minute)
	for {
		var b sseBlock
		select {
		case b = <-c.blocks:
		case <-c.done:
			select {
			case b = <-c.blocks:
			default:
				return sseEvent{}, false
			}
		case <-timeout:
			c.t.Fatal("no event within a minute")
		}
		if b.hasID {
			c.LastID = b.ev.ID
		}
		if b.ev.Data != "" {
			return b.ev, true
		}
	}
}

// Close disconnects.
func (c *sseClient) Close() {
	c.cancel()
	c.resp.Body.Close()
	<-c.done
}

type streamedEvent struct {
	ID    string `json:"id"`
	JobID string `json:"jobId"`
	Seq   int64  `json:"seq"`
	Type  string `json:"type"`
	To    string `json:"to"`
}

// TestSSEJobLifeWithResume: a plain SSE client follows a job through a real
// factory, disconnects mid-way, reconnects with Last-Event-ID and, after
// de-duplication by id, has every event of the job's life exactly once, in
// seq order; the stream ends after the terminal event. All of it through
// the local stack's host emulator, which proxies as the Functions host does
// with enableProxyingHttpRequest.
func TestSSEJobLifeWithResume(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	gate := filepath.Join(t.TempDir(), "gate")
	// The engine waits for the test, so the disconnect falls mid-run.
	eng := facEngine(t, `while [ ! -f "$TEST_GATE" ]; do sleep 0.05; done
echo done >> result.txt`)
	startFactory(t, s, "fa", "demo", 1, repo, eng, "TEST_GATE="+gate)

	id := s.Submit("demo", Manifest("Stream me", "app", "engine:fake"))
	url := s.API + "/jobs/" + id + "/events/stream"
	got := map[string]streamedEvent{}
	var order []string
	take := func(c *sseClient) (last streamedEvent, ended bool) {
		ev, ok := c.Next()
		if !ok {
			return last, true
		}
		var e streamedEvent
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &e), ev.Data)
		require.Equal(t, strconv.FormatInt(e.Seq, 10), ev.ID, "the SSE id is the event's seq")
		require.Equal(t, e.Type, ev.Event)
		require.Equal(t, id, e.JobID)
		if _, dup := got[ev.ID]; !dup {
			order = append(order, ev.ID)
		}
		got[ev.ID] = e
		return e, false
	}

	first := openSSE(t, url, s.Token, "x-product-id", "demo")
	for {
		e, ended := take(first)
		require.False(t, ended, "the stream ended before the job was running")
		if e.To == "building" {
			break
		}
	}
	lastID := first.LastID
	first.Close()

	// While nobody listens, the job finishes.
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)

	second := openSSE(t, url, s.Token, "x-product-id", "demo", "Last-Event-ID", lastID)
	var last streamedEvent
	for {
		e, ended := take(second)
		if ended {
			break
		}
		last = e
	}
	require.Equal(t, "shipped", last.To, "the stream ends after the terminal event")

	// Every event of the job's life, once each, in seq order.
	r := s.Op(http.MethodGet, "/jobs/"+id+"/events", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var all struct {
		Items []streamedEvent `json:"items"`
	}
	r.JSON(t, &all)
	require.NotEmpty(t, all.Items)
	var want []string
	for _, e := range all.Items {
		want = append(want, strconv.FormatInt(e.Seq, 10))
		require.Equal(t, e, got[strconv.FormatInt(e.Seq, 10)])
	}
	require.Equal(t, want, order)
	require.Len(t, got, len(all.Items))
}

// TestSSEProductStreamSeesNewJob: the product stream delivers a job
// submitted after the client connected (and not one of another product).
func TestSSEProductStreamSeesNewJob(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "app")
	s.Product("other", "elsewhere")
	c := openSSE(t, s.API+"/events/stream", s.Token, "x-product-id", "demo")

	s.Submit("other", Manifest("Not for demo", "elsewhere"))
	id := s.Submit("demo", Manifest("Watch me", "app"))
	ev, ok := c.Next()
	require.True(t, ok)
	require.Equal(t, "submitted", ev.Event)
	var e streamedEvent
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &e))
	require.Equal(t, id, e.JobID)
	require.NotEmpty(t, ev.ID)

	// A client resuming from that id misses nothing that came after.
	c.Close()
	next := s.Submit("demo", Manifest("After the disconnect", "app"))
	r := openSSE(t, s.API+"/events/stream", s.Token, "x-product-id", "demo", "Last-Event-ID", ev.ID)
	for {
		ev, ok := r.Next()
		require.True(t, ok)
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &e))
		if e.JobID == next {
			break
		}
		require.Equal(t, id, e.JobID, "only the job before, seen again, may precede it")
	}
}
