package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/live"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// Live event streams (text/event-stream).
//
// A job stream's ids are the events' seq; a product stream's are store
// change-feed positions (coord.Position). Either resumes from the
// Last-Event-ID header (what EventSource sends when it reconnects) or
// ?after=, replaying what was missed before going live. A comment line
// every KeepAlive keeps proxies from closing an idle stream; a stream ends
// after MaxStream so that a platform limit on a request's duration (the
// Functions host's functionTimeout) never cuts one mid-event: the client
// reconnects with its last id and misses nothing.

// Stream defaults.
const (
	DefaultKeepAlive = 15 * time.Second
	// DefaultMaxStream ends a stream before the Azure front end cuts it:
	// it drops a request after 230 s (the App Service / Functions load
	// balancer's limit, whatever host.json's functionTimeout says), and a
	// stream cut there ends without its last flush and logs as a failed
	// invocation. 200 s leaves 30 s for the end to reach the client
	// through the host and a front end that is slow to pass it on; the
	// end is exact (its own timer), not rounded up to a keep-alive tick.
	DefaultMaxStream = 200 * time.Second
	// eventGapGrace is how long a missing seq is waited for before the
	// events after it are sent anyway. coord.Events fills in every event
	// the container lacks from the job itself, so a gap is only ever one
	// the store no longer has (past its TTL, or lost before jobs held
	// their recent events), which must not hold the stream back forever.
	eventGapGrace     = 5 * time.Second
	headerLastEventID = api.HeaderLastEventID
)

// hostUserAgent is the product token the Functions host puts in the
// User-Agent of a request it forwards to a custom handler
// (HttpWorkerConstants.UserAgentHeaderValue, added by
// DefaultHttpWorkerService.AddHeaders as "Azure-Functions-Host/<version>",
// after the client's own User-Agent, which ToHttpRequestMessage copies).
// Only that forwarding path adds it: proxying (enableProxyingHttpRequest,
// YARP) passes the client's User-Agent through and adds only the
// X-Azure-Functions-HostVersion and -InvocationId headers
// (AddProxyingHeaders). Checked in azure-functions-host
// src/WebJobs.Script/Workers/Http/DefaultHttpWorkerService.cs, host
// 4.1037.0 (commit 89dc438d4): InvokeAsync (lines 60-72) forwards, SendAsync
// (line 128) reads the whole answer, AddHeaders (lines 161-166) does
// UserAgent.ParseAdd($"{HttpWorkerConstants.UserAgentHeaderValue}/{ScriptHost.Version}");
// HttpWorkerConstants.cs line 11: UserAgentHeaderValue = "Azure-Functions-Host";
// and in the 2025 version with proxying (PR #11035), where
// ProxyInvocationRequest calls AddProxyingHeaders instead. A forwarded request's answer is read whole by the host's
// HttpClient before it replies, so a live stream would reach the client
// only when it ended: terraform/README.md ("Streams and the hosting plan")
// says on which plans that happens.
const hostUserAgent = "Azure-Functions-Host/"

// forwardedByHost reports whether r came through the host's buffering
// forwarding path. A client that sends that User-Agent itself gets the
// buffered answer, which is still correct, only less live.
func forwardedByHost(r *http.Request) bool {
	for _, ua := range r.Header.Values("User-Agent") {
		for _, product := range strings.Fields(ua) {
			if strings.HasPrefix(product, hostUserAgent) {
				return true
			}
		}
	}
	return false
}

type bufferedKey struct{}

// WithBufferedResponse marks a request context whose answer reaches the
// client only once complete (the Functions host's envelope invocation,
// which wraps the whole answer in Outputs.res): its streams answer as long
// polls, as a forwarded request's do.
func WithBufferedResponse(ctx context.Context) context.Context {
	return context.WithValue(ctx, bufferedKey{}, true)
}

// streamMode is how one stream is answered: live, or buffered (it ends as
// soon as it has sent something, because nothing reaches the client before
// the end) and within how long.
type streamMode struct {
	buffered bool
	max      time.Duration
}

