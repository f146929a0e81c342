package logcap_test

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/logcap"
)

const (
	capMax  = logcap.MinMax
	capTail = capMax / 8
	// capHead is what the head keeps: the cap less the tail and the room
	// of two markers.
	capHead = capMax - capTail - 2*256
	setting = "FLEET_ENGINE_LOG_MAX_BYTES"
)

// lines is n numbered lines of 64 bytes each.
func lines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "line %06d %s\n", i, strings.Repeat(".", 64-13))
	}
	return b.Bytes()
}

// write feeds in to w in chunks of size chunk (all at once for 0), then
// flushes; it returns what Flush said was left out.
func write(t *testing.T, w *logcap.Writer, in []byte, chunk int) int64 {
	t.Helper()
	if chunk == 0 {
		chunk = len(in)
	}
	for len(in) > 0 {
		n := min(chunk, len(in))
		got, err := w.Write(in[:n])
		require.NoError(t, err)
		require.Equal(t, n, got, "a write takes all its bytes")
		in = in[n:]
	}
	dropped, err := w.Flush()
	require.NoError(t, err)
	return dropped
}

var markerRE = regexp.MustCompile(`\[(\d+) bytes of output left out here: this log keeps at most (\d+) bytes \(FLEET_ENGINE_LOG_MAX_BYTES\), the first and the last\]\n`)

// TestWriterKeeps: output within the cap is kept whole, whatever the
// chunks it comes in; past the cap the file keeps the head, one marker
// line naming the bytes left out and the cap's setting, and the last
// lines (from a line's start) within the tail, never more than the cap,
// the same whatever the chunks.
func TestWriterKeeps(t *testing.T) {
	t.Parallel()
	endless := bytes.Repeat([]byte("y"), 1<<20)
	for _, tc := range []struct {
		name string
		in   []byte
		// whole: nothing is left out.
		whole bool
		// tail: some of the end is kept after the marker.
		tail bool
	}{
		{name: "under the cap", in: lines(100), whole: true},
		{name: "the head exactly", in: lines(capHead / 64), whole: true},
		{name: "past the head, within the tail", in: lines(capHead/64 + capTail/64/2), whole: true},
		{name: "past the cap", in: lines(20000), tail: true},
		{name: "one endless line", in: endless},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var outs []string
			for _, chunk := range []int{0, 1000, 4096, 1} {
				if chunk == 1 && len(tc.in) > 200_000 {
					continue // byte by byte: only where it is quick
				}
				var out bytes.Buffer
				w := logcap.New(&out, logcap.Config{Max: capMax, Setting: setting})
				dropped := write(t, w, tc.in, chunk)
				outs = append(outs, out.String())
				require.LessOrEqual(t, out.Len(), capMax)
				if tc.whole {
					require.Zero(t, dropped)
					require.Equal(t, string(tc.in), out.String())
					continue
				}
				require.Positive(t, dropped)
				got := out.String()
				require.True(t, strings.HasPrefix(got, string(tc.in[:capHead])), "the head is kept")
				m := markerRE.FindAllStringSubmatchIndex(got, -1)
				require.Len(t, m, 1, "one marker line: %q", got[capHead:min(len(got), capHead+400)])
				require.Contains(t, []string{"", "\n"}, got[capHead:m[0][0]], "the marker right after the head")
				require.Equal(t, byte('\n'), got[m[0][0]-1], "the marker on a line of its own")
				require.Equal(t, strconv.FormatInt(dropped, 10), got[m[0][2]:m[0][3]])
				require.Equal(t, strconv.Itoa(capMax), got[m[0][4]:m[0][5]])
				tail := got[m[0][1]:]
				require.Equal(t, len(tc.in), capHead+int(dropped)+len(tail), "every byte is kept or counted")
				if !tc.tail {
					require.Empty(t, tail)
					continue
				}
				require.True(t, strings.HasSuffix(string(tc.in), tail), "the tail is the output's end")
				require.Equal(t, byte('\n'), tc.in[len(tc.in)-len(tail)-1], "the tail starts at a line")
				require.Greater(t, len(tail), capTail-64, "the tail takes its room, less a line")
				require.LessOrEqual(t, len(tail), capTail)
			}
			for _, o := range outs[1:] {
				require.Equal(t, outs[0], o, "the same whatever the chunks")
			}
		})
	}
}

// TestWriterStretches: each stretch of output that passed the head (the
// engine's, the ship hook's) ends with its own marker and tail while there
// is room; the file never passes the cap.
func TestWriterStretches(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	caps := 0
	w := logcap.New(&out, logcap.Config{Max: capMax, Setting: setting, OnCap: func() { caps++ }})
	var total int64
	for stretch := range 4 {
		in := lines(3000)
		dropped := write(t, w, in, 4096)
		require.Positive(t, dropped, "stretch %d", stretch)
		total += int64(len(in))
		require.LessOrEqual(t, out.Len(), capMax, "stretch %d", stretch)
	}
	require.Equal(t, 1, caps, "OnCap is called once")
	markers := markerRE.FindAllString(out.String(), -1)
	require.GreaterOrEqual(t, len(markers), 2, "each stretch says what it left out while there is room")
	require.Less(t, out.Len(), int(total))
}

// TestWriterNamesTheFile: the marker line calls the file by its name
// ("this log" unless told), cut so the longest marker still fits its room:
// the file never passes the cap.
func TestWriterNamesTheFile(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", 200)
	for _, tc := range []struct{ name, want string }{
		{name: "", want: "this log"},
		{name: "this diff", want: "this diff"},
		{name: long, want: long[:32]},
	} {
		var out bytes.Buffer
		w := logcap.New(&out, logcap.Config{Max: capMax, Setting: strings.Repeat("S", 200), Name: tc.name})
		// No line ends, so the tail keeps nothing: the file is the head
		// and the marker, the longest it can be.
		require.Positive(t, write(t, w, bytes.Repeat([]byte("y"), 4*capMax), 0))
		require.Contains(t, out.String(), " bytes of output left out here: "+tc.want+" keeps at most ")
		require.LessOrEqual(t, out.Len(), capMax)
	}
}

// TestWriterConcurrent: stdout and stderr write at once; the file stays
// within the cap and holds exactly one marker.
func TestWriterConcurrent(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := logcap.New(&out, logcap.Config{Max: capMax, Setting: setting})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			in := lines(5000)
			for len(in) > 0 {
				n := min(512, len(in))
				_, _ = w.Write(in[:n])
				in = in[n:]
			}
		})
	}
	wg.Wait()
	dropped, err := w.Flush()
	require.NoError(t, err)
	require.Positive(t, dropped)
	require.LessOrEqual(t, out.Len(), capMax)
	require.Len(t, markerRE.FindAllString(out.String(), -1), 1)
}
