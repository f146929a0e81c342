package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/runlog"
	runlogfs "github.com/gigafactory/fleet/shared/runlog/fs"
)

// logURL is the append URL of job at epoch and offset.
func logURL(job string, epoch, offset int64) string {
	return fmt.Sprintf("/api/fleet/jobs/%s/log?leaseEpoch=%d&offset=%d", job, epoch, offset)
}

// appendLog posts a chunk and returns the answer.
func (f *fixture) appendLog(tok, job string, epoch, offset int64, chunk string) result {
	f.t.Helper()
	return f.call("POST", logURL(job, epoch, offset), tok, chunk, contentType("text/plain"))
}

func TestLogAppendIsFencedIdempotentAndRefusesGaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob()
	e := c.LeaseEpoch

	var got api.LogAppended
	res := f.ok(200, &got, "POST", logURL(j.ID, e, 0), tok, "line 1\n", contentType("text/plain"))
	require.Equal(t, api.LogAppended{Size: 7}, got)
	require.Equal(t, "7", res.header.Get(api.HeaderLogSize))
	f.ok(200, &got, "POST", logURL(j.ID, e, 7), tok, "line 2\n", contentType("application/octet-stream"))
	require.EqualValues(t, 14, got.Size)

	// The same chunk again (a retry whose answer was lost): accepted, unchanged.
	f.ok(200, &got, "POST", logURL(j.ID, e, 7), tok, "line 2\n", contentType("text/plain"))
	require.EqualValues(t, 14, got.Size)
	// Overlapping the end: only the new part.
	f.ok(200, &got, "POST", logURL(j.ID, e, 12), tok, "2\nline 3\n", contentType("text/plain"))
	require.EqualValues(t, 21, got.Size)

	// A gap: 409 conflict naming offset, and where to resend from.
	res = f.appendLog(tok, j.ID, e, 30, "lost?\n")
	require.Equal(t, 409, res.status, "%s", res)
	require.Equal(t, "conflict", string(res.errorOf(t).Code))
	require.Equal(t, "offset", res.errorOf(t).Field)
	require.Equal(t, "21", res.header.Get(api.HeaderLogSize))

	// A stale epoch, or a factory not holding the job: fenced, nothing stored.
	res = f.appendLog(tok, j.ID, e-1, 21, "stale\n")
	require.Equal(t, 409, res.status, "%s", res)
	require.Equal(t, "fenced", string(res.errorOf(t).Code))
	other := f.enroll("f2", []string{"p1"}, "r1")
	res = f.appendLog(other, j.ID, e, 21, "not mine\n")
	require.Equal(t, "fenced", string(res.errorOf(t).Code))
	require.Equal(t, 403, f.appendLog(rootToken, j.ID, e, 21, "operator\n").status, "only the holder appends")

	res = f.call("GET", "/api/fleet/jobs/"+j.ID+"/log", rootToken, nil)
	require.Equal(t, 200, res.status)
	require.Equal(t, "line 1\nline 2\nline 3\n", string(res.body))
	require.Equal(t, "text/plain; charset=utf-8", res.header.Get("Content-Type"))
	require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"))
	require.Equal(t, "false", res.header.Get(api.HeaderLogComplete))
	require.Equal(t, "21", res.header.Get(api.HeaderLogSize))
	require.Equal(t, strconv.FormatInt(e, 10), res.header.Get(api.HeaderLogEpoch))
	res = f.call("GET", "/api/fleet/jobs/"+j.ID+"/log?offset=14", rootToken, nil)
	require.Equal(t, "line 3\n", string(res.body))

	// The run ends: the log is complete, and the holder can add no more.
	f.ok(200, nil, "POST", "/api/fleet/fail", tok, map[string]any{"jobId": j.ID, "leaseEpoch": e, "reason": "x", "retryable": false})
	res = f.call("GET", "/api/fleet/jobs/"+j.ID+"/log", rootToken, nil)
	require.Equal(t, "true", res.header.Get(api.HeaderLogComplete))
	require.Equal(t, "fenced", string(f.appendLog(tok, j.ID, e, 21, "late\n").errorOf(t).Code))
}

