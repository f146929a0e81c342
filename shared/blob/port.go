package blob

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Blob store errors. Every backend returns exactly these (wrapped is fine);
// a failure to reach the backend is ErrUnavailable, as for the Store.
var (
	// ErrNotFound: no blob under that key.
	ErrNotFound = errors.New("blob: not found")
	// ErrTooLarge: Stage read more than its limit; nothing was kept.
	ErrTooLarge = errors.New("blob: larger than the limit")
	// ErrVersion: a conditional Delete found another version of the blob.
	ErrVersion = errors.New("blob: version mismatch")
)

// Key names a blob: the SHA-256 of its bytes within a namespace (the
// product). Content addressing makes identical uploads one blob; the
// namespace keeps products apart, so whether some bytes are already stored
// says nothing about another product's artifacts.
type Key struct {
	Namespace string
	SHA256    string // 64 lower-case hex digits
}

// String is the key as adapters name the blob: "<namespace>/<sha256>".
func (k Key) String() string { return k.Namespace + "/" + k.SHA256 }

// Validate checks the key is one a backend can use as a path or blob name
// as it is: a plain namespace and a SHA-256 in lower-case hex.
func (k Key) Validate() error {
	if err := ValidateNamespace(k.Namespace); err != nil {
		return err
	}
	if !fleet.ValidSHA256(k.SHA256) {
		return fmt.Errorf("blob key %q: the digest is not 64 lower-case hex digits", k.String())
	}
	return nil
}

// ValidateNamespace checks a namespace is a plain name, safe as a path
// segment and in a blob name.
func ValidateNamespace(ns string) error {
	if err := fleet.ValidateName("namespace", ns); err != nil {
		return fmt.Errorf("blob namespace %q: %w", ns, err)
	}
	return nil
}

// Info describes a stored blob.
type Info struct {
	Key  Key
	Size int64
	// Version changes whenever the blob is written, including a Commit of
	// bytes already there; Delete can be made conditional on it. It is
	// opaque and is not the SHA-256.
	Version string
}

// Store keeps artifact bytes outside the document store. Backends:
// blob/fs (a directory), blob/azblob (Azure Blob Storage); blob/blobtest is
// the conformance suite they pass.
//
// Bytes arrive in two steps so that a blob never disappears under a writer
// that counted on it: Stage streams them aside (hashing as they pass, never
// holding them whole in memory) and Commit then makes them the blob of their
// digest. A Commit after a reference is taken, with a Delete conditional on
// the version read before the reference was dropped, means a Delete racing
// an identical upload can only remove bytes that the upload then writes
// again (see releaseBlob).
type Store interface {
	// Stage reads r to its end into a staging area, at most limit bytes,
	// and returns the staged bytes with their digest and size. More than
	// limit bytes is ErrTooLarge; an error reading r is returned
	// wrapped. Nothing is visible under any key until Commit; on error
	// nothing is kept.
	Stage(ctx context.Context, namespace string, r io.Reader, limit int64) (Staged, error)
	// Open returns the blob's bytes and what they are; ErrNotFound
	// when absent. A reader keeps working if the blob is deleted while it
	// is open, or ends with an error; it never yields other bytes.
	Open(ctx context.Context, key Key) (io.ReadCloser, Info, error)
	// Stat describes the blob; ErrNotFound when absent.
	Stat(ctx context.Context, key Key) (Info, error)
	// Delete removes the blob. With ifVersion set, only at that version
	// (else ErrVersion and the blob stays). A blob already gone is not
	// an error.
	Delete(ctx context.Context, key Key, ifVersion string) error
}

// Staged is bytes staged by Store.Stage. It is used by one
// goroutine; Discard must be called when done with it, committed or not.
type Staged interface {
	// Key is where Commit puts the bytes.
	Key() Key
	// Size is the number of bytes staged.
	Size() int64
	// Commit makes the staged bytes the blob of Key: it writes them when
	// the blob is absent, and when it is present (identical bytes, by
	// construction) gives it a new Version, so a Delete conditional on an
	// older version fails. It may be called again, e.g. after a Delete.
	Commit(ctx context.Context) (Info, error)
	// Discard releases the staging area. The committed blob stays.
	Discard() error
}
