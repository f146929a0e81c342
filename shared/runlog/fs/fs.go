// Package fs is the runlog.Store of one machine: each run's log as segment
// files in a directory (by default runlogs under the data directory).
//
// Layout: <dir>/<namespace>/<job>/<epoch>/<segment> where a segment's name
// is the offset of its first byte (runlog.SegmentName), and a .lock file
// per run. Appends hold the run's lock (a mutex in the process and
// flock(2) on the .lock across processes), so two instances appending the
// same chunk store it once. Bytes are only ever appended to the newest
// segment, and a segment is full before the next one is made, so a reader
// needs no lock: the sizes it sees are of bytes already written.
package fs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/gigafactory/fleet/shared/runlog"
)

const lockFile = ".lock"

// Store keeps run logs in a directory. It is safe for concurrent use and
// for several processes sharing the directory.
type Store struct {
	dir    string
	limits runlog.Limits
	mu     sync.Mutex // serialises this process's appends (flock does across processes)
}

var _ runlog.Store = (*Store)(nil)

// Open opens (creating it if needed) the store in dir.
func Open(dir string, limits runlog.Limits) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("runlog dir %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("runlog dir: %w", err)
	}
	return &Store{dir: abs, limits: limits.Resolve()}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) runDir(k runlog.Key) string {
	return filepath.Join(s.dir, k.Namespace, k.JobID, strconv.FormatInt(k.Epoch, 10))
}

// segments lists the run's segments, oldest first.
func segments(dir string) ([]runlog.Segment, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var segs []runlog.Segment
	for _, e := range entries {
		start, ok := runlog.ParseSegmentName(e.Name())
		if !ok {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // dropped meanwhile
		}
		if err != nil {
			return nil, err
		}
		segs = append(segs, runlog.Segment{Start: start, Len: info.Size()})
	}
	slices.SortFunc(segs, func(a, b runlog.Segment) int { return cmp.Compare(a.Start, b.Start) })
	return segs, nil
}

// Append writes the new part of p under the run's lock.
func (s *Store) Append(ctx context.Context, key runlog.Key, off int64, p []byte) (runlog.Info, error) {
	if err := key.Validate(); err != nil {
		return runlog.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return runlog.Info{}, err
	}
	dir := s.runDir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return runlog.Info{}, fmt.Errorf("runlog append %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lf, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return runlog.Info{}, fmt.Errorf("runlog append %s: %w", key, err)
	}
	defer lf.Close()
	if err := lock(lf); err != nil {
		return runlog.Info{}, fmt.Errorf("runlog append %s: lock: %w", key, err)
	}
	info, err := s.appendLocked(dir, off, p)
	if err != nil {
		return info, fmt.Errorf("runlog append %s: %w", key, err)
	}
	return info, nil
}

func (s *Store) appendLocked(dir string, off int64, p []byte) (runlog.Info, error) {
	segs, err := segments(dir)
	if err != nil {
		return runlog.Info{}, err
	}
	info := runlog.InfoOf(segs)
	skip, err := runlog.Trim(info.Size, off, len(p))
	if err != nil {
		return info, err
	}
	p = p[skip:]
	full := s.limits.SegmentBytes()
	for len(p) > 0 {
		if len(segs) == 0 || segs[len(segs)-1].Len >= full {
			segs = append(segs, runlog.Segment{Start: info.Size})
		}
		last := &segs[len(segs)-1]
		n := int(min(full-last.Len, int64(len(p))))
		if err := appendFile(filepath.Join(dir, runlog.SegmentName(last.Start)), p[:n]); err != nil {
			return info, err
		}
		last.Len += int64(n)
		info.Size += int64(n)
		p = p[n:]
	}
	drop := runlog.Expired(segs, info.Size, s.limits)
	for _, sg := range segs[:drop] {
		if err := os.Remove(filepath.Join(dir, runlog.SegmentName(sg.Start))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return info, err
		}
	}
	return runlog.InfoOf(segs[drop:]), nil
}

func appendFile(path string, p []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(p)
	return errors.Join(werr, f.Close())
}

// Stat lists the run's segments.
func (s *Store) Stat(ctx context.Context, key runlog.Key) (runlog.Info, error) {
	if err := key.Validate(); err != nil {
		return runlog.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return runlog.Info{}, err
	}
	segs, err := segments(s.runDir(key))
	if err != nil {
		return runlog.Info{}, fmt.Errorf("runlog stat %s: %w", key, err)
	}
	return runlog.InfoOf(segs), nil
}

// Read reads from the segment holding off (runlog.ReadSegments).
func (s *Store) Read(ctx context.Context, key runlog.Key, off int64, limit int) ([]byte, int64, runlog.Info, error) {
	if err := key.Validate(); err != nil {
		return nil, 0, runlog.Info{}, err
	}
	dir := s.runDir(key)
	data, at, info, err := runlog.ReadSegments(ctx, off, limit,
		func(context.Context) ([]runlog.Segment, error) { return segments(dir) },
		func(_ context.Context, seg runlog.Segment, at, n int64) ([]byte, bool, error) {
			f, err := os.Open(filepath.Join(dir, runlog.SegmentName(seg.Start)))
			if errors.Is(err, fs.ErrNotExist) {
				return nil, true, nil
			}
			if err != nil {
				return nil, false, err
			}
			defer f.Close()
			buf := make([]byte, n)
			got, err := f.ReadAt(buf, at-seg.Start)
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, false, err
			}
			return buf[:got], false, nil
		})
	if err != nil {
		return nil, 0, info, fmt.Errorf("runlog read %s: %w", key, err)
	}
	return data, at, info, nil
}

// DeleteJob removes the job's directory.
func (s *Store) DeleteJob(ctx context.Context, namespace, jobID string) error {
	if err := (runlog.Key{Namespace: namespace, JobID: jobID}).Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(s.dir, namespace, jobID)); err != nil {
		return fmt.Errorf("runlog delete %s/%s: %w", namespace, jobID, err)
	}
	return nil
}