func TestLogBadInputNamesTheParameter(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob()
	base := "/api/fleet/jobs/" + j.ID + "/log"
	for _, tc := range []struct {
		method, path, token, field string
		body                       any
		want                       int
	}{
		{"POST", base + "?offset=0", tok, "leaseEpoch", "x", 400},
		{"POST", base + fmt.Sprintf("?leaseEpoch=%d", c.LeaseEpoch), tok, "offset", "x", 400},
		{"POST", logURL(j.ID, c.LeaseEpoch, -1), tok, "offset", "x", 400},
		{"POST", base + "?leaseEpoch=x&offset=0", tok, "leaseEpoch", "x", 400},
		{"POST", logURL(j.ID, c.LeaseEpoch, 0) + "&extra=1", tok, "extra", "x", 400},
		{"POST", logURL(j.ID, c.LeaseEpoch, 0), tok, "body", strings.Repeat("x", 1<<20+1), 413},
		{"GET", base + "?epoch=0", rootToken, "epoch", nil, 400},
		{"GET", base + "?epoch=99", rootToken, "epoch", nil, 404},
		{"GET", base + "?offset=5", rootToken, "offset", nil, 400}, // past the end
		{"GET", base + "?offset=-1", rootToken, "offset", nil, 400},
		{"GET", base + "/stream?epoch=abc", rootToken, "epoch", nil, 400},
		{"GET", base + "/stream?after=7", rootToken, "after", nil, 400}, // past the end
		{"GET", base + "/stream?after=x", rootToken, "after", nil, 400},
	} {
		res := f.call(tc.method, tc.path, tc.token, tc.body, contentType("text/plain"))
		require.Equal(t, tc.want, res.status, "%s %s: %s", tc.method, tc.path, res)
		require.Equal(t, tc.field, res.errorOf(t).Field, "%s %s", tc.method, tc.path)
	}
	res := f.call("GET", base+"/stream", rootToken, nil, header(api.HeaderLastEventID, "nope"))
	require.Equal(t, 400, res.status)
	require.Equal(t, api.HeaderLastEventID, res.errorOf(t).Field)
}

func TestLogCapKeepsTheTailAndSaysWhatWasDropped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob()
	var all strings.Builder
	for i := range 40 {
		line := fmt.Sprintf("line %02d\n", i) // 8 bytes
		require.Equal(t, 200, f.appendLog(tok, j.ID, c.LeaseEpoch, int64(all.Len()), line).status)
		all.WriteString(line)
	}
	res := f.call("GET", "/api/fleet/jobs/"+j.ID+"/log", rootToken, nil)
	require.Equal(t, 200, res.status)
	start, err := strconv.ParseInt(res.header.Get(api.HeaderLogStart), 10, 64)
	require.NoError(t, err)
	require.Positive(t, start)
	require.LessOrEqual(t, int64(all.Len())-start, int64(testLogMax), "at most the cap is kept")
	note, rest, ok := strings.Cut(string(res.body), "\n")
	require.True(t, ok)
	require.Contains(t, note, fmt.Sprintf("%d bytes of this log before offset %d were dropped", start, start))
	require.Equal(t, all.String()[start:], rest, "the tail is kept whole")
	require.Equal(t, strconv.Itoa(all.Len()), res.header.Get(api.HeaderLogSize))

	s := f.stream("/api/fleet/jobs/"+j.ID+"/log/stream", rootToken)
	b := s.next()
	require.Equal(t, api.LogEventDropped, b.event)
	require.Equal(t, strconv.FormatInt(start, 10), b.id)
	require.Equal(t, all.String()[start:], s.chunksTo(t, int64(all.Len())), "then the tail, a segment per event")
}

// chunksTo reads chunks until the one whose id is size, and returns their
// text; an id out of step fails.
func (s *sseStream) chunksTo(t *testing.T, size int64) string {
	t.Helper()
	var text strings.Builder
	for {
		b := s.nextChunk(t)
		text.WriteString(decodeChunk(t, b))
		id, err := strconv.ParseInt(b.id, 10, 64)
		require.NoError(t, err)
		if id >= size {
			require.Equal(t, size, id)
			return text.String()
		}
	}
}

func decodeChunk(t *testing.T, b sseBlock) string {
	t.Helper()
	var text string
	require.NoError(t, json.Unmarshal([]byte(b.data), &text), "data %q", b.data)
	return text
}

// nextChunk is the next log chunk, keep-alives skipped.
func (s *sseStream) nextChunk(t *testing.T) sseBlock {
	t.Helper()
	for {
		if b := s.next(); b.data != "" {
			return b
		}
	}
}

