package runlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Segments: how both backends lay a log out. A log is a run of segments,
// each named by the offset of its first byte (SegmentName) and holding
// bytes [Start, Start+Len). A segment takes appends until it holds
// Limits.SegmentBytes (a backend may start the next one earlier, e.g. at
// an append blob's block limit); the oldest go once the rest would still
// hold more than Limits.MaxBytes. These rules live here once so the
// backends cannot disagree on offsets.

// Segment is one stored piece of a log.
type Segment struct {
	Start, Len int64
}

// End is the offset after its last byte.
func (s Segment) End() int64 { return s.Start + s.Len }

// segmentDigits zero-pads names so that they sort as their offsets do.
const segmentDigits = 19

// SegmentName is the name of the segment starting at start.
func SegmentName(start int64) string {
	return fmt.Sprintf("%0*d", segmentDigits, start)
}

// ParseSegmentName reads a SegmentName; ok is false for any other name.
func ParseSegmentName(name string) (int64, bool) {
	if len(name) != segmentDigits {
		return 0, false
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil && v >= 0
}

// InfoOf is the state of a log made of segs, sorted by Start.
func InfoOf(segs []Segment) Info {
	if len(segs) == 0 {
		return Info{}
	}
	return Info{Start: segs[0].Start, Size: segs[len(segs)-1].End()}
}

// Trim checks an append of n bytes at off against a log of size and
// returns how many leading bytes are already stored (skip); a chunk wholly
// stored has skip == n. off past size is a *GapError.
func Trim(size, off int64, n int) (skip int, err error) {
	switch {
	case off < 0:
		return 0, fmt.Errorf("runlog: negative offset %d", off)
	case off > size:
		return 0, &GapError{Offset: off, Size: size}
	}
	return int(min(size-off, int64(n))), nil
}

// Expired is how many of segs, oldest first, go once the log is size
// bytes: the kept bytes stay at most l.MaxBytes, and the newest segment
// always stays.
func Expired(segs []Segment, size int64, l Limits) int {
	n := 0
	for n < len(segs)-1 && size-segs[n].Start > l.MaxBytes {
		n++
	}
	return n
}

// Locate is the segment of segs holding offset off (clamped to the first
// kept byte), or -1 when off is at or past the end.
func Locate(segs []Segment, off int64) (int, int64) {
	if len(segs) == 0 {
		return -1, off
	}
	off = max(off, segs[0].Start)
	for i, s := range segs {
		if off < s.End() {
			return i, off
		}
	}
	return -1, off
}

// ReadSegments is a backend's Read over its segments: list lists them,
// oldest first; read reads n bytes of seg from offset at, or says the
// segment is gone (the cap dropped it since the listing), and the listing
// is made again once.
func ReadSegments(ctx context.Context, off int64, limit int,
	list func(context.Context) ([]Segment, error),
	read func(ctx context.Context, seg Segment, at, n int64) (data []byte, gone bool, err error),
) ([]byte, int64, Info, error) {
	if off < 0 || limit <= 0 {
		return nil, 0, Info{}, fmt.Errorf("offset %d, limit %d", off, limit)
	}
	for range 2 {
		if err := ctx.Err(); err != nil {
			return nil, 0, Info{}, err
		}
		segs, err := list(ctx)
		if err != nil {
			return nil, 0, Info{}, err
		}
		info := InfoOf(segs)
		i, at := Locate(segs, off)
		if i < 0 {
			return nil, at, info, nil
		}
		data, gone, err := read(ctx, segs[i], at, min(int64(limit), segs[i].End()-at))
		if gone {
			continue
		}
		if err != nil {
			return nil, 0, info, err
		}
		return data, at, info, nil
	}
	return nil, 0, Info{}, errors.New("the log's segments keep moving")
}
