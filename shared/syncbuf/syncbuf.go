// Package syncbuf is a bytes buffer safe to write and read at once: the
// output of a process or command that tests read while it is still being
// written.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer whose content can be read while writers write.
// The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