// TestLogStreamResumesWithoutGapOrDuplicate: the stream sends each chunk
// with the offset after it as id; a client that reconnects with its last
// id gets exactly the bytes it lacks, whether they were stored through
// this instance (woken at once) or another one (found by the size poll).
// It ends with an end event once the run is over and every byte is sent.
func TestLogStreamResumesWithoutGapOrDuplicate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob()
	path := "/api/fleet/jobs/" + j.ID + "/log/stream"
	key := runlog.Key{Namespace: "p1", JobID: j.ID, Epoch: c.LeaseEpoch}
	var sent, seen strings.Builder
	send := func(text string) {
		require.Equal(t, 200, f.appendLog(tok, j.ID, c.LeaseEpoch, int64(sent.Len()), text).status)
		sent.WriteString(text)
	}
	send("one\n")
	s := f.stream(path, rootToken)
	b := s.nextChunk(t)
	require.Equal(t, "4", b.id)
	seen.WriteString(decodeChunk(t, b))

	send("two\n") // this instance: the wake sends it, no clock needed
	b = s.nextChunk(t)
	require.Equal(t, "8", b.id)
	seen.WriteString(decodeChunk(t, b))

	// Another instance stored it: the poll of the store's size finds it.
	_, err := f.runlogs.Append(t.Context(), key, 8, []byte("three\n"))
	require.NoError(t, err)
	sent.WriteString("three\n")
	f.clock.Advance(logPoll)
	b = s.nextChunk(t)
	require.Equal(t, "14", b.id)
	seen.WriteString(decodeChunk(t, b))

	// A disconnect; bytes arrive meanwhile (a character split across two
	// chunks among them); the client resumes with its last id.
	s.resp.Body.Close()
	send("four \xe2\x82")
	send("\xac\n")
	s = f.stream(path, rootToken, header(api.HeaderLastEventID, b.id))
	b = s.nextChunk(t)
	seen.WriteString(decodeChunk(t, b))
	require.Equal(t, strconv.Itoa(sent.Len()), b.id)
	require.Equal(t, sent.String(), seen.String(), "every byte once, in order")

	// Half a character stays back until the rest comes.
	send("five \xe2")
	send("\x82\xac\n")
	text := s.chunksTo(t, int64(sent.Len()))
	require.Equal(t, "five €\n", text, "never a broken character (U+FFFD)")
	seen.WriteString(text)

	// The run ends: the stream learns it from the job (a point read on its
	// check) and ends after the last byte with an end event.
	send("last\n")
	seen.WriteString(decodeChunk(t, s.nextChunk(t)))
	f.ok(200, nil, "POST", "/api/fleet/fail", tok, map[string]any{"jobId": j.ID, "leaseEpoch": c.LeaseEpoch, "reason": "x", "retryable": true})
	f.clock.Advance(logRunCheck)
	b = s.next()
	for b.event == "" && b.data == "" {
		b = s.next()
	}
	require.Equal(t, api.LogEventEnd, b.event)
	require.Equal(t, strconv.Itoa(sent.Len()), b.id)
	s.ended()
	require.Equal(t, sent.String(), seen.String())

	// An ended run's stream sends it all and ends at once.
	s = f.stream(path+"?epoch="+strconv.FormatInt(c.LeaseEpoch, 10), rootToken, header(api.HeaderLastEventID, "8"))
	require.Equal(t, sent.String()[8:], decodeChunk(t, s.nextChunk(t)))
	require.Equal(t, api.LogEventEnd, s.next().event)
	s.ended()
}

// TestLogStreamCountsAgainstTheCaps: a log stream takes a slot of the
// stream caps as the event streams do, and gives it back when its client
// goes away (as when the server shuts down: the request's context ends).
func TestLogStreamCountsAgainstTheCaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withStreamCaps(1, 2))
	j, _, _ := f.heldJob()
	path := "/api/fleet/jobs/" + j.ID + "/log/stream"
	s := f.stream(path, rootToken)
	requireThrottled(t, f.call("GET", path, rootToken, nil), "FLEET_MAX_STREAMS_PER_PRINCIPAL")
	requireThrottled(t, f.call("GET", "/api/fleet/jobs/"+j.ID+"/events/stream", rootToken, nil), "FLEET_MAX_STREAMS_PER_PRINCIPAL")
	require.Equal(t, 200, f.call("GET", "/api/fleet/jobs/"+j.ID+"/log", rootToken, nil).status, "the plain read is not a stream")
	s.resp.Body.Close()
	require.Eventually(t, func() bool { return f.call("GET", path, rootToken, nil).status == 200 },
		5*time.Second, 20*time.Millisecond, "the slot comes back when the client goes")
}

