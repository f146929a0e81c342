// Package logship streams a run's log file to the coordinator while the
// engine writes it (API.md "Live output"): it looks at the file's size
// every Poll and sends what is new, at most one request per Interval
// unless MaxBehind bytes wait, each chunk at the offset where it starts.
// Appends are idempotent by offset, so a chunk whose answer was lost is
// simply sent again; a gap (the coordinator has fewer bytes than the
// shipper thought) is resent from the size the coordinator names. Stop
// sends the rest before the run ends: after that the fence refuses it.
package logship

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
)

// Appender sends a chunk of a run's log (api.Client.AppendLog).
type Appender interface {
	AppendLog(ctx context.Context, product, jobID string, leaseEpoch, offset int64, chunk []byte) (api.LogAppended, error)
}

// Defaults (API.md: about half a second and 64 KiB behind at most).
const (
	DefaultInterval   = 500 * time.Millisecond
	DefaultPoll       = 100 * time.Millisecond
	DefaultMaxBehind  = 64 << 10
	DefaultMaxBackoff = 5 * time.Second
	// StopWait is how long Stop waits for a send the background loop has
	// in flight.
	StopWait = 5 * time.Second
)

// Config says what to ship where.
type Config struct {
	// Path is the run's log file; it may not exist yet.
	Path    string
	Product string
	JobID   string
	Epoch   int64
	Send    Appender
	// Timers paces the shipper; nil is the wall clock.
	Timers clock.Timers
	Log    *slog.Logger
	// Interval is the least time between two sends of a small chunk; Poll
	// how often the file's size is read; MaxBehind the most bytes left
	// waiting (sent at once) and the largest chunk. Zero takes the default.
	Interval  time.Duration
	Poll      time.Duration
	MaxBehind int64
}

// Shipper ships one run's log.
type Shipper struct {
	cfg Config

	// off is the offset of the first byte not yet stored by the
	// coordinator; lastSend when a send last succeeded; retryAt when a
	// failed one may be tried again, after backoff.
	off      int64
	lastSend time.Time
	retryAt  time.Time
	backoff  time.Duration
	// done: the coordinator refuses this run's log for good (fenced, or
	// another permanent answer); nothing more is sent.
	done bool

	stop chan struct{}
	// cancel ends the background loop's context (a send in flight).
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New makes a shipper; Start runs it.
func New(cfg Config) *Shipper {
	if cfg.Timers == nil {
		cfg.Timers = clock.System{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.MaxBehind <= 0 {
		cfg.MaxBehind = DefaultMaxBehind
	}
	return &Shipper{cfg: cfg, stop: make(chan struct{})}
}

// Start ships in the background until ctx ends or Stop.
func (s *Shipper) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Go(func() {
		t := s.cfg.Timers.NewTicker(s.cfg.Poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-t.C():
				s.Step(ctx)
			}
		}
	})
}

// Stop ends the background loop and sends what the file holds beyond what
// was sent, within ctx. It returns the offset the coordinator has. A send
// the loop has in flight gets StopWait to finish, then is cut short (its
// chunk is sent again from the offset): one request can take minutes of
// the API client's retries, and must not hold the run's end.
func (s *Shipper) Stop(ctx context.Context) int64 {
	close(s.stop)
	looped := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(looped)
	}()
	wait := s.cfg.Timers.NewTicker(StopWait)
	select {
	case <-looped:
	case <-wait.C():
	}
	wait.Stop()
	if s.cancel != nil { // nil: never started
		s.cancel()
	}
	<-looped
	for !s.done && ctx.Err() == nil {
		size, err := fileSize(s.cfg.Path)
		if err != nil || size <= s.off {
			break
		}
		if s.send(ctx, size) == failed && !s.done {
			// A transient failure: try again after the backoff, within ctx.
			// (A refusal for good set no backoff: the loop ends on done.)
			t := s.cfg.Timers.NewTicker(s.backoff)
			select {
			case <-ctx.Done():
			case <-t.C():
			}
			t.Stop()
		}
	}
	return s.off
}

// Step is one look at the file: it sends what is new when it is time to
// (the interval passed, or MaxBehind bytes wait), chunk after chunk while
// MaxBehind or more still wait.
func (s *Shipper) Step(ctx context.Context) {
	for !s.done {
		select {
		case <-s.stop:
			// Stop sends the rest within its own deadline: a backlog
			// sent here, on the run's context, would hold the run's end.
			return
		default:
		}
		now := s.cfg.Timers.Now()
		if now.Before(s.retryAt) {
			return
		}
		size, err := fileSize(s.cfg.Path)
		if err != nil {
			s.cfg.Log.WarnContext(ctx, "live output: cannot read the log file", "path", s.cfg.Path, "err", err)
			return
		}
		behind := size - s.off
		if behind <= 0 || (behind < s.cfg.MaxBehind && now.Sub(s.lastSend) < s.cfg.Interval) {
			return
		}
		switch s.send(ctx, size) {
		case stored:
			if size-s.off < s.cfg.MaxBehind {
				return
			}
		case failed:
			return
		case resend:
		}
	}
}

// result is what became of a send.
type result int

const (
	stored result = iota
	// resend: the coordinator named where to resend from, at once.
	resend
	// failed: not stored; see done and retryAt.
	failed
)

// send sends one chunk from s.off (at most MaxBehind bytes, not past
// size).
func (s *Shipper) send(ctx context.Context, size int64) result {
	chunk, err := readAt(s.cfg.Path, s.off, min(size-s.off, s.cfg.MaxBehind))
	if err != nil {
		s.cfg.Log.WarnContext(ctx, "live output: cannot read the log file", "path", s.cfg.Path, "err", err)
		s.retry()
		return failed
	}
	_, err = s.cfg.Send.AppendLog(ctx, s.cfg.Product, s.cfg.JobID, s.cfg.Epoch, s.off, chunk)
	switch {
	case err == nil:
		s.off += int64(len(chunk))
		s.lastSend, s.retryAt, s.backoff = s.cfg.Timers.Now(), time.Time{}, 0
		return stored
	case errors.Is(err, api.ErrConflict):
		// A gap: the coordinator has fewer bytes than we sent (it lost
		// some, or an answer lied); resend from its size.
		if have, ok := api.LogSize(err); ok && have <= size {
			s.cfg.Log.WarnContext(ctx, "live output: the coordinator has less than was sent; resending", "from", have, "was", s.off)
			s.off = have
			return resend
		}
		s.giveUp(ctx, err)
	case errors.Is(err, api.ErrFenced), api.IsPermanent(err):
		s.giveUp(ctx, err)
	default:
		s.retry()
	}
	return failed
}

func (s *Shipper) giveUp(ctx context.Context, err error) {
	s.done = true
	s.cfg.Log.WarnContext(ctx, "live output: the coordinator refuses this run's log; no more is sent", "err", err)
}

// retry schedules the next try after a backoff doubling up to
// DefaultMaxBackoff.
func (s *Shipper) retry() {
	s.backoff = min(max(2*s.backoff, s.cfg.Interval), DefaultMaxBackoff)
	s.retryAt = s.cfg.Timers.Now().Add(s.backoff)
}

// Offset is the offset up to which the coordinator has the log.
func (s *Shipper) Offset() int64 { return s.off }

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func readAt(path string, off, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s at %d: %w", path, off, err)
	}
	return buf[:got], nil
}