// modeOf picks the mode for r: buffered behind a front door configured as
// buffering (Config.Buffered, the Lambda shape) or when the Functions host
// forwarded the request. A forwarded stream is a long poll, so it is
// bounded like one (maxWait), not by MaxStream: a buffered answer with
// nothing to send is silent all along, and a shorter silence is kinder to
// whatever sits between the client and the host.
func (s *server) modeOf(r *http.Request) streamMode {
	m := streamMode{buffered: s.buffered, max: s.maxStream}
	if !m.buffered && (forwardedByHost(r) || r.Context().Value(bufferedKey{}) != nil) {
		m.buffered, m.max = true, min(s.maxStream, maxWait)
	}
	return m
}

// sse writes one stream. The status line and headers go out with the first
// write, so an error found before it (a bad resume id) is still a clean 4xx.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	buf     bytes.Buffer
}

func newSSE(w http.ResponseWriter) *sse {
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (s *sse) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// Tells buffering reverse proxies (nginx and kin) to pass it through.
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// event queues one event; data is JSON on one line.
func (s *sse) event(id, typ string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	fmt.Fprintf(&s.buf, "id: %s\nevent: %s\ndata: %s\n\n", id, typ, b)
	return nil
}

// id queues a bare id field: EventSource takes it as its last event id
// without dispatching an event, so a client learns where it stands.
func (s *sse) id(id string) { fmt.Fprintf(&s.buf, "id: %s\n\n", id) }

func (s *sse) comment(text string) { fmt.Fprintf(&s.buf, ": %s\n\n", text) }

// flush sends what is queued.
func (s *sse) flush() error {
	s.start()
	if s.buf.Len() > 0 {
		if _, err := s.w.Write(s.buf.Bytes()); err != nil {
			return err
		}
		s.buf.Reset()
	}
	return s.rc.Flush()
}

// maxResumeID bounds a resume id (Last-Event-ID, ?after=). The longest the
// API issues is a product stream's: two change-feed continuations, about
// 450 bytes per feed range each on Cosmos, so its length grows with the
// containers' physical partitions; 32 KiB is Kestrel's default bound on a
// request's headers in all (the Functions host's web server), and some 35
// ranges per feed. A forged id is read range by range (the store refuses more ranges
// than the container has), so its length is refused before it is parsed.
const maxResumeID = 32 << 10

// resumeID is the id a client resumes after: Last-Event-ID, else ?after=.
// field names where it came from, for the 400.
func resumeID(r *http.Request) (id, field string, err error) {
	if id = r.Header.Get(headerLastEventID); id != "" {
		field = headerLastEventID
	} else if id = r.URL.Query().Get("after"); id != "" {
		field = "after"
	}
	return id, field, checkResumeID(id, field)
}

func checkResumeID(id, field string) error {
	if len(id) > maxResumeID {
		return fleet.Invalid(field, "is %d bytes, longer than any id of a stream (at most %d)", len(id), maxResumeID)
	}
	return nil
}

func (s *server) jobEventStream(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var after int64
	v, field, err := resumeID(r)
	if err != nil {
		return err
	}
	if v != "" {
		after, err = strconv.ParseInt(v, 10, 64)
		if err != nil || after < 0 {
			return fleet.Invalid(field, "must be an event seq (a whole number >= 0), got %q", v)
		}
	}
	// A factory follows only a job it holds (API.md, "Limits on long-lived
	// requests"): the same rule as its other reads of a job's work.
	product, err := s.heldJobProduct(r, p, id)
	if err != nil {
		return err
	}
	mode := s.modeOf(r)
	// A buffered answer is handed on whole: a bounded batch, the client
	// resumes from its last id.
	limit := 0
	if mode.buffered {
		limit = maxEventPage
	}
	ctx := r.Context()
	// Subscribe before the first read, so an event written in between
	// wakes the stream instead of being missed.
	sub, err := s.coord.Subscribe(ctx, live.Watch{JobID: id})
	if err != nil {
		return err
	}
	defer sub.Close()
	events, err := s.coord.Events(ctx, product, id, after, limit)
	if err != nil {
		return err // not found, or the store: nothing sent yet
	}
	out := newSSE(w)
	tick := s.timers.NewTicker(s.keepAlive)
	defer tick.Stop()
	end := s.timers.NewTicker(mode.max)
	defer end.Stop()
	for {
		var ended bool
		before := after
		after, ended = s.sendEvents(out, events, after)
		if out.flush() != nil || ended || (mode.buffered && after != before) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-end.C():
			return nil
		case <-sub.Woken():
		case <-tick.C():
			out.comment("keep-alive")
		}
		if events, err = s.coord.Events(ctx, product, id, after, limit); err == nil && len(events) > 0 {
			// A factory follows the job only while it holds it, so each
			// read with news checks again, after it: nothing written once
			// its lease ended (released, reaped, the job given to another)
			// goes out. Every change of holder writes an event, so a read
			// without news needs no check.
			err = s.holderRead(r, p, product, id)
		}
		if err != nil {
			// The headers are out: end the stream, the client resumes (a
			// factory no longer holding the job is refused then).
			if fleet.CodeOf(err) != fleet.CodeForbidden {
				s.log.WarnContext(ctx, "event stream: read failed", "job", id, "err", err)
			}
			_ = out.flush()
			return nil
		}
	}
}

