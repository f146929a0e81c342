package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/runlogs"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/runlog"
)

// Live output (API.md "Live output"): the holder appends its run's log by
// offset; readers get it whole (GET …/log) or follow it (GET …/log/stream).
//
// A log stream learns of new bytes two ways: a wake when this process
// stores them, and a poll of the log store's size every logPoll (a file
// stat, a blob property read: never the document store), which is how it
// learns of bytes another instance stored. Whether the run has ended is a
// point read of the job every logRunCheck. Stream ids are the offset after
// the bytes sent: resuming with Last-Event-ID sends the bytes from there,
// so nothing is missed or sent twice.
const (
	logPoll     = 250 * time.Millisecond
	logRunCheck = 2 * time.Second
	// logReadBytes bounds one read of the store, and so one stream event.
	logReadBytes = 64 << 10
	// logFlushBytes: a stream sends what it queued once it passes this, so
	// a long log goes out as it is read, never held whole (as JSON a
	// control byte takes 6).
	logFlushBytes = 256 << 10
	// logBufferedBytes bounds a buffered answer (a long poll), which the
	// front end holds whole: the client resumes from its last id.
	logBufferedBytes = 1 << 20
)

// errStreamGone: the client of a stream went away mid-send.
var errStreamGone = errors.New("the stream's client is gone")

func (s *server) appendLog(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, product, err := s.pathJob(r, p)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	for _, name := range []string{"leaseEpoch", "offset"} {
		if !q.Has(name) {
			return required(name, "")
		}
	}
	epoch, err := intParam(q, "leaseEpoch", 0, 0, math.MaxInt64)
	if err != nil {
		return err
	}
	offset, err := intParam(q, "offset", 0, 0, math.MaxInt64)
	if err != nil {
		return err
	}
	if r.ContentLength < 0 {
		return fleet.Invalid("Content-Length", "is required: send the chunk with its length declared (the Functions host drops a chunked body)")
	}
	if r.ContentLength > runlogs.MaxChunkBytes {
		return chunkTooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, runlogs.MaxChunkBytes))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return chunkTooLarge()
	}
	if err != nil {
		return fleet.Invalid("body", "the chunk stopped before its end: %v", err)
	}
	info, err := s.coord.AppendLog(r.Context(), runlogs.Append{ProductID: product, JobID: id, FactoryID: p.id,
		LeaseEpoch: epoch, Offset: offset, Body: body})
	if gap, ok := errors.AsType[*runlogs.GapError](err); ok {
		w.Header().Set(api.HeaderLogSize, strconv.FormatInt(gap.Size, 10))
	}
	if err != nil {
		return err
	}
	w.Header().Set(api.HeaderLogSize, strconv.FormatInt(info.Size, 10))
	return writeJSON(w, http.StatusOK, api.LogAppended{Size: info.Size, Start: info.Start})
}

func chunkTooLarge() error {
	return &fleet.Error{Code: fleet.CodeTooLarge, Field: "body",
		Message: fmt.Sprintf("a log chunk is at most %d bytes: send it in parts", runlogs.MaxChunkBytes)}
}

// logRun reads the job route's run: ?epoch= or the default one.
func (s *server) logRun(r *http.Request, p *principal) (runlogs.Run, error) {
	id, product, err := s.pathHeldJob(r, p)
	if err != nil {
		return runlogs.Run{}, err
	}
	var epoch *int64
	if q := r.URL.Query(); q.Has("epoch") {
		e, err := intParam(q, "epoch", 0, 1, math.MaxInt64)
		if err != nil {
			return runlogs.Run{}, err
		}
		epoch = &e
	}
	return s.coord.LogRun(r.Context(), product, id, epoch)
}

// droppedNote is what a reader is told of bytes the cap dropped.
func droppedNote(from, to int64) string {
	return fmt.Sprintf("[fleet: %d bytes of this log before offset %d were dropped: a run keeps the last FLEET_MAX_LOG_BYTES of its output]\n", to-from, to)
}