// TestLogStreamEndsBeforeThePlatformLimit: like the event streams, it ends
// after MaxStream; the client resumes with its last id.
func TestLogStreamEndsBeforeThePlatformLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, _, _ := f.heldJob()
	s := f.stream("/api/fleet/jobs/"+j.ID+"/log/stream", rootToken)
	f.clock.Advance(DefaultMaxStream)
	s.ended()
}

// largestWrite records the largest single Write the handler makes: what
// one stream holds in memory before it sends it.
type largestWrite struct {
	http.ResponseWriter
	max *atomic.Int64
}

func (w largestWrite) Write(p []byte) (int, error) {
	for n := int64(len(p)); ; {
		cur := w.max.Load()
		if n <= cur || w.max.CompareAndSwap(cur, n) {
			break
		}
	}
	return w.ResponseWriter.Write(p)
}

func (w largestWrite) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// another is f served by a second handler over the same stores and clock,
// as by another instance: over logs instead of f.runlogs when given, its
// writes through wrap when given.
func (f *fixture) another(logs runlog.Store, wrap func(http.ResponseWriter) http.ResponseWriter, opts ...fixtureOption) *fixture {
	c := f.coord
	if logs != nil {
		var err error
		c, err = coord.New(coord.Config{ArtifactMaxBytes: testArtifactMax}, coord.Deps{Store: f.counts, Clock: f.clock, Blobs: f.blobs, RunLogs: logs})
		require.NoError(f.t, err)
	}
	cfg := Config{OperatorTokens: []OperatorToken{{Name: "root", Token: rootToken}},
		Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: f.logLevel})), Timers: f.clock}
	for _, o := range opts {
		o(&cfg)
	}
	h := New(c, cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wrap != nil {
			w = wrap(w)
		}
		h.ServeHTTP(w, r)
	}))
	f.t.Cleanup(srv.Close)
	g := *f
	g.url, g.coord = srv.URL, c
	return &g
}

// nextOrEnd is the next block, or false once the server ended the stream
// and every block was read.
func (s *sseStream) nextOrEnd() (sseBlock, bool) {
	s.t.Helper()
	select {
	case b := <-s.blocks:
		return b, true
	case <-s.done:
		select {
		case b := <-s.blocks:
			return b, true
		default:
			return sseBlock{}, false
		}
	case <-time.After(10 * time.Second):
		s.t.Fatal("no block within 10s")
	}
	return sseBlock{}, false
}

// TestLogStreamSendsALongLogAsItReadsIt: a long log is sent a few reads at
// a time, never queued whole (JSON makes a control byte 6), and a buffered
// answer (a long poll) stops after about 1 MiB; the client, resuming with
// its last id, still gets every byte.
func TestLogStreamSendsALongLogAsItReadsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []fixtureOption
	}{
		{"streaming", nil},
		{"buffered", []fixtureOption{buffered}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			j, _, c := f.heldJob()
			// Written as one segment: the fixture's cap is applied by
			// appends only, and 8 MiB of appends would take long.
			const size = 8 << 20
			dir := filepath.Join(f.runlogs.Dir(), "p1", j.ID, strconv.FormatInt(c.LeaseEpoch, 10))
			require.NoError(t, os.MkdirAll(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, runlog.SegmentName(0)), bytes.Repeat([]byte{1}, size), 0o600))

			var largest atomic.Int64
			g := f.another(nil, func(w http.ResponseWriter) http.ResponseWriter { return largestWrite{w, &largest} }, tc.opts...)
			var got int64
			last, answers := "", 0
			for got < size {
				s := g.stream("/api/fleet/jobs/"+j.ID+"/log/stream", rootToken, header(api.HeaderLastEventID, last))
				answers++
				for got < size {
					b, ok := s.nextOrEnd()
					if !ok {
						break
					}
					if b.data == "" {
						continue
					}
					text := decodeChunk(t, b)
					require.Equal(t, len(text), strings.Count(text, "\x01"), "only the log's bytes")
					got += int64(len(text))
					require.Equal(t, strconv.FormatInt(got, 10), b.id, "every byte once, in order")
					last = b.id
				}
				s.resp.Body.Close()
			}
			require.Less(t, largest.Load(), int64(1<<20), "one write holds a few reads, not the log")
			if tc.name == "buffered" {
				require.Greater(t, answers, 6*size/(2<<20), "a buffered answer holds about 1 MiB")
			} else {
				require.Equal(t, 1, answers)
			}
		})
	}
}

