package logship

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
)

type sent struct {
	off  int64
	data string
}

// fakeCoord stores chunks as the coordinator does (by offset) and fails
// the calls errs says.
type fakeCoord struct {
	calls []sent
	log   []byte
	errs  []error // the next calls' errors, nil for success
}

func (f *fakeCoord) AppendLog(_ context.Context, product, job string, epoch, off int64, chunk []byte) (api.LogAppended, error) {
	f.calls = append(f.calls, sent{off, string(chunk)})
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		if err != nil {
			return api.LogAppended{}, err
		}
	}
	if product != "p1" || job != "j1" || epoch != 3 {
		panic("wrong run")
	}
	if off > int64(len(f.log)) {
		return api.LogAppended{}, &api.Error{Status: 409, Code: fleet.CodeConflict}
	}
	if end := off + int64(len(chunk)); end > int64(len(f.log)) {
		f.log = append(f.log, chunk[int64(len(f.log))-off:]...)
	}
	return api.LogAppended{Size: int64(len(f.log))}, nil
}

type rig struct {
	t     *testing.T
	clk   *clocktest.Clock
	coord *fakeCoord
	path  string
	s     *Shipper
}

func newRig(t *testing.T, maxBehind int64) *rig {
	t.Helper()
	r := &rig{t: t, clk: clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), coord: &fakeCoord{},
		path: filepath.Join(t.TempDir(), "engine.log")}
	r.s = New(Config{Path: r.path, Product: "p1", JobID: "j1", Epoch: 3, Send: r.coord, Timers: r.clk, MaxBehind: maxBehind})
	return r
}

// write appends to the log file as the engine does.
func (r *rig) write(text string) {
	r.t.Helper()
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(r.t, err)
	_, err = f.WriteString(text)
	require.NoError(r.t, err)
	require.NoError(r.t, f.Close())
}

func (r *rig) step(advance time.Duration) {
	r.clk.Advance(advance)
	r.s.Step(r.t.Context())
}

func TestShipsNewBytesAtMostEveryInterval(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.step(DefaultPoll)
	require.Empty(t, r.coord.calls, "no file yet: nothing to send")
	r.write("line 1\n")
	r.step(DefaultPoll)
	require.Equal(t, []sent{{0, "line 1\n"}}, r.coord.calls, "the first bytes go at once")
	r.write("line 2\n")
	r.step(DefaultPoll)
	r.step(DefaultPoll)
	require.Len(t, r.coord.calls, 1, "a small chunk waits for the interval")
	r.step(DefaultInterval - 2*DefaultPoll)
	require.Equal(t, []sent{{0, "line 1\n"}, {7, "line 2\n"}}, r.coord.calls, "sent at its offset once the interval passed")
	r.step(DefaultInterval)
	require.Len(t, r.coord.calls, 2, "nothing new, nothing sent")
	require.Equal(t, "line 1\nline 2\n", string(r.coord.log))
}

func TestNeverMoreThanMaxBehind(t *testing.T) {
	t.Parallel()
	r := newRig(t, 8)
	r.write("0123")
	r.step(DefaultPoll)
	r.write("456789abcdefghijklmn") // 20 more: 24 in all
	r.step(DefaultPoll)
	require.Equal(t, []sent{{0, "0123"}, {4, "456789ab"}, {12, "cdefghij"}}, r.coord.calls,
		"MaxBehind waiting goes at once, in chunks of at most MaxBehind; the rest (less) waits for the interval")
	r.step(DefaultInterval)
	require.Equal(t, sent{20, "klmn"}, r.coord.calls[3])
	require.Equal(t, "0123456789abcdefghijklmn", string(r.coord.log))
}

func TestRetriesAFailedChunkAfterABackoff(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.coord.errs = []error{&api.Error{Status: 503, Code: fleet.CodeUnavailable}}
	r.write("hello\n")
	r.step(DefaultPoll)
	require.Len(t, r.coord.calls, 1)
	r.step(DefaultPoll)
	require.Len(t, r.coord.calls, 1, "not again before the backoff")
	r.step(DefaultInterval)
	require.Equal(t, []sent{{0, "hello\n"}, {0, "hello\n"}}, r.coord.calls, "the same chunk at the same offset")
	require.Equal(t, "hello\n", string(r.coord.log))
}

func TestAGapIsResentFromTheCoordinatorsSize(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.write("abc")
	r.step(DefaultPoll)
	r.coord.log = r.coord.log[:1] // the coordinator lost "bc"
	r.write("def")
	r.coord.errs = []error{&api.Error{Status: 409, Code: fleet.CodeConflict, Header: http.Header{api.HeaderLogSize: {"1"}}}}
	r.step(DefaultInterval)
	require.Equal(t, sent{3, "def"}, r.coord.calls[1])
	require.Equal(t, sent{1, "bcdef"}, r.coord.calls[2], "resent from the size the 409 named, at once")
	require.Equal(t, "abcdef", string(r.coord.log))
}

