// Package runlog is the live-output port: the store of each run's log, the
// bytes a factory streams while its engine runs (API.md "Live output").
// Backends: runlog/fs (files under the data dir) and runlog/azblob (Azure
// append blobs); runlog/runlogtest is the conformance suite both pass.
//
// A run's log is addressed by byte offset from its first byte. Appends are
// idempotent by offset, so a chunk a client retries (its answer lost) or
// two instances race on is stored once, and a missing chunk is a gap the
// client is told of, never silently skipped. Past Limits.MaxBytes the
// oldest bytes are dropped a segment at a time: offsets keep counting, and
// a read tells where the kept bytes start.
package runlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Errors every backend returns (wrapped is fine); a backend it cannot reach
// is store.ErrUnavailable, as for the document store.
var (
	// ErrGap: an append starts past the end of the log. *GapError carries
	// the size, so the client resends from there.
	ErrGap = errors.New("runlog: the chunk starts past the end of the log")
)

// GapError is an append that would leave a hole: the log holds Size bytes.
type GapError struct {
	Offset, Size int64
}

func (e *GapError) Error() string {
	return fmt.Sprintf("runlog: the chunk starts at %d, past the end of the log (%d bytes)", e.Offset, e.Size)
}

// Is makes errors.Is(err, ErrGap) hold.
func (e *GapError) Is(target error) bool { return target == ErrGap }

// Key names one run's log: the product (namespace), the job and the lease
// epoch of the run.
type Key struct {
	Namespace string
	JobID     string
	Epoch     int64
}

// String is the key as backends name the run: "<namespace>/<job>/<epoch>".
func (k Key) String() string {
	return k.Namespace + "/" + k.JobID + "/" + strconv.FormatInt(k.Epoch, 10)
}

// Validate checks the key can be used as a path or blob name as it is.
func (k Key) Validate() error {
	if err := fleet.ValidateName("namespace", k.Namespace); err != nil {
		return fmt.Errorf("runlog key %q: %w", k.String(), err)
	}
	if err := fleet.ValidateName("jobId", k.JobID); err != nil {
		return fmt.Errorf("runlog key %q: %w", k.String(), err)
	}
	if k.Epoch < 0 {
		return fmt.Errorf("runlog key %q: negative epoch", k.String())
	}
	return nil
}

// Info is where a run's log stands.
type Info struct {
	// Size is the offset after its last byte: every byte ever appended,
	// dropped ones included. 0 for a log never written.
	Size int64
	// Start is the offset of the first byte still kept (0 until the cap
	// drops some).
	Start int64
}

// Dropped is how many bytes from the start of the log are gone.
func (i Info) Dropped() int64 { return i.Start }

// Limits bound every run's log.
type Limits struct {
	// MaxBytes is the most a log keeps; past it the oldest segments go.
	MaxBytes int64
	// Segments is how many segments MaxBytes is kept in: a log keeps
	// between MaxBytes*(Segments-1)/Segments and MaxBytes bytes once full.
	Segments int
}

// Defaults.
const (
	DefaultMaxBytes = 32 << 20
	DefaultSegments = 8
)

// Resolve fills in the defaults.
func (l Limits) Resolve() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.Segments <= 0 {
		l.Segments = DefaultSegments
	}
	return l
}

// SegmentBytes is the size of a full segment.
func (l Limits) SegmentBytes() int64 { return max(l.MaxBytes/int64(l.Segments), 1) }

// Store keeps run logs.
type Store interface {
	// Append writes p at offset off of the log. off == size appends; a
	// chunk already stored (off+len(p) <= size) is accepted again and
	// changes nothing; one overlapping the end appends only its new part;
	// off > size is a *GapError. It returns the log's state after.
	Append(ctx context.Context, key Key, off int64, p []byte) (Info, error)
	// Stat is the log's state; a log never written is Info{} (no error).
	// It is cheap (a file stat, a blob property read): live readers poll it.
	Stat(ctx context.Context, key Key) (Info, error)
	// Read returns up to limit bytes of the log from off, or from Info.Start
	// when off is before it (the bytes in between were dropped), with the
	// offset of the first byte returned. It may return fewer bytes than are
	// stored (at most to the end of a segment); nothing at or past the end.
	Read(ctx context.Context, key Key, off int64, limit int) (data []byte, at int64, info Info, err error)
	// DeleteJob removes every run log of the job. A job with none is no error.
	DeleteJob(ctx context.Context, namespace, jobID string) error
}
