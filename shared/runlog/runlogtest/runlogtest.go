// Package runlogtest is the conformance suite every runlog.Store backend
// passes: appends by offset (idempotent re-sends, overlaps, gaps), reads
// from any offset, the cap that keeps the tail, racing appenders, keys kept
// apart and a job's logs deleted.
package runlogtest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/runlog"

	"github.com/stretchr/testify/require"
)

// Open returns a store nothing else writes while the subtest runs, with
// limits; it registers its own cleanup.
type Open func(t *testing.T, limits runlog.Limits) runlog.Store

// Run runs the suite, each subtest in parallel on its own store.
func Run(t *testing.T, open Open) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Open)
	}{
		{"AppendAndRead", testAppendAndRead},
		{"ResendIsIdempotent", testResend},
		{"OverlapAppendsNewPart", testOverlap},
		{"Gap", testGap},
		{"NeverWritten", testNeverWritten},
		{"ReadLimit", testReadLimit},
		{"CapKeepsTail", testCap},
		{"ChunkAcrossSegments", testChunkAcrossSegments},
		{"RacingAppenders", testRacing},
		{"KeysApart", testKeysApart},
		{"DeleteJob", testDeleteJob},
		{"InvalidKeys", testInvalidKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open)
		})
	}
}

var key = runlog.Key{Namespace: "p1", JobID: "j1", Epoch: 1}

var roomy = runlog.Limits{MaxBytes: 1 << 20, Segments: 4}

func appendOK(t *testing.T, s runlog.Store, k runlog.Key, off int64, p string) runlog.Info {
	t.Helper()
	info, err := s.Append(t.Context(), k, off, []byte(p))
	require.NoError(t, err, "append %q at %d", p, off)
	return info
}

// ReadAll reads the log from off to its end as the API does: chunk by
// chunk. It returns the bytes and the offset of the first.
func ReadAll(t *testing.T, s runlog.Store, k runlog.Key, off int64) ([]byte, int64) {
	t.Helper()
	var out []byte
	first := int64(-1)
	for {
		data, at, info, err := s.Read(t.Context(), k, off, 1<<20)
		require.NoError(t, err)
		if first < 0 {
			first = at
		}
		require.GreaterOrEqual(t, at, off, "a read never goes back")
		require.Equal(t, at, max(off, info.Start), "a read starts at the offset asked, or the first byte kept")
		if len(data) == 0 {
			require.GreaterOrEqual(t, at, info.Size, "nothing read before the end")
			return out, first
		}
		if first >= 0 && at != first+int64(len(out)) {
			t.Fatalf("read at %d after %d bytes from %d: bytes were skipped", at, len(out), first)
		}
		out = append(out, data...)
		off = at + int64(len(data))
	}
}

func testAppendAndRead(t *testing.T, open Open) {
	s := open(t, roomy)
	require.Equal(t, runlog.Info{Size: 6}, appendOK(t, s, key, 0, "hello "))
	require.Equal(t, runlog.Info{Size: 11}, appendOK(t, s, key, 6, "world"))
	info, err := s.Stat(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, runlog.Info{Size: 11}, info)
	got, at := ReadAll(t, s, key, 0)
	require.Equal(t, "hello world", string(got))
	require.Zero(t, at)
	got, at = ReadAll(t, s, key, 6)
	require.Equal(t, "world", string(got))
	require.EqualValues(t, 6, at)
	got, _ = ReadAll(t, s, key, 11)
	require.Empty(t, got, "nothing at the end")
}

func testResend(t *testing.T, open Open) {
	s := open(t, roomy)
	appendOK(t, s, key, 0, "one\n")
	appendOK(t, s, key, 4, "two\n")
	// A retry of either chunk (its answer lost) changes nothing, even with
	// other bytes: what is stored is never rewritten.
	require.Equal(t, runlog.Info{Size: 8}, appendOK(t, s, key, 0, "one\n"))
	require.Equal(t, runlog.Info{Size: 8}, appendOK(t, s, key, 4, "two\n"))
	require.Equal(t, runlog.Info{Size: 8}, appendOK(t, s, key, 2, "XX"))
	require.Equal(t, runlog.Info{Size: 8}, appendOK(t, s, key, 8, ""))
	got, _ := ReadAll(t, s, key, 0)
	require.Equal(t, "one\ntwo\n", string(got))
}