// sendEvents queues the events that follow after in seq order and returns
// the last seq queued and whether the job reached a terminal stage. A gap
// in seq is waited for (the next wake or keep-alive reads again) unless the
// event after it is older than eventGapGrace.
func (s *server) sendEvents(out *sse, events []fleet.Event, after int64) (int64, bool) {
	now := s.timers.Now()
	for _, ev := range events {
		if ev.Seq <= after {
			continue
		}
		if ev.Seq != after+1 && now.Sub(ev.At) < eventGapGrace {
			return after, false
		}
		if err := out.event(strconv.FormatInt(ev.Seq, 10), string(ev.Type), ev); err != nil {
			return after, false
		}
		after = ev.Seq
		if ev.To != "" && ev.To.Terminal() {
			return after, true
		}
	}
	return after, false
}

func (s *server) productEventStream(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	var from *live.Position
	v, field, err := resumeID(r)
	if err != nil {
		return err
	}
	if v != "" {
		pos, err := live.ParsePosition(v)
		if err != nil {
			return fleet.Invalid(field, "is not an id of this stream: resume with the last id received, got %q", v)
		}
		from = &pos
	}
	mode := s.modeOf(r)
	ctx := r.Context()
	view, err := s.coord.View(ctx, catalog.Scope(p.products))
	if err != nil {
		return err
	}
	sub, err := s.coord.Subscribe(ctx, live.Watch{ProductID: product})
	if err != nil {
		return err
	}
	defer sub.Close()
	out := newSSE(w)
	last := sub.Start
	var pager replayPager
	if from != nil {
		// Changes from the client's position up to now; the subscription
		// holds everything after its start, which is not later than where
		// the replay ends, so nothing falls in between (a change may come
		// twice).
		queued := 0
		reached, err := s.coord.Replay(ctx, *from, product, func(changes []live.Change, at live.Position) error {
			if err := queueChanges(out, view, changes); err != nil {
				return err
			}
			queued += len(changes)
			if len(changes) > 0 {
				if err := out.flush(); err != nil {
					return err
				}
			}
			return pager.page(queued)
		})
		switch {
		case errors.Is(err, store.ErrBadContinuation) && !out.started:
			return fleet.Invalid(resumeField(r), "is not an id of this stream (%v)", err)
		case err != nil && !out.started:
			return err
		case err != nil:
			s.log.WarnContext(ctx, "event stream: replay failed", "product", product, "err", err)
			return nil
		}
		last = reached
	}
	out.id(last.String())
	if pager.full || (mode.buffered && out.started) {
		// The replay stopped short of now (the client resumes from here),
		// or sent something a buffering front door must hand over.
		_ = out.flush()
		return nil
	}
	tick := s.timers.NewTicker(s.keepAlive)
	defer tick.Stop()
	end := s.timers.NewTicker(mode.max)
	defer end.Stop()
	sent := last
	for {
		if out.flush() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Lost():
			return nil // too far behind: the client resumes from its last id
		case b := <-sub.Batches():
			if err := queueChanges(out, view, b.Changes); err != nil {
				return nil
			}
			last = b.Pos
			if len(b.Changes) > 0 {
				sent = last
				if mode.buffered {
					_ = out.flush()
					return nil
				}
			}
		case <-end.C():
			if last != sent {
				out.id(last.String()) // where to resume, as the keep-alive would
			}
			_ = out.flush()
			return nil
		case <-tick.C():
			if last != sent {
				// Changes of other products moved the feeds: hand the
				// client the newer position, so a resume reads less.
				out.id(last.String())
				sent = last
			}
			out.comment("keep-alive")
		}
	}
}

