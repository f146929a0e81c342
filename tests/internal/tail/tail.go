// Package tail keeps the last bytes of a process's output, for the test
// programs (bench, chaos) to show when a stack they started goes wrong.
package tail

import (
	"bytes"
	"sync"
)

// Buffer keeps the last Max bytes written to it, cut at a line start.
type Buffer struct {
	Max int

	mu sync.Mutex
	b  []byte
}

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.Max; over > 0 {
		t.b = t.b[over:]
		if i := bytes.IndexByte(t.b, '\n'); i >= 0 {
			t.b = t.b[i+1:]
		}
	}
	return len(p), nil
}

func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