// getLog answers the log from ?offset= to its size when asked, as text.
// A read from before the first byte kept starts with droppedNote; the
// headers say where the answer ends (read on from X-Fleet-Log-Size).
func (s *server) getLog(w http.ResponseWriter, r *http.Request, p *principal) error {
	run, err := s.logRun(r, p)
	if err != nil {
		return err
	}
	offset, err := intParam(r.URL.Query(), "offset", 0, 0, math.MaxInt64)
	if err != nil {
		return err
	}
	ctx := r.Context()
	info, err := s.coord.StatLog(ctx, run.Key)
	if err != nil {
		return err
	}
	if offset > info.Size {
		return fleet.Invalid("offset", "is past the end of the log (%d bytes so far), got %d", info.Size, offset)
	}
	// The first read decides the status: a failing store is still a
	// clean error.
	data, at, now, err := s.coord.ReadLog(ctx, run.Key, offset, logReadBytes)
	if err != nil {
		return err
	}
	// The log may have grown since the stat, and the cap may have dropped
	// bytes past the stat's size: the answer goes to the size the read saw.
	if now.Size > info.Size {
		info = now
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set(api.HeaderLogSize, strconv.FormatInt(info.Size, 10))
	h.Set(api.HeaderLogStart, strconv.FormatInt(info.Start, 10))
	h.Set(api.HeaderLogEpoch, strconv.FormatInt(run.Key.Epoch, 10))
	h.Set(api.HeaderLogComplete, strconv.FormatBool(run.Ended))
	w.WriteHeader(http.StatusOK)
	if at > offset {
		_, _ = io.WriteString(w, droppedNote(offset, at))
	}
	for {
		data = data[:max(0, min(int64(len(data)), info.Size-at))]
		if _, err := w.Write(data); err != nil {
			return nil
		}
		next := at + int64(len(data))
		if len(data) == 0 || next >= info.Size {
			return nil
		}
		// Once the body has begun, bytes the cap dropped meanwhile can
		// no longer be noted: a short body, never a whole-looking one.
		data, at, _, err = s.coord.ReadLog(ctx, run.Key, next, logReadBytes)
		if err != nil {
			s.log.ErrorContext(ctx, "log read cut short", "requestId", stateOf(ctx).id, "log", run.Key.String(), "err", err)
			panic(http.ErrAbortHandler)
		}
		if at != next {
			s.log.WarnContext(ctx, "log read cut short: the cap overtook it", "requestId", stateOf(ctx).id,
				"log", run.Key.String(), "from", next, "keptFrom", at)
			panic(http.ErrAbortHandler)
		}
	}
}

// logStream follows a run's log as server-sent events (see the top of
// this file).
func (s *server) logStream(w http.ResponseWriter, r *http.Request, p *principal) error {
	run, err := s.logRun(r, p)
	if err != nil {
		return err
	}
	ctx := r.Context()
	var off int64
	v, field, err := resumeID(r)
	if err != nil {
		return err
	}
	if v != "" {
		off, err = strconv.ParseInt(v, 10, 64)
		if err != nil || off < 0 {
			return fleet.Invalid(field, "must be a log offset (a whole number >= 0, the id of the last event received), got %q", v)
		}
	}
	info, err := s.coord.StatLog(ctx, run.Key)
	if err != nil {
		return err
	}
	if off > info.Size {
		return fleet.Invalid(resumeField(r), "is past the end of the log (%d bytes so far), got %d", info.Size, off)
	}
	mode := s.modeOf(r)
	out := newSSE(w)
	// A client following the default run pins it for its reconnects.
	w.Header().Set(api.HeaderLogEpoch, strconv.FormatInt(run.Key.Epoch, 10))
	poll := s.timers.NewTicker(logPoll)
	defer poll.Stop()
	check := s.timers.NewTicker(logRunCheck)
	defer check.Stop()
	keep := s.timers.NewTicker(s.keepAlive)
	defer keep.Stop()
	end := s.timers.NewTicker(mode.max)
	defer end.Stop()
	ended := run.Ended
	budget := math.MaxInt
	if mode.buffered {
		budget = logBufferedBytes
	}
	// Each wait gives its wake-up back, or an ended run's would be held for
	// good (only an append takes it away).
	release := func() {}
	defer func() { release() }()
	for {
		release()
		// Before the read, so an append stored in between wakes the wait.
		var woken <-chan struct{}
		woken, release = s.coord.LogWoken(run.Key)
		sent, err := s.sendLog(ctx, out, run.Key, &off, info.Size, ended, budget)
		if errors.Is(err, errStreamGone) {
			return nil
		}
		if err != nil {
			s.log.WarnContext(ctx, "log stream: read failed", "log", run.Key.String(), "err", err)
			_ = out.flush()
			return nil
		}
		if ended && off >= info.Size {
			out.logEvent(off, api.LogEventEnd, "")
			_ = out.flush()
			return nil
		}
		if out.flush() != nil || (mode.buffered && sent) {
			return nil
		}
		for grew := false; !grew; {
			select {
			case <-ctx.Done():
				return nil
			case <-end.C():
				return nil
			case <-woken:
				grew = true
			case <-poll.C():
				grew = true
			case <-check.C():
				// The size is read after the end is seen, so the bytes
				// the holder sent before its run ended are all sent.
				if ended, err = s.coord.LogRunEnded(ctx, run.Key); err != nil {
					s.log.WarnContext(ctx, "log stream: job read failed", "log", run.Key.String(), "err", err)
				}
				grew = ended
			case <-keep.C():
				out.comment("keep-alive")
				if out.flush() != nil {
					return nil
				}
			}
		}
		if info, err = s.coord.StatLog(ctx, run.Key); err != nil {
			s.log.WarnContext(ctx, "log stream: stat failed", "log", run.Key.String(), "err", err)
			return nil
		}
	}
}

// sendLog queues the log from *off up to size, one event per read, and
// moves *off past what it queued; it sends what it queued whenever that
// passes logFlushBytes, and stops once it queued budget bytes. While the
// run goes on, a chunk ending inside a UTF-8 character keeps that
// character for the next event (the data is text). It reports whether it
// queued anything; errStreamGone is a send that failed.
func (s *server) sendLog(ctx context.Context, out *sse, key runlog.Key, off *int64, size int64, ended bool, budget int) (bool, error) {
	sent := false
	for queued := 0; *off < size && queued < budget; {
		if out.buf.Len() >= logFlushBytes {
			if out.flush() != nil {
				return sent, errStreamGone
			}
		}
		data, at, err := s.readText(ctx, key, *off, size)
		if err != nil {
			return sent, err
		}
		if at > *off {
			queued += out.logEvent(at, api.LogEventDropped, droppedNote(*off, at))
			*off, sent = at, true
		}
		if !ended {
			data = completeText(data)
		}
		if len(data) == 0 {
			return sent, nil
		}
		*off = at + int64(len(data))
		queued += out.logEvent(*off, "", string(data))
		sent = true
	}
	return sent, nil
}

// readText reads the log from off up to size (one read of the store) and
// returns it with the offset it starts at. A read ends at a segment's end,
// which the store may have cut inside a character: the rest of it is read
// from the next segments, or the next read, starting inside it, would find
// nothing whole to send and a stream following the run would stop there
// for good.
func (s *server) readText(ctx context.Context, key runlog.Key, off, size int64) ([]byte, int64, error) {
	data, at, _, err := s.coord.ReadLog(ctx, key, off, logReadBytes)
	if err != nil {
		return nil, 0, err
	}
	data = data[:max(0, min(int64(len(data)), size-at))]
	for whole := len(completeText(data)); whole < len(data); {
		end := at + int64(len(data))
		if end >= size {
			break
		}
		more, mat, _, err := s.coord.ReadLog(ctx, key, end, utf8.UTFMax-1)
		if err != nil {
			return nil, 0, err
		}
		if mat != end || len(more) == 0 {
			break // dropped meanwhile: the next read says so
		}
		// Byte by byte, up to the character's end: the bytes after it may
		// end inside another.
		for _, b := range more[:min(int64(len(more)), size-end)] {
			data = append(data, b)
			if utf8.FullRune(data[whole:]) {
				return data, at, nil
			}
		}
	}
	return data, at, nil
}

// logEvent queues one raw event, data as JSON, and returns its length.
func (o *sse) logEvent(id int64, typ string, data string) int {
	b, _ := json.Marshal(data)
	if typ != "" {
		n, _ := fmt.Fprintf(&o.buf, "id: %d\nevent: %s\ndata: %s\n\n", id, typ, b)
		return n
	}
	n, _ := fmt.Fprintf(&o.buf, "id: %d\ndata: %s\n\n", id, b)
	return n
}

// completeText trims an incomplete UTF-8 character from the end of b.
func completeText(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}
