package httpapi

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/live"
	"github.com/gigafactory/fleet/shared/fleet"
)

// sseBlock is one block of a stream: an event, a bare id, or a comment.
type sseBlock struct {
	id, event, data, comment string
	hasID                    bool
}

// sseStream reads a live stream block by block in the background.
type sseStream struct {
	t      testing.TB
	resp   *http.Response
	blocks chan sseBlock
	done   chan struct{} // closed when the server ended the stream
}

func (f *fixture) stream(path, token string, opts ...reqOption) *sseStream {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", f.url+path, nil)
	require.NoError(f.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for _, o := range opts {
		o(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { resp.Body.Close() })
	require.Equal(f.t, 200, resp.StatusCode)
	require.Equal(f.t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sseStream{t: f.t, resp: resp, blocks: make(chan sseBlock, 100), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		rd := bufio.NewReader(resp.Body)
		var b sseBlock
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				s.blocks <- b
				b = sseBlock{}
			case strings.HasPrefix(line, ":"):
				b.comment = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "id: "):
				b.id, b.hasID = line[4:], true
			case strings.HasPrefix(line, "event: "):
				b.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				b.data = line[6:]
			}
		}
	}()
	return s
}

// next is the next block; it fails the test after a generous bound.
func (s *sseStream) next() sseBlock {
	s.t.Helper()
	select {
	case b := <-s.blocks:
		return b
	case <-s.done:
		select {
		case b := <-s.blocks:
			return b
		default:
		}
		s.t.Fatal("stream ended")
	case <-time.After(10 * time.Second):
		s.t.Fatal("no block within 10s")
	}
	return sseBlock{}
}

// nextEvent skips comments and bare ids.
func (s *sseStream) nextEvent() (sseBlock, fleet.Event) {
	s.t.Helper()
	for {
		b := s.next()
		if b.event == "" {
			continue
		}
		var ev fleet.Event
		if b.event != "factory" {
			require.NoError(s.t, json.Unmarshal([]byte(b.data), &ev), b.data)
		}
		return b, ev
	}
}

// ended waits for the server to end the stream, with no event left unread.
func (s *sseStream) ended() {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Fatal("stream did not end")
	}
	for {
		select {
		case b := <-s.blocks:
			require.Empty(s.t, b.event, "event after the end: %+v", b)
		default:
			return
		}
	}
}

func TestJobStreamReplaysThenGoesLiveAndEndsAtTerminal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob()

	s := f.stream("/api/fleet/jobs/"+j.ID+"/events/stream", rootToken)
	b, ev := s.nextEvent()
	require.Equal(t, "1", b.id)
	require.Equal(t, "submitted", b.event)
	require.Equal(t, j.ID, ev.JobID)
	b, _ = s.nextEvent()
	require.Equal(t, "2", b.id)
	require.Equal(t, "claimed", b.event)

	// Live: a write after the stream caught up arrives without polling.
	f.ok(200, nil, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch})
	b, ev = s.nextEvent()
	require.Equal(t, "3", b.id)
	require.Equal(t, fleet.StageBuilding, ev.To)

	f.ok(200, nil, "POST", "/api/fleet/fail", tok, map[string]any{"jobId": j.ID, "leaseEpoch": c.LeaseEpoch, "reason": "broke", "retryable": false})
	b, ev = s.nextEvent()
	require.Equal(t, "4", b.id)
	require.True(t, ev.To.Terminal(), "%+v", ev)
	s.ended()

	// A stream opened on a job already terminal replays and ends.
	s = f.stream("/api/fleet/jobs/"+j.ID+"/events/stream?after=3", rootToken)
	b, _ = s.nextEvent()
	require.Equal(t, "4", b.id)
	s.ended()
}

// TestJobStreamShowsAnEventWhoseWriteFailed: the write of the building
// move's event fails after the move committed. The stream shows it, in
// order and at once, when the next event wakes it (no gap to wait out),
// and the job's events list it.
func TestJobStreamShowsAnEventWhoseWriteFailed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob()

	s := f.stream("/api/fleet/jobs/"+j.ID+"/events/stream?after=2", rootToken)
	f.faulty.setLoseEvents(true)
	f.ok(200, nil, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch})
	f.faulty.setLoseEvents(false)
	f.ok(200, nil, "POST", "/api/fleet/fail", tok, map[string]any{"jobId": j.ID, "leaseEpoch": c.LeaseEpoch, "reason": "broke", "retryable": false})
	b, ev := s.nextEvent()
	require.Equal(t, "3", b.id)
	require.Equal(t, fleet.StageBuilding, ev.To)
	b, _ = s.nextEvent()
	require.Equal(t, "4", b.id)
	s.ended()

	var page struct{ Items []fleet.Event }
	f.ok(200, &page, "GET", "/api/fleet/jobs/"+j.ID+"/events", rootToken, nil)
	require.Len(t, page.Items, 4)
	for i, ev := range page.Items {
		require.Equal(t, int64(i+1), ev.Seq)
	}
}

func TestJobStreamResumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, _, _ := f.heldJob()
	path := "/api/fleet/jobs/" + j.ID + "/events/stream"

	for _, tc := range []struct {
		name  string
		path  string
		opts  []reqOption
		first string
	}{
		{"Last-Event-ID", path, []reqOption{header("Last-Event-ID", "1")}, "2"},
		{"after", path + "?after=1", nil, "2"},
		{"Last-Event-ID wins over after", path + "?after=0", []reqOption{header("Last-Event-ID", "1")}, "2"},
		{"from the start", path, nil, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := f.stream(tc.path, rootToken, tc.opts...)
			b, _ := s.nextEvent()
			require.Equal(t, tc.first, b.id)
		})
	}
}

func TestJobStreamKeepAliveAndEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	j := f.submit("p1", manifest("r1"))
	s := f.stream("/api/fleet/jobs/"+j.ID+"/events/stream", rootToken)
	b, _ := s.nextEvent() // the stream's ticker exists once it has sent
	require.Equal(t, "1", b.id)

	f.clock.Advance(DefaultKeepAlive)
	require.Equal(t, sseBlock{comment: "keep-alive"}, s.next())
	f.clock.Advance(DefaultKeepAlive)
	require.Equal(t, sseBlock{comment: "keep-alive"}, s.next())

	// MaxStream: the stream ends (its client resumes with its last id).
	f.clock.Advance(DefaultMaxStream)
	s.ended()
}

func TestStreamRefusesBadResumeIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	j := f.submit("p1", manifest("r1"))
	jobPath := "/api/fleet/jobs/" + j.ID + "/events/stream"
	foreign := "p1." + base64.RawURLEncoding.EncodeToString([]byte(`{"e":"not-a-rev","f":"7"}`))
	for _, tc := range []struct {
		name, path string
		opts       []reqOption
		field      string
	}{
		{"job: Last-Event-ID not a seq", jobPath, []reqOption{header("Last-Event-ID", "abc")}, "Last-Event-ID"},
		{"job: negative after", jobPath + "?after=-1", nil, "after"},
		{"job: after not a seq", jobPath + "?after=p1.xyz", nil, "after"},
		{"product: Last-Event-ID not an id", "/api/fleet/events/stream", []reqOption{header("Last-Event-ID", "17")}, "Last-Event-ID"},
		{"product: after not base64", "/api/fleet/events/stream?after=p1.%21%21", nil, "after"},
		{"product: continuation the store never issued", "/api/fleet/events/stream", []reqOption{header("Last-Event-ID", foreign)}, "Last-Event-ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := f.call("GET", tc.path, rootToken, nil, append(tc.opts, product("p1"))...)
			require.Equal(t, 400, res.status, "%s", res)
			require.Equal(t, tc.field, res.errorOf(t).Field)
		})
	}
	res := f.call("GET", "/api/fleet/jobs/nope/events/stream", rootToken, nil, product("p1"))
	require.Equal(t, 404, res.status, "%s", res)
}

// TestResumeIDLengthCapped: a resume id longer than any the API issues is
// a 400 naming where it came from, without the id: it was parsed and read
// (on Cosmos one request per feed range it listed) and echoed back whole.
func TestResumeIDLengthCapped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	j := f.submit("p1", manifest("r1"))
	jobPath := "/api/fleet/jobs/" + j.ID + "/events/stream"
	long := "p2." + base64.RawURLEncoding.EncodeToString([]byte(`{"j":"`+strings.Repeat("A", maxResumeID)+`","f":""}`))
	for _, tc := range []struct {
		name, path string
		opts       []reqOption
		field      string
	}{
		{"product: Last-Event-ID", "/api/fleet/events/stream", []reqOption{header("Last-Event-ID", long)}, "Last-Event-ID"},
		{"product: after", "/api/fleet/events/stream?after=" + long, nil, "after"},
		{"product long poll: after", "/api/fleet/events?after=" + long, nil, "after"},
		{"job: Last-Event-ID", jobPath, []reqOption{header("Last-Event-ID", strings.Repeat("1", maxResumeID+1))}, "Last-Event-ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := f.call("GET", tc.path, rootToken, nil, append(tc.opts, product("p1"))...)
			require.Equal(t, 400, res.status, "%s", res)
			e := res.errorOf(t)
			require.Equal(t, tc.field, e.Field)
			require.Contains(t, e.Message, "at most 32768")
			require.Less(t, len(res.body), 1024, "the id is not echoed")
		})
	}
	// The longest id allowed is read as any other.
	res := f.call("GET", "/api/fleet/events?after="+long[:maxResumeID], rootToken, nil, product("p1"))
	require.Equal(t, 400, res.status, "%s", res)
	require.NotContains(t, res.errorOf(t).Message, "at most 32768")
}

func TestProductStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("other", "r2")
	old := f.submit("p1", manifest("r1"))

	s := f.stream("/api/fleet/events/stream", rootToken, product("p1"))
	start := s.next()
	require.True(t, start.hasID, "the stream opens with its position")
	require.Empty(t, start.event)

	// Only changes made after it connected, and only the product's.
	f.submit("other", manifest("r2"))
	j := f.submit("p1", manifest("r1"))
	b, ev := s.nextEvent()
	require.Equal(t, "submitted", b.event)
	require.Equal(t, j.ID, ev.JobID, "the old job %s or another product's leaked in", old.ID)

	// A factory of the product shows as a factory change.
	f.enroll("f1", []string{"p1"}, "r1")
	b, _ = s.nextEvent()
	require.Equal(t, "factory", b.event)
	var fac fleet.Factory
	require.NoError(t, json.Unmarshal([]byte(b.data), &fac))
	require.Equal(t, "f1", fac.ID)

	// Resuming from the opening id replays everything since, in order.
	later := f.submit("p1", manifest("r1"))
	r := f.stream("/api/fleet/events/stream", rootToken, product("p1"), header("Last-Event-ID", start.id))
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != later.ID {
		b, ev := r.nextEvent()
		if b.event != "factory" {
			seen = append(seen, ev.JobID)
		}
	}
	require.Equal(t, []string{j.ID, later.ID}, seen)

	// Keep-alive with the position the feeds moved to.
	f.clock.Advance(DefaultKeepAlive)
	for {
		b := s.next()
		if b.comment == "keep-alive" {
			break
		}
	}
}

func TestEventsLongPoll(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	tok := f.enroll("f1", []string{"p1"}, "r1")
	j := f.submit("p1", manifest("r1"))

	got := make(chan result, 1)
	go func() { got <- f.call("GET", "/api/fleet/jobs/"+j.ID+"/events?after=1&wait=30s", rootToken, nil) }()
	<-f.clock.TickerMade() // the watcher's poll
	<-f.clock.TickerMade() // the request's wait
	f.claim(tok)
	res := <-got
	require.Equal(t, 200, res.status, "%s", res)
	var evs api.List[fleet.Event]
	require.NoError(t, json.Unmarshal(res.body, &evs))
	require.Len(t, evs.Items, 1)
	require.Equal(t, fleet.EventClaimed, evs.Items[0].Type)

	go func() { got <- f.call("GET", "/api/fleet/jobs/"+j.ID+"/events?after=2&wait=30s", rootToken, nil) }()
	<-f.clock.TickerMade()
	<-f.clock.TickerMade()
	f.clock.Advance(30 * time.Second)
	res = <-got
	require.Equal(t, 200, res.status, "%s", res)
	require.JSONEq(t, `{"items":[]}`, string(res.body))

	res = f.call("GET", "/api/fleet/jobs/"+j.ID+"/events?wait=2h", rootToken, nil)
	require.Equal(t, 400, res.status)
	require.Equal(t, "wait", res.errorOf(t).Field)
}