func testOverlap(t *testing.T, open Open) {
	s := open(t, roomy)
	appendOK(t, s, key, 0, "abc")
	require.Equal(t, runlog.Info{Size: 6}, appendOK(t, s, key, 1, "bcdef"), "only def is new")
	got, _ := ReadAll(t, s, key, 0)
	require.Equal(t, "abcdef", string(got))
}

func testGap(t *testing.T, open Open) {
	s := open(t, roomy)
	_, err := s.Append(t.Context(), key, 1, []byte("x"))
	require.ErrorIs(t, err, runlog.ErrGap, "the first chunk must start at 0")
	appendOK(t, s, key, 0, "abc")
	_, err = s.Append(t.Context(), key, 5, []byte("fg"))
	require.ErrorIs(t, err, runlog.ErrGap)
	var gap *runlog.GapError
	require.True(t, errors.As(err, &gap), "%v", err)
	require.Equal(t, runlog.GapError{Offset: 5, Size: 3}, *gap, "the gap names where to resend from")
	info, err := s.Stat(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, runlog.Info{Size: 3}, info, "a gap stores nothing")
}

func testNeverWritten(t *testing.T, open Open) {
	s := open(t, roomy)
	info, err := s.Stat(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, runlog.Info{}, info)
	data, at, info, err := s.Read(t.Context(), key, 0, 10)
	require.NoError(t, err)
	require.Empty(t, data)
	require.Zero(t, at)
	require.Equal(t, runlog.Info{}, info)
	require.NoError(t, s.DeleteJob(t.Context(), key.Namespace, key.JobID))
}

func testReadLimit(t *testing.T, open Open) {
	s := open(t, roomy)
	appendOK(t, s, key, 0, "0123456789")
	data, at, info, err := s.Read(t.Context(), key, 2, 3)
	require.NoError(t, err)
	require.Equal(t, "234", string(data))
	require.EqualValues(t, 2, at)
	require.Equal(t, runlog.Info{Size: 10}, info)
}

// content is n bytes no two nearby offsets share, so a misplaced byte shows.
func content(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
		if i%10 == 9 {
			b[i] = '\n'
		}
	}
	return b
}

func testCap(t *testing.T, open Open) {
	limits := runlog.Limits{MaxBytes: 64, Segments: 4} // segments of 16
	s := open(t, limits)
	all := content(203)
	var info runlog.Info
	for off := 0; off < len(all); off += 7 {
		end := min(off+7, len(all))
		var err error
		info, err = s.Append(t.Context(), key, int64(off), all[off:end])
		require.NoError(t, err)
		require.LessOrEqual(t, info.Size-info.Start, limits.MaxBytes, "at most the cap is kept (at %d)", off)
	}
	require.EqualValues(t, len(all), info.Size, "offsets count every byte, dropped ones too")
	require.Greater(t, info.Start, int64(0), "the oldest bytes went")
	require.GreaterOrEqual(t, info.Size-info.Start, limits.MaxBytes-limits.SegmentBytes(), "the tail is kept, short of one segment at most")
	stat, err := s.Stat(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, info, stat)

	got, at := ReadAll(t, s, key, 0)
	require.Equal(t, info.Start, at, "a read from a dropped offset starts at the first byte kept")
	require.Equal(t, string(all[at:]), string(got))
	// Resending a dropped chunk is still accepted and changes nothing.
	again, err := s.Append(t.Context(), key, 0, all[:7])
	require.NoError(t, err)
	require.Equal(t, info, again)
}

