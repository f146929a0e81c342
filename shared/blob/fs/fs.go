// Package fs is the blob.Store of one machine: artifact bytes as files
// in a directory (by default under the data directory).
//
// Layout: <dir>/<namespace>/<sha256[:2]>/<sha256> for blobs, <dir>/staging
// for uploads in progress, and <dir>/.lock. Stage writes a staging file while
// hashing it; Commit hard-links it into place (or, when the blob is already
// there, gives it a new version). Blobs are never rewritten in place, so a
// reader holding a file open reads whole bytes even if the blob is deleted
// meanwhile.
//
// A blob's version is its modification time in nanoseconds. Commits and
// deletes hold an exclusive lock (a mutex, and flock(2) on <dir>/.lock across
// processes) and issue versions from a counter kept in the lock file, so
// every commit gives a version never issued before, even to a blob that was
// deleted and written again, and a delete conditional on a version is atomic.
package fs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/blob"
)

// Directory names inside the store's directory.
const (
	stagingDir = "staging"
	lockFile   = ".lock"
)

// StaleStaging is how old a staging file must be before Open removes it: it
// was left by a process that died mid-upload. Uploads take far less, so an
// upload of another process still running is never cut short.
const StaleStaging = 24 * time.Hour

// Store keeps blobs in a directory. It is safe for concurrent use, and for
// several processes sharing the directory on one machine.
type Store struct {
	dir     string
	staging string
	mu      sync.Mutex // serialises this process's holders of lock
	lock    *os.File
}

var _ blob.Store = (*Store)(nil)

// Open opens (creating it if needed) the store in dir and removes staging
// files older than StaleStaging.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob dir %s: %w", dir, err)
	}
	s := &Store{dir: abs, staging: filepath.Join(abs, stagingDir)}
	if err := os.MkdirAll(s.staging, 0o700); err != nil {
		return nil, fmt.Errorf("blob dir: %w", err)
	}
	s.lock, err = os.OpenFile(filepath.Join(abs, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("blob dir: %w", err)
	}
	if err := s.removeStaleStaging(time.Now()); err != nil {
		_ = s.lock.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the lock file.
func (s *Store) Close() error { return s.lock.Close() }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) removeStaleStaging(now time.Time) error {
	entries, err := os.ReadDir(s.staging)
	if err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < StaleStaging {
			continue
		}
		_ = os.Remove(filepath.Join(s.staging, e.Name()))
	}
	return nil
}

// StagingFiles counts the staging files present now.
func (s *Store) StagingFiles() (int, error) {
	entries, err := os.ReadDir(s.staging)
	return len(entries), err
}

func (s *Store) path(k blob.Key) string {
	return filepath.Join(s.dir, k.Namespace, k.SHA256[:2], k.SHA256)
}

// Stage copies r into a staging file, hashing it on the way.
func (s *Store) Stage(ctx context.Context, namespace string, r io.Reader, limit int64) (blob.Staged, error) {
	if err := blob.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, fmt.Errorf("blob stage: negative limit %d", limit)
	}
	f, err := os.CreateTemp(s.staging, "stage-*")
	if err != nil {
		return nil, fmt.Errorf("blob stage: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := blob.CopyLimited(ctx, io.MultiWriter(f, h), r, limit)
	if err != nil {
		return nil, err
	}
	// Durable before it can become a blob: a crash must not leave a
	// committed name over a file with holes.
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("blob stage: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("blob stage: %w", err)
	}
	keep = true
	return &staged{s: s, path: f.Name(), key: blob.Key{Namespace: namespace, SHA256: hex.EncodeToString(h.Sum(nil))}, size: n}, nil
}

type staged struct {
	s    *Store
	path string
	key  blob.Key
	size int64
}

func (b *staged) Key() blob.Key { return b.key }
func (b *staged) Size() int64   { return b.size }

// Discard removes the staging file; a committed blob is another link to it
// and stays.
func (b *staged) Discard() error {
	if err := os.Remove(b.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob discard: %w", err)
	}
	return nil
}

// Commit links the staged file into place, or gives the blob already there
// a new version.
func (b *staged) Commit(ctx context.Context) (blob.Info, error) {
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	final := b.s.path(b.key)
	var info blob.Info
	err := b.s.locked(func(v *versions) error {
		if _, err := os.Lstat(final); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
				return err
			}
			if err := os.Link(b.path, final); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		mtime, err := v.stamp(final)
		if err != nil {
			return err
		}
		fi, err := os.Stat(final)
		if err != nil {
			return err
		}
		info = blob.Info{Key: b.key, Size: fi.Size(), Version: version(mtime)}
		return nil
	})
	if err != nil {
		return blob.Info{}, fmt.Errorf("blob commit %s: %w", b.key, err)
	}
	return info, nil
}