func TestFencedStopsShipping(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.coord.errs = []error{&api.Error{Status: 409, Code: fleet.CodeFenced}}
	r.write("x\n")
	r.step(DefaultPoll)
	r.write("y\n")
	r.step(time.Minute)
	require.Len(t, r.coord.calls, 1, "a fenced run's log is not sent again")
	require.Zero(t, r.s.Stop(t.Context()))
	require.Len(t, r.coord.calls, 1)
}

func TestStopSendsTheRest(t *testing.T) {
	t.Parallel()
	r := newRig(t, 4)
	r.s.Start(t.Context())
	r.write("first\n")
	r.write("and the rest\n")
	require.EqualValues(t, 19, r.s.Stop(t.Context()), "the rest went before Stop returned, interval or not")
	require.Equal(t, "first\nand the rest\n", string(r.coord.log))
	for _, c := range r.coord.calls {
		require.LessOrEqual(t, len(c.data), 4)
	}
}

func TestFencedAtStopEndsTheFlush(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.write("x\n")
	r.coord.errs = []error{&api.Error{Status: 409, Code: fleet.CodeFenced}}
	// The lease was lost after the last send: the final flush is the first
	// to hear of it, and must end there, not wait out a backoff it never set.
	require.Zero(t, r.s.Stop(t.Context()))
	require.Len(t, r.coord.calls, 1, "a fenced run's log is not sent again")
}

// gatedCoord is fakeCoord whose every append says it began on entered,
// then waits for a token on gate.
type gatedCoord struct {
	*fakeCoord
	entered, gate chan struct{}
}

func (g *gatedCoord) AppendLog(ctx context.Context, product, job string, epoch, off int64, chunk []byte) (api.LogAppended, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return api.LogAppended{}, ctx.Err()
	}
	return g.fakeCoord.AppendLog(ctx, product, job, epoch, off, chunk)
}

// TestStopEndsTheBackgroundSendAfterItsChunk: a backlog the background loop
// is working through when Stop comes is left to Stop's own sends, within
// Stop's deadline: the loop ends after the chunk it is sending, instead of
// sending the whole backlog on the run's context first and holding the
// run's end for as long as that takes.
func TestStopEndsTheBackgroundSendAfterItsChunk(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	coord := &gatedCoord{fakeCoord: &fakeCoord{}, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	path := filepath.Join(t.TempDir(), "engine.log")
	require.NoError(t, os.WriteFile(path, []byte("0123456789abcdefghijklmnopqrstuvwxyzABCD"), 0o600)) // 10 chunks of 4
	s := New(Config{Path: path, Product: "p1", JobID: "j1", Epoch: 3, Send: coord, Timers: clk, MaxBehind: 4})
	made := clk.TickerMade()
	s.Start(t.Context())
	<-made
	clk.Advance(DefaultPoll) // the loop's step starts on the backlog
	<-coord.entered          // and waits in its first send

	stopped := make(chan int64, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // Stop's own sends get no time: only the loop's matter here
	go func() { stopped <- s.Stop(ctx) }()
	<-s.stop                 // Stop has begun: it waits for the loop
	coord.gate <- struct{}{} // the first chunk goes through
	select {
	case off := <-stopped:
		require.Equal(t, int64(4), off, "the loop stopped after the chunk it was sending")
	case <-time.After(10 * time.Second):
		close(coord.gate) // let the loop finish so the test ends
		t.Fatal("Stop waited for the loop to send the whole backlog")
	}
}

// TestStopCutsShortASendThatHangs: a send the background loop has in
// flight when Stop comes gets StopWait (on the shipper's clock) to finish;
// one that hangs (the API client retries a coordinator that does not
// answer for minutes) is then cut short and its chunk left to Stop's own
// sends, within Stop's deadline, so it cannot hold the run's end.
func TestStopCutsShortASendThatHangs(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	coord := &gatedCoord{fakeCoord: &fakeCoord{}, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	path := filepath.Join(t.TempDir(), "engine.log")
	require.NoError(t, os.WriteFile(path, []byte("0123"), 0o600))
	s := New(Config{Path: path, Product: "p1", JobID: "j1", Epoch: 3, Send: coord, Timers: clk, MaxBehind: 4})
	made := clk.TickerMade()
	s.Start(t.Context())
	<-made
	clk.Advance(DefaultPoll) // the loop's step sends the chunk
	<-coord.entered          // which hangs

	stopped := make(chan int64, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // Stop's own sends get no time: only the loop's matter here
	go func() { stopped <- s.Stop(ctx) }()
	select {
	case <-made: // Stop waits for the loop, for StopWait at most
	case <-time.After(10 * time.Second):
		close(coord.gate) // let the loop finish so the test ends
		t.Fatal("Stop waits for a hung send without a bound")
	}
	clk.Advance(StopWait)
	select {
	case off := <-stopped:
		require.Zero(t, off, "the hung send stored nothing")
	case <-time.After(10 * time.Second):
		close(coord.gate)
		t.Fatal("Stop waited for a hung send")
	}
}
