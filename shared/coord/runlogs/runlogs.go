// Package runlogs is the live-output use case (API.md "Live output"): the
// holder's fenced appends to its run's log, and what readers need to follow
// one: which run a read means, whether it has ended, and a wake when this
// process stores new bytes. The bytes live in a runlog.Store; coord's
// façade calls this package.
package runlogs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/runlog"
)

// MaxChunkBytes bounds one append: a factory sends at most 64 KiB at a
// time, so this leaves room and still keeps one request small.
const MaxChunkBytes = 1 << 20

// Service runs the use cases.
type Service struct {
	k *kernel.Kernel
	// logs may be nil: the use cases then answer errNoLogs.
	logs runlog.Store

	mu     sync.Mutex
	wakers map[runlog.Key]*waker
}

// waker is the channel the next append of a log closes, and how many
// waiters hold it: the last one to leave takes it away, since the append
// that would may never come (a run that ended).
type waker struct {
	ch      chan struct{}
	waiters int
}

// New builds the service over logs (nil when none is configured).
func New(k *kernel.Kernel, logs runlog.Store) *Service {
	return &Service{k: k, logs: logs, wakers: map[runlog.Key]*waker{}}
}

var errNoLogs = fleet.Errorf(fleet.CodeUnavailable, "live output is not configured on this deployment (no run-log store; see FLEET_ARTIFACTS_URL)")

// Append is one chunk from the holder.
type Append struct {
	ProductID  string
	JobID      string
	FactoryID  string
	LeaseEpoch int64
	// Offset is where Body starts in the run's log.
	Offset int64
	Body   []byte
}

// GapError is the conflict of a chunk that starts past the end of the log;
// Size is where the holder resends from.
type GapError = runlog.GapError

// Append stores a chunk of the holder's run log. The fence is checked on
// the job as read just before: a stale epoch or another factory is fenced
// and stores nothing. (A holder that loses its lease in between can only
// add to its own run's log, never to the new holder's.)
func (s *Service) Append(ctx context.Context, a Append) (runlog.Info, error) {
	if s.logs == nil {
		return runlog.Info{}, errNoLogs
	}
	if a.Offset < 0 {
		return runlog.Info{}, fleet.Invalid("offset", "must be a whole number >= 0, got %d", a.Offset)
	}
	if len(a.Body) > MaxChunkBytes {
		return runlog.Info{}, &fleet.Error{Code: fleet.CodeTooLarge, Field: "body",
			Message: fmt.Sprintf("a log chunk is at most %d bytes, got %d: send it in parts", MaxChunkBytes, len(a.Body))}
	}
	j, err := s.k.GetJob(ctx, a.ProductID, a.JobID)
	if err != nil {
		return runlog.Info{}, err
	}
	if err := j.CheckFence(a.FactoryID, a.LeaseEpoch); err != nil {
		return runlog.Info{}, err
	}
	key := runlog.Key{Namespace: j.ProductID, JobID: j.ID, Epoch: a.LeaseEpoch}
	info, err := s.logs.Append(ctx, key, a.Offset, a.Body)
	if gap, ok := errors.AsType[*runlog.GapError](err); ok {
		return runlog.Info{}, &fleet.Error{Code: fleet.CodeConflict, Field: "offset", Err: gap,
			Message: fmt.Sprintf("offset %d is past the end of the log (%d bytes stored): resend from %d", gap.Offset, gap.Size, gap.Size)}
	}
	if err != nil {
		return runlog.Info{}, fmt.Errorf("append to the log of %s: %w", key, err)
	}
	s.wake(key)
	return info, nil
}

// Run is the run a read of a job's log means.
type Run struct {
	Key runlog.Key
	// Ended: the run's lease is over (or it never was), so its log
	// grows no more.
	Ended bool
}

// Resolve picks the run of epoch, or without one the run holding the
// lease now, else the newest run. An epoch the job never had is
// not found, naming the parameter.
func (s *Service) Resolve(ctx context.Context, productID, jobID string, epoch *int64) (Run, error) {
	if s.logs == nil {
		return Run{}, errNoLogs
	}
	j, err := s.k.GetJob(ctx, productID, jobID)
	if err != nil {
		return Run{}, err
	}
	e := j.LeaseEpoch
	switch {
	case epoch != nil:
		if *epoch < 1 || *epoch > j.LeaseEpoch {
			return Run{}, &fleet.Error{Code: fleet.CodeNotFound, Field: "epoch",
				Message: fmt.Sprintf("job %s has no run of epoch %d (its epochs are 1 to %d)", j.ID, *epoch, j.LeaseEpoch)}
		}
		e = *epoch
	case !j.Stage.Leased() && len(j.Runs) > 0:
		e = j.Runs[len(j.Runs)-1].LeaseEpoch
	}
	return Run{Key: runlog.Key{Namespace: j.ProductID, JobID: j.ID, Epoch: e}, Ended: ended(j, e)}, nil
}

// Ended reads the job (a point read) to learn whether the run of key is
// over.
func (s *Service) Ended(ctx context.Context, key runlog.Key) (bool, error) {
	j, err := s.k.GetJob(ctx, key.Namespace, key.JobID)
	if err != nil {
		return false, err
	}
	return ended(j, key.Epoch), nil
}

func ended(j *fleet.Job, epoch int64) bool {
	return !j.Stage.Leased() || j.LeaseEpoch != epoch
}

// Stat is where the run's log stands: what live readers poll.
func (s *Service) Stat(ctx context.Context, key runlog.Key) (runlog.Info, error) {
	if s.logs == nil {
		return runlog.Info{}, errNoLogs
	}
	info, err := s.logs.Stat(ctx, key)
	if err != nil {
		return info, fmt.Errorf("stat the log of %s: %w", key, err)
	}
	return info, nil
}

// Read reads the log from off (runlog.Store.Read).
func (s *Service) Read(ctx context.Context, key runlog.Key, off int64, limit int) ([]byte, int64, runlog.Info, error) {
	if s.logs == nil {
		return nil, 0, runlog.Info{}, errNoLogs
	}
	data, at, info, err := s.logs.Read(ctx, key, off, limit)
	if err != nil {
		return nil, 0, info, fmt.Errorf("read the log of %s: %w", key, err)
	}
	return data, at, info, nil
}

// Woken returns a channel closed by the next append this process stores
// for key: a stream waits on it besides polling Stat, which is how it
// learns of appends other instances store. The waiter calls release once
// it stops waiting on it.
func (s *Service) Woken(key runlog.Key) (woken <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.wakers[key]
	if !ok {
		w = &waker{ch: make(chan struct{})}
		s.wakers[key] = w
	}
	w.waiters++
	released := false
	return w.ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if released {
			return
		}
		released = true
		w.waiters--
		// A wake already took it away, and the key may hold a new one.
		if w.waiters == 0 && s.wakers[key] == w {
			delete(s.wakers, key)
		}
	}
}

func (s *Service) wake(key runlog.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.wakers[key]; ok {
		close(w.ch)
		delete(s.wakers, key)
	}
}