// Open opens the blob's file. Deleting the blob unlinks the name; the open
// file keeps its bytes.
func (s *Store) Open(ctx context.Context, key blob.Key) (io.ReadCloser, blob.Info, error) {
	if err := key.Validate(); err != nil {
		return nil, blob.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, blob.Info{}, err
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, blob.Info{}, fmt.Errorf("blob %s: %w", key, blob.ErrNotFound)
	}
	if err != nil {
		return nil, blob.Info{}, fmt.Errorf("blob open %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, blob.Info{}, fmt.Errorf("blob open %s: %w", key, err)
	}
	return f, infoOf(key, fi), nil
}

// Stat describes the blob.
func (s *Store) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	if err := key.Validate(); err != nil {
		return blob.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	fi, err := os.Stat(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return blob.Info{}, fmt.Errorf("blob %s: %w", key, blob.ErrNotFound)
	}
	if err != nil {
		return blob.Info{}, fmt.Errorf("blob stat %s: %w", key, err)
	}
	return infoOf(key, fi), nil
}

// Delete unlinks the blob, if it is still at ifVersion when one is given.
func (s *Store) Delete(ctx context.Context, key blob.Key, ifVersion string) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	path := s.path(key)
	err := s.locked(func(*versions) error {
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if ifVersion != "" && version(fi.ModTime().UnixNano()) != ifVersion {
			return blob.ErrVersion
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("blob delete %s: %w", key, err)
	}
	return nil
}

func infoOf(key blob.Key, fi fs.FileInfo) blob.Info {
	return blob.Info{Key: key, Size: fi.Size(), Version: version(fi.ModTime().UnixNano())}
}

func version(mtimeNanos int64) string { return strconv.FormatInt(mtimeNanos, 10) }

// locked runs fn holding the store's exclusive lock.
func (s *Store) locked(fn func(*versions) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := lockFileExclusive(s.lock); err != nil {
		return fmt.Errorf("lock %s: %w", s.lock.Name(), err)
	}
	defer func() { _ = unlockFile(s.lock) }()
	return fn(&versions{f: s.lock})
}

// versions issues blob versions from the counter in the lock file; it is
// only used while the lock is held.
type versions struct{ f *os.File }

// stamp gives path a modification time greater than any version issued
// before and returns it. The file system may round times (some keep
// microseconds or seconds), so the time actually stored is read back, and
// the step grows until it moves.
func (v *versions) stamp(path string) (int64, error) {
	var buf [8]byte
	last := int64(0)
	if n, err := v.f.ReadAt(buf[:], 0); n == len(buf) {
		last = int64(binary.BigEndian.Uint64(buf[:]))
	} else if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	for _, step := range []int64{1, 1e3, 1e6, 1e9} {
		t := time.Unix(0, max(time.Now().UnixNano(), last+step))
		if err := os.Chtimes(path, t, t); err != nil {
			return 0, err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return 0, err
		}
		if got := fi.ModTime().UnixNano(); got > last {
			binary.BigEndian.PutUint64(buf[:], uint64(got))
			if _, err := v.f.WriteAt(buf[:], 0); err != nil {
				return 0, err
			}
			return got, nil
		}
	}
	return 0, fmt.Errorf("the file system does not keep the modification time of %s", path)
}