func resumeField(r *http.Request) string {
	_, field, _ := resumeID(r)
	return field
}

// queueChanges queues changes as the caller's view shows them: a shared
// factory's other products and their repos are not the caller's to see.
func queueChanges(out *sse, view *catalog.View, changes []live.Change) error {
	for _, ch := range changes {
		if err := out.event(ch.ID.String(), ch.Type, view.Change(ch).Data()); err != nil {
			return err
		}
	}
	return nil
}

// maxWait bounds ?wait= on the long-poll routes.
const maxWait = 60 * time.Second

// waitParam reads ?wait= (a Go duration or whole seconds).
func waitParam(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseInt(v, 10, 64)
		if nerr != nil || n > math.MaxInt32 {
			return 0, fleet.Invalid("wait", "must be a duration such as 30s, got %q", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > maxWait {
		return 0, fleet.Invalid("wait", "must be between 0s and %v, got %v", maxWait, d)
	}
	return d, nil
}

// rawJSON encodes v as writeJSON does (no HTML escaping), for a field the
// wire carries as raw JSON.
func rawJSON(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// maxReplayPages bounds the feed pages one answer of a product's events
// reads: a position far back (or a made-up one) would otherwise read the
// whole fleet's history for one request.
const maxReplayPages = 50

// replayPager ends a replay answered in one piece once it holds a page of
// events (maxEventPage) or has read maxReplayPages pages of the feeds; the
// client resumes from the position it is given.
type replayPager struct {
	pages int
	full  bool
}

// page counts a page read into an answer now holding items changes: once
// full, it returns live.ErrEnough, which ends the replay.
func (p *replayPager) page(items int) error {
	p.pages++
	p.full = items >= maxEventPage || p.pages >= maxReplayPages
	if p.full {
		return live.ErrEnough
	}
	return nil
}

// productEvents is GET /fleet/events: the product stream as a long poll,
// for a client that cannot stream. Without after it starts from now.
func (s *server) productEvents(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	wait, err := waitParam(r)
	if err != nil {
		return err
	}
	var from *live.Position
	if v := r.URL.Query().Get("after"); v != "" {
		if err := checkResumeID(v, "after"); err != nil {
			return err
		}
		pos, err := live.ParsePosition(v)
		if err != nil {
			return fleet.Invalid("after", "is not a position of this product's events: pass the last position received, got %q", v)
		}
		from = &pos
	}
	ctx := r.Context()
	view, err := s.coord.View(ctx, catalog.Scope(p.products))
	if err != nil {
		return err
	}
	// Subscribed before the replay, so nothing written in between is
	// missed while waiting.
	sub, err := s.coord.Subscribe(ctx, live.Watch{ProductID: product})
	if err != nil {
		return err
	}
	defer sub.Close()
	out := api.ProductChanges{Items: []api.ProductChange{}, Position: sub.Start.String()}
	add := func(changes []live.Change) error {
		for _, ch := range changes {
			data, err := rawJSON(view.Change(ch).Data())
			if err != nil {
				return err
			}
			out.Items = append(out.Items, api.ProductChange{ID: ch.ID.String(), Type: ch.Type, Data: data})
		}
		return nil
	}
	var pager replayPager
	if from != nil {
		reached, err := s.coord.Replay(ctx, *from, product, func(changes []live.Change, _ live.Position) error {
			if err := add(changes); err != nil {
				return err
			}
			return pager.page(len(out.Items))
		})
		if errors.Is(err, store.ErrBadContinuation) {
			return fleet.Invalid("after", "is not a position of this product's events (%v)", err)
		}
		if err != nil {
			return err
		}
		out.Position = reached.String()
	}
	if len(out.Items) == 0 && wait > 0 && !pager.full {
		t := s.timers.NewTicker(wait)
		defer t.Stop()
	waiting:
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C():
				break waiting
			case <-sub.Lost():
				break waiting
			case b := <-sub.Batches():
				if err := add(b.Changes); err != nil {
					return err
				}
				if len(b.Changes) > 0 {
					out.Position = b.Pos.String()
					break waiting
				}
			}
		}
	}
	return writeJSON(w, http.StatusOK, out)
}
