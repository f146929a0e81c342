// Package logcap bounds a run's log file. An engine that prints without
// end (a runaway coding agent) must neither fill the factory's disk nor
// leave a log the coordinator refuses as an artifact: a Writer keeps the
// head of the output as it comes, holds a bounded tail in memory once the
// head is full, and at the end of a stretch of output (Flush) writes one
// line saying how many bytes were left out, then that tail. The tail is
// kept because the end of a run's output is what explains it: a failure
// report quotes the log's last lines, and a structured engine's result is
// its last event.
//
// Nothing is ever written at an offset already written: the live-log
// shipper sends the file by offset as it grows, so the file it reads is
// always a prefix of the final one.
package logcap

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

const (
	// markerRoom is the room kept for one marker line.
	markerRoom = 256
	// maxTail bounds the tail held in memory (a run holds up to twice it
	// between compactions).
	maxTail = 1 << 20
	// MinMax is the smallest cap: room for a head, a tail and the markers.
	MinMax = 64 << 10
	// maxSetting and maxName bound the setting's name and the file's, so
	// a marker fits its room.
	maxSetting = 100
	maxName    = 32
)

// Config says how much to keep.
type Config struct {
	// Max is the most bytes written to the file, markers included; at
	// least MinMax.
	Max int64
	// Setting names what sets Max, for the marker line (its first
	// maxSetting bytes).
	Setting string
	// OnCap, if set, is called once, when the output first passes the
	// head (under the writer's lock: it must not write to it).
	OnCap func()
	// Name is what the marker line calls the file (its first maxName
	// bytes); "this log" when empty.
	Name string
}

// Writer is an io.Writer that keeps at most Config.Max bytes in w. Its
// methods are safe for concurrent use (stdout and stderr arrive on
// goroutines of their own).
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	cfg Config
	// head is how many bytes are written before the output is held back:
	// Max less the tail and two markers (an engine's stretch of output
	// and the ship hook's may each need one).
	head, tail int64

	written int64 // bytes written to w
	last    byte  // the last byte written
	over    bool  // the head is full
	// overflow counts the bytes that came since the head was full (or
	// since the last Flush); buf holds the last of them, and before is the
	// byte just before buf, the last one left out.
	overflow int64
	buf      []byte
	before   byte
}

// New writes to w what c keeps.
func New(w io.Writer, c Config) *Writer {
	tail := min(c.Max/8, maxTail)
	if len(c.Setting) > maxSetting {
		c.Setting = c.Setting[:maxSetting]
	}
	if c.Name == "" {
		c.Name = "this log"
	}
	if len(c.Name) > maxName {
		c.Name = c.Name[:maxName]
	}
	return &Writer{w: w, cfg: c, tail: tail, head: max(0, c.Max-tail-2*markerRoom)}
}

// Write takes all of b: what fits in the head is written, the rest held
// for the tail. An error is the file's.
func (w *Writer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	if !w.over {
		room := w.head - w.written
		if int64(len(b)) <= room {
			return w.write(b)
		}
		if k, err := w.write(b[:room]); err != nil {
			return k, err
		}
		b = b[room:]
		w.over = true
		if w.cfg.OnCap != nil {
			w.cfg.OnCap()
		}
	}
	w.hold(b)
	return n, nil
}

// tailRoom is how many bytes of the held output a Flush may write: the
// tail, or less when the file is nearly full (a second stretch of output
// after a first that passed the head).
func (w *Writer) tailRoom() int64 {
	return max(0, min(w.tail, w.cfg.Max-w.written-markerRoom))
}

// hold keeps the last tailRoom bytes of what comes, in a buffer compacted
// once it holds twice that, so each byte is copied at most twice.
func (w *Writer) hold(b []byte) {
	w.overflow += int64(len(b))
	room := w.tailRoom()
	if int64(len(b)) > room {
		cut := int64(len(b)) - room
		w.before, w.buf = b[cut-1], append(w.buf[:0], b[cut:]...)
		return
	}
	w.buf = append(w.buf, b...)
	if excess := int64(len(w.buf)) - room; excess > room {
		w.before, w.buf = w.buf[excess-1], append(w.buf[:0], w.buf[excess:]...)
	}
}

// Flush ends a stretch of output: what was held back is written, after a
// marker line saying how many bytes were left out when some were. The
// tail then starts at a line (a line's end says little without its
// start). It returns how many bytes were left out.
func (w *Writer) Flush() (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overflow == 0 {
		return 0, nil
	}
	kept := w.buf
	if room := w.tailRoom(); int64(len(kept)) > room {
		w.before, kept = kept[int64(len(kept))-room-1], kept[int64(len(kept))-room:]
	}
	if int64(len(kept)) < w.overflow && w.before != '\n' {
		if i := bytes.IndexByte(kept, '\n'); i >= 0 {
			kept = kept[i+1:]
		} else {
			kept = nil
		}
	}
	dropped := w.overflow - int64(len(kept))
	w.overflow, w.buf = 0, w.buf[:0]
	if dropped > 0 {
		m := w.marker(dropped)
		// Always true but after a third stretch that passed the head: an
		// earlier marker then already says that output was left out.
		if w.written+int64(len(m)) <= w.cfg.Max {
			if _, err := w.write(m); err != nil {
				return dropped, err
			}
		}
	}
	_, err := w.write(kept)
	return dropped, err
}

// marker is the line that says what was left out, on a line of its own.
func (w *Writer) marker(dropped int64) []byte {
	m := fmt.Sprintf("[%d bytes of output left out here: %s keeps at most %d bytes (%s), the first and the last]\n",
		dropped, w.cfg.Name, w.cfg.Max, w.cfg.Setting)
	if w.written > 0 && w.last != '\n' {
		m = "\n" + m
	}
	return []byte(m)
}

func (w *Writer) write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := w.w.Write(b)
	w.written += int64(n)
	if n > 0 {
		w.last = b[n-1]
	}
	return n, err
}