func testChunkAcrossSegments(t *testing.T, open Open) {
	s := open(t, runlog.Limits{MaxBytes: 64, Segments: 4})
	all := content(50)
	appendOK(t, s, key, 0, string(all[:5]))
	info := appendOK(t, s, key, 3, string(all[3:50])) // spans four segments
	require.Equal(t, runlog.Info{Size: 50}, info)
	got, _ := ReadAll(t, s, key, 0)
	require.Equal(t, string(all), string(got))
	got, at := ReadAll(t, s, key, 17)
	require.EqualValues(t, 17, at)
	require.Equal(t, string(all[17:]), string(got))
}

// testRacing: several writers (instances answering retries of the same
// factory) send the same chunks at once; each byte is stored once, in
// place.
func testRacing(t *testing.T, open Open) {
	s := open(t, runlog.Limits{MaxBytes: 1 << 20, Segments: 64}) // segments of 16 KiB
	all := content(40 << 10)
	const chunk = 3000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for off := 0; off < len(all); off += chunk {
				if _, err := s.Append(t.Context(), key, int64(off), all[off:min(off+chunk, len(all))]); err != nil {
					errs <- fmt.Errorf("append at %d: %w", off, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got, _ := ReadAll(t, s, key, 0)
	require.True(t, bytes.Equal(all, got), "the log is the chunks once each, in order (got %d bytes)", len(got))
}

func testKeysApart(t *testing.T, open Open) {
	s := open(t, roomy)
	keys := []runlog.Key{key, {Namespace: "p1", JobID: "j1", Epoch: 2}, {Namespace: "p1", JobID: "j2", Epoch: 1}, {Namespace: "p2", JobID: "j1", Epoch: 1}}
	for i, k := range keys {
		appendOK(t, s, k, 0, fmt.Sprintf("log %d", i))
	}
	for i, k := range keys {
		got, _ := ReadAll(t, s, k, 0)
		require.Equal(t, fmt.Sprintf("log %d", i), string(got), "%s", k)
	}
}

func testDeleteJob(t *testing.T, open Open) {
	s := open(t, runlog.Limits{MaxBytes: 64, Segments: 4})
	e2 := runlog.Key{Namespace: "p1", JobID: "j1", Epoch: 2}
	other := runlog.Key{Namespace: "p1", JobID: "j10", Epoch: 1}
	otherProduct := runlog.Key{Namespace: "p2", JobID: "j1", Epoch: 1}
	appendOK(t, s, key, 0, string(content(40)))
	appendOK(t, s, e2, 0, "second run")
	appendOK(t, s, other, 0, "another job")
	appendOK(t, s, otherProduct, 0, "another product")
	require.NoError(t, s.DeleteJob(t.Context(), "p1", "j1"))
	for _, k := range []runlog.Key{key, e2} {
		info, err := s.Stat(t.Context(), k)
		require.NoError(t, err)
		require.Equal(t, runlog.Info{}, info, "%s is gone", k)
	}
	for _, k := range []runlog.Key{other, otherProduct} {
		info, err := s.Stat(t.Context(), k)
		require.NoError(t, err)
		require.Positive(t, info.Size, "%s stays", k)
	}
	require.NoError(t, s.DeleteJob(t.Context(), "p1", "j1"), "deleting what is gone is no error")
}

func testInvalidKeys(t *testing.T, open Open) {
	s := open(t, roomy)
	for _, k := range []runlog.Key{
		{Namespace: "", JobID: "j1"}, {Namespace: "..", JobID: "j1"}, {Namespace: "p1", JobID: "a/b"},
		{Namespace: "p1", JobID: ""}, {Namespace: "p1", JobID: "j1", Epoch: -1},
	} {
		_, err := s.Append(t.Context(), k, 0, []byte("x"))
		require.Error(t, err, "append %+v", k)
		_, err = s.Stat(t.Context(), k)
		require.Error(t, err, "stat %+v", k)
		_, _, _, err = s.Read(t.Context(), k, 0, 1)
		require.Error(t, err, "read %+v", k)
	}
	require.Error(t, s.DeleteJob(t.Context(), "p1", "../x"))
	_, err := s.Append(t.Context(), key, -1, []byte("x"))
	require.Error(t, err, "a negative offset")
}