// TestLogStreamSendsACharacterSplitBetweenSegments: the store cuts a
// segment at its size, inside a character if need be, and a read ends at
// a segment's end; the stream still sends the character whole and goes
// on, while the run goes on and after it ended.
func TestLogStreamSendsACharacterSplitBetweenSegments(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, tok, c := f.heldJob()
	text := strings.Repeat("a", 62) + "€" + " and on\n" // € is bytes 62 to 64: the first segment ends after 64
	require.Equal(t, 200, f.appendLog(tok, j.ID, c.LeaseEpoch, 0, text).status)
	path := "/api/fleet/jobs/" + j.ID + "/log/stream?epoch=" + strconv.FormatInt(c.LeaseEpoch, 10)

	s := f.stream(path, rootToken)
	require.Equal(t, text, s.chunksTo(t, int64(len(text))), "whole characters, up to the end")

	f.ok(200, nil, "POST", "/api/fleet/fail", tok, map[string]any{"jobId": j.ID, "leaseEpoch": c.LeaseEpoch, "reason": "x", "retryable": false})
	s = f.stream(path, rootToken)
	require.Equal(t, text, s.chunksTo(t, int64(len(text))), "never a character in halves (U+FFFD)")
	require.Equal(t, api.LogEventEnd, s.next().event)
	s.ended()
}

// growingLog is a run-log store whose log outgrows the cap by by bytes
// just before its read number at: a holder writing fast while a slow
// client reads.
type growingLog struct {
	*runlogfs.Store
	at    int32
	by    int
	reads atomic.Int32
}

func (g *growingLog) Read(ctx context.Context, key runlog.Key, off int64, limit int) ([]byte, int64, runlog.Info, error) {
	if g.reads.Add(1) == g.at {
		info, err := g.Store.Stat(ctx, key)
		if err != nil {
			return nil, 0, info, err
		}
		if _, err := g.Store.Append(ctx, key, info.Size, bytes.Repeat([]byte("z"), g.by)); err != nil {
			return nil, 0, info, err
		}
	}
	return g.Store.Read(ctx, key, off, limit)
}

// TestLogReadOvertakenByTheCap: the cap may drop the bytes a read of the
// log was about to send. Before the first read the answer starts at the
// first byte kept, with the note; once the body has begun it is cut short
// (the client sees an error), never a whole-looking one missing bytes.
func TestLogReadOvertakenByTheCap(t *testing.T) {
	t.Parallel()
	const written = 200 // segments of 64 bytes: the second read starts at 64
	for _, tc := range []struct {
		name  string
		read  int32
		grow  int
		whole bool
	}{
		{"before the first read", 1, 3 * testLogMax, true},
		{"mid-body, the next byte kept inside the answer", 2, 2 * 64, false},
		{"mid-body, the next byte kept past the answer", 2, 3 * testLogMax, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			j, tok, c := f.heldJob()
			require.Equal(t, 200, f.appendLog(tok, j.ID, c.LeaseEpoch, 0, strings.Repeat("a", written)).status)
			g := f.another(&growingLog{Store: f.runlogs, at: tc.read, by: tc.grow}, nil)

			req, err := http.NewRequestWithContext(t.Context(), "GET", g.url+"/api/fleet/jobs/"+j.ID+"/log", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+rootToken)
			resp, err := http.DefaultClient.Do(req)
			var body []byte
			if err == nil {
				defer resp.Body.Close()
				body, err = io.ReadAll(resp.Body)
			}
			require.False(t, strings.Contains(f.logs.String(), `"handler panic"`), "the handler panicked")
			if !tc.whole {
				require.Error(t, err, "a short body, never a whole-looking one: %d bytes", len(body))
				return
			}
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			all := strings.Repeat("a", written) + strings.Repeat("z", tc.grow)
			require.Equal(t, strconv.Itoa(len(all)), resp.Header.Get(api.HeaderLogSize))
			start, err := strconv.Atoi(resp.Header.Get(api.HeaderLogStart))
			require.NoError(t, err)
			note, rest, ok := strings.Cut(string(body), "\n")
			require.True(t, ok)
			require.Contains(t, note, fmt.Sprintf("%d bytes of this log before offset %d were dropped", start, start))
			require.Equal(t, all[start:], rest)
		})
	}
}