func TestProductEventsLongPoll(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("other", "r2")
	type answer struct {
		Items []struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"items"`
		Position string `json:"position"`
	}
	var a answer
	f.ok(200, &a, "GET", "/api/fleet/events", rootToken, nil, product("p1"))
	require.Empty(t, a.Items, "without after it starts from now")
	require.NotEmpty(t, a.Position)

	f.submit("other", manifest("r2"))
	j := f.submit("p1", manifest("r1"))
	var b answer
	f.ok(200, &b, "GET", "/api/fleet/events?after="+a.Position, rootToken, nil, product("p1"))
	require.Len(t, b.Items, 1, "only p1's change")
	require.Equal(t, "submitted", b.Items[0].Type)
	var ev fleet.Event
	require.NoError(t, json.Unmarshal(b.Items[0].Data, &ev))
	require.Equal(t, j.ID, ev.JobID)

	// Nothing new: the answer waits for the next change.
	got := make(chan result, 1)
	go func() {
		got <- f.call("GET", "/api/fleet/events?wait=30s&after="+b.Position, rootToken, nil, product("p1"))
	}()
	<-f.clock.TickerMade() // the watcher's poll
	<-f.clock.TickerMade() // the request's wait
	k := f.submit("p1", manifest("r1"))
	res := <-got
	require.Equal(t, 200, res.status, "%s", res)
	var c answer
	require.NoError(t, json.Unmarshal(res.body, &c))
	require.Len(t, c.Items, 1)
	require.NoError(t, json.Unmarshal(c.Items[0].Data, &ev))
	require.Equal(t, k.ID, ev.JobID)

	res = f.call("GET", "/api/fleet/events?after=nope", rootToken, nil, product("p1"))
	require.Equal(t, 400, res.status)
	require.Equal(t, "after", res.errorOf(t).Field)
}

// TestStreamsBehindABufferingFrontDoor: with Buffered (the Lambda front
// door), a stream ends as soon as it has sent events, so the buffered
// answer reaches the client and its reconnect with Last-Event-ID long-polls.
func TestStreamsBehindABufferingFrontDoor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, buffered)
	j, tok, c := f.heldJob()
	path := "/api/fleet/jobs/" + j.ID + "/events/stream"

	s := f.stream(path, rootToken)
	for _, want := range []string{"1", "2"} {
		b, _ := s.nextEvent()
		require.Equal(t, want, b.id)
	}
	s.ended()

	s = f.stream(path, rootToken, header("Last-Event-ID", "2"))
	f.ok(200, nil, "PATCH", "/api/fleet/jobs/"+j.ID, tok, map[string]any{"stage": "building", "leaseEpoch": c.LeaseEpoch})
	b, _ := s.nextEvent()
	require.Equal(t, "3", b.id)
	s.ended()

	p := f.stream("/api/fleet/events/stream", rootToken, product("p1"))
	start := p.next()
	require.True(t, start.hasID)
	k := f.submit("p1", manifest("r1"))
	_, ev := p.nextEvent()
	require.Equal(t, k.ID, ev.JobID)
	p.ended()

	// Nothing to send: it ends at MaxStream with the position to resume from.
	p = f.stream("/api/fleet/events/stream", rootToken, product("p1"))
	require.True(t, p.next().hasID)
	f.clock.Advance(DefaultMaxStream)
	p.ended()
}

// TestProductEventsReplayPages: a position far back does not read the whole
// history into one answer. The long poll answers a page (at least
// maxEventPage changes, ending on a feed page) and the position after it
// at once, without waiting, and the client pages on to the rest; the
// stream ends after the same page and its reconnect from the last id
// carries on. Each change comes once.
func TestProductEventsReplayPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	var start api.ProductChanges
	f.ok(200, &start, "GET", "/api/fleet/events", rootToken, nil, product("p1"))
	const n = maxEventPage + 150
	for range n {
		f.submit("p1", manifest("r1"))
	}

	jobsOf := func(items []api.ProductChange) []string {
		var ids []string
		for _, it := range items {
			var ev fleet.Event
			require.NoError(t, json.Unmarshal(it.Data, &ev))
			ids = append(ids, ev.JobID)
		}
		return ids
	}
	var first, rest, none api.ProductChanges
	// A wait would block a caught-up answer: this one answers at once.
	f.ok(200, &first, "GET", "/api/fleet/events?wait=30s&after="+start.Position, rootToken, nil, product("p1"))
	require.GreaterOrEqual(t, len(first.Items), maxEventPage)
	require.Less(t, len(first.Items), n, "one page, not the whole history")
	f.ok(200, &rest, "GET", "/api/fleet/events?after="+first.Position, rootToken, nil, product("p1"))
	f.ok(200, &none, "GET", "/api/fleet/events?after="+rest.Position, rootToken, nil, product("p1"))
	require.Empty(t, none.Items)
	ids := append(jobsOf(first.Items), jobsOf(rest.Items)...)
	require.Len(t, ids, n)
	seen := map[string]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "job %s twice", id)
		seen[id] = true
	}

	s := f.stream("/api/fleet/events/stream", rootToken, product("p1"), header("Last-Event-ID", start.Position))
	streamed, last := 0, ""
	count := func(b sseBlock) {
		if b.event != "" {
			streamed++
		}
		if b.hasID {
			last = b.id
		}
	}
	for b, ok := s.nextOrEnd(); ok; b, ok = s.nextOrEnd() {
		count(b)
	}
	require.GreaterOrEqual(t, streamed, maxEventPage)
	require.Less(t, streamed, n, "the stream ended after a page")
	s = f.stream("/api/fleet/events/stream", rootToken, product("p1"), header("Last-Event-ID", last))
	for range n - streamed {
		s.nextEvent()
	}
}

func TestReplayPager(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		items []int // the answer's size after each page
		full  int   // the page that fills it, 1-based; 0 none
	}{
		"a page of events":     {items: []int{100, 300, maxEventPage}, full: 3},
		"pages without events": {items: make([]int, maxReplayPages), full: maxReplayPages},
		"short":                {items: []int{1, 2, 3}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var p replayPager
			for i, items := range tc.items {
				err := p.page(items)
				if i+1 == tc.full {
					require.ErrorIs(t, err, live.ErrEnough)
					require.True(t, p.full)
					return
				}
				require.NoError(t, err)
				require.False(t, p.full)
			}
			require.Zero(t, tc.full)
		})
	}
}
