// Package blob is the artifact-bytes port: the Store every backend implements,
// its key, info and errors, and what the backends share: reading an
// upload within its size limit. The backends are blob/fs and blob/azblob;
// blob/blobtest is their conformance suite.
package blob

import (
	"context"
	"fmt"
	"io"
	"math"
)

// CopyLimited copies r to w until r ends, and returns how many bytes it
// copied. It reads at most limit+1 bytes: one more than allowed means the
// upload is too large (blob.ErrTooLarge), without reading the rest.
// An error reading r is returned wrapped, so the caller can tell a client
// that stopped sending from a failing backend; ctx is checked between reads.
func CopyLimited(ctx context.Context, w io.Writer, r io.Reader, limit int64) (int64, error) {
	if limit < 0 {
		return 0, fmt.Errorf("blob: negative size limit %d", limit)
	}
	read := limit
	if read < math.MaxInt64 {
		read++
	}
	src := &readErr{r: &ctxReader{ctx: ctx, r: io.LimitReader(r, read)}}
	n, err := io.Copy(w, src)
	switch {
	case src.err != nil:
		return n, fmt.Errorf("blob: reading the upload: %w", src.err)
	case err != nil:
		return n, fmt.Errorf("blob: writing the upload: %w", err)
	case n > limit:
		return n, fmt.Errorf("blob: more than %d bytes: %w", limit, ErrTooLarge)
	}
	return n, nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readErr remembers the reader's own error, so that io.Copy's error can be
// attributed to the reader or the writer.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}
