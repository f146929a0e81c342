package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/store/storetest"
)

func openTemp(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet.db")
	s, err := Open(t.Context(), path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, path
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := openTemp(t)
		return s
	})
}

func jobBody(id string, n int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"productId":"p1","stage":"queued","n":%d}`, id, n)
}

// TestRevIsIncreasingInteger: revisions are decimal integers that grow with
// every write, across documents and containers, and survive a reopen: a
// deleted document's revision is never issued again.
func TestRevIsIncreasingInteger(t *testing.T) {
	ctx := t.Context()
	s, path := openTemp(t)
	var last int64
	check := func(rev string) {
		t.Helper()
		v, err := strconv.ParseInt(rev, 10, 64)
		require.NoError(t, err)
		require.Equal(t, strconv.FormatInt(v, 10), rev)
		require.Greater(t, v, last)
		last = v
	}
	r, err := s.Create(ctx, store.Jobs, "p1", "a", jobBody("a", 0))
	require.NoError(t, err)
	check(r)
	r, err = s.Replace(ctx, store.Jobs, "p1", "a", jobBody("a", 1), r)
	require.NoError(t, err)
	check(r)
	r, err = s.Upsert(ctx, store.Runs, "j1", "r1", []byte(`{"id":"r1","jobId":"j1"}`))
	require.NoError(t, err)
	check(r)
	_, err = s.Increment(ctx, store.Jobs, "p1", "a", "n", 1)
	require.NoError(t, err)
	check(mustRev(t, s, store.Jobs, "p1", "a"))

	// Delete the newest document, reopen: the counter does not go back.
	require.NoError(t, s.Delete(ctx, store.Jobs, "p1", "a", ""))
	require.NoError(t, s.Close())
	s2, err := Open(ctx, path)
	require.NoError(t, err)
	defer s2.Close()
	r, err = s2.Create(ctx, store.Jobs, "p1", "a", jobBody("a", 9))
	require.NoError(t, err)
	check(r)
}

func mustRev(t *testing.T, s *Store, c, pk, id string) string {
	t.Helper()
	it, err := s.Read(t.Context(), c, pk, id)
	require.NoError(t, err)
	return it.Rev
}

// TestBodyBytesKept: SQLite stores the body as given, so reads return it
// byte for byte (whitespace and key order included).
func TestBodyBytesKept(t *testing.T) {
	s, _ := openTemp(t)
	body := []byte("{ \"z\": 1,\n  \"id\": \"a\", \"productId\": \"p1\", \"a\": [1.50, 2e3] }")
	rev, err := s.Create(t.Context(), store.Jobs, "p1", "a", body)
	require.NoError(t, err)
	it, err := s.Read(t.Context(), store.Jobs, "p1", "a")
	require.NoError(t, err)
	require.Equal(t, string(body), string(it.Body))
	_, err = s.Replace(t.Context(), store.Jobs, "p1", "a", jobBody("a", 1), "1"+rev)
	require.ErrorIs(t, err, store.ErrPrecondition)
	it, err = s.Read(t.Context(), store.Jobs, "p1", "a")
	require.NoError(t, err)
	require.Equal(t, string(body), string(it.Body))
}

// TestStageQueriesUseIndexes: the planner serves stage filters on jobs, and
// the sweeps' boolean filters (boolIndexes), from the expression indexes.
// It fails if the query text stops matching the indexed expression exactly.
func TestStageQueriesUseIndexes(t *testing.T) {
	s, _ := openTemp(t)
	for _, tc := range []struct {
		q     store.Query
		index string
	}{
		{store.Query{Where: []store.Cond{store.Eq("stage", "queued")}}, "fleet_jobs_stage"},
		{store.Query{Where: []store.Cond{store.In("stage", "queued", "leased")}}, "fleet_jobs_stage"},
		{store.Query{PartitionKey: "p1", Where: []store.Cond{store.Eq("stage", "queued")}}, "fleet_jobs_pk_stage"},
		// The reaper's past-deadline pages read only the rows past it, in
		// the partial indexes of the jobs that have the field (its < ?
		// implies IS NOT NULL), on a later page too.
		{store.Query{Limit: 256, Where: []store.Cond{store.In("stage", "assigned", "building"), store.Before("leaseExpiresAt", time.Now())}}, "fleet_jobs_stage_leaseExpiresAt (<expr>=? AND <expr><?)"},
		{store.Query{Limit: 256, Where: []store.Cond{store.In("stage", "assigned", "building"), store.Before("stopRequestedAt", time.Now())}}, "fleet_jobs_stage_stopRequestedAt (<expr>=? AND <expr><?)"},
		{store.Query{Limit: 256, Continuation: crossCont + "5", Where: []store.Cond{store.In("stage", "assigned", "building"), store.Before("leaseExpiresAt", time.Now())}}, "fleet_jobs_stage_leaseExpiresAt (<expr>=? AND <expr><?)"},
		{store.Query{Limit: 256, Continuation: crossCont + "5", Where: []store.Cond{store.In("stage", "assigned", "building"), store.Before("stopRequestedAt", time.Now())}}, "fleet_jobs_stage_stopRequestedAt (<expr>=? AND <expr><?)"},
		// A later page of the queue resumes in the stage index at its rowid.
		{store.Query{Limit: 256, Continuation: crossCont + "5", Where: []store.Cond{store.Eq("stage", "queued")}}, "fleet_jobs_stage (<expr>=? AND rowid>?)"},
		// The forge sweep's due jobs, in the partial index of the jobs that
		// have the field, and the echo sweep's open states.
		{store.Query{Where: []store.Cond{store.Eq("forgeDue", true)}}, "fleet_jobs_forgeDue (<expr>=?)"},
		{store.Query{Continuation: crossCont + "5", Where: []store.Cond{store.Eq("forgeDue", true)}}, "fleet_jobs_forgeDue (<expr>=? AND rowid>?)"},
	} {
		requireIndex(t, s, store.Jobs, tc.q, tc.index)
	}
	requireIndex(t, s, store.Echoes, store.Query{Where: []store.Cond{store.Eq("open", true)}}, "fleet_echo_open (<expr>=?)")
	requireIndex(t, s, store.Echoes, store.Query{Continuation: crossCont + "5", Where: []store.Cond{store.Eq("open", true)}}, "fleet_echo_open (<expr>=? AND rowid>?)")
}

// requireIndex fails unless SQLite's plan for q on container reads index.
func requireIndex(t *testing.T, s *Store, container string, q store.Query, index string) {
	t.Helper()
	text, args, _, err := buildQuery(s.tables[container], q)
	require.NoError(t, err)
	rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+text, args...)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Contains(t, strings.Join(plan, "\n"), "INDEX "+index, "query %q", text)
}

// TestWALStaysBounded: writes that never pause keep the WAL file near the
// automatic checkpoint size (walSafetyPages). SQLite checkpoints only after a statement
// steps to its end, so a RETURNING write that is merely reset would let the
// WAL grow without bound (and every read slow down with it).
func TestWALStaysBounded(t *testing.T) {
	ctx := t.Context()
	s, path := openTemp(t)
	rev, err := s.Create(ctx, store.Jobs, "p1", "a", jobBody("a", 0))
	require.NoError(t, err)
	for i := range 3000 { // about 9000 WAL frames unchecked
		_, err = s.Replace(ctx, store.Jobs, "p1", "a", jobBody("a", i), rev)
		require.NoError(t, err)
		_, err = s.Increment(ctx, store.Jobs, "p1", "a", "n", 1)
		require.NoError(t, err)
		rev = mustRev(t, s, store.Jobs, "p1", "a")
	}
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(2*walSafetyPages*4096), "WAL is not being checkpointed")
}

func TestOpenRejects(t *testing.T) {
	ctx := t.Context()
	for _, p := range []string{"", ":memory:", "file:x.db?mode=memory"} {
		_, err := Open(ctx, p)
		require.Error(t, err, "path %q", p)
	}
	_, err := Open(ctx, filepath.Join(t.TempDir(), "missing-dir", "x.db"))
	require.Error(t, err)

	// A file written by a newer schema is refused, not misread.
	s, path := openTemp(t)
	_, err = s.w.ExecContext(ctx, "PRAGMA user_version = 99")
	require.NoError(t, err)
	_, err = Open(ctx, path)
	require.ErrorContains(t, err, "newer")
}

func TestClosed(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "x.db"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = s.Read(t.Context(), store.Jobs, "p1", "a")
	require.ErrorIs(t, err, store.ErrUnavailable)
	_, err = s.Query(t.Context(), store.Jobs, store.Query{})
	require.ErrorIs(t, err, store.ErrUnavailable)
}

func TestContinuationKinds(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	for i := range 3 {
		id := fmt.Sprintf("j%d", i)
		_, err := s.Create(ctx, store.Jobs, "p1", id, jobBody(id, i))
		require.NoError(t, err)
	}
	single, err := s.Query(ctx, store.Jobs, store.Query{PartitionKey: "p1", Limit: 1})
	require.NoError(t, err)
	cross, err := s.Query(ctx, store.Jobs, store.Query{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, single.Continuation)
	require.NotEmpty(t, cross.Continuation)
	_, err = s.Query(ctx, store.Jobs, store.Query{Limit: 1, Continuation: single.Continuation})
	require.Error(t, err, "a single-partition continuation used cross-partition")
	_, err = s.Query(ctx, store.Jobs, store.Query{PartitionKey: "p1", Limit: 1, Continuation: cross.Continuation})
	require.Error(t, err, "a cross-partition continuation used in one partition")
	_, err = s.ReadChanges(ctx, store.Jobs, "garbage", 10)
	require.Error(t, err)
}

// TestTwoHandles: two Stores on one file, as two processes would have, see
// each other's writes, changes and CAS outcomes.
func TestTwoHandles(t *testing.T) {
	ctx := t.Context()
	a, path := openTemp(t)
	b, err := Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })

	rev, err := a.Create(ctx, store.Jobs, "p1", "j", jobBody("j", 0))
	require.NoError(t, err)
	it, err := b.Read(ctx, store.Jobs, "p1", "j")
	require.NoError(t, err)
	require.Equal(t, rev, it.Rev)
	_, err = b.Create(ctx, store.Jobs, "p1", "j", jobBody("j", 0))
	require.ErrorIs(t, err, store.ErrExists)

	revB, err := b.Replace(ctx, store.Jobs, "p1", "j", jobBody("j", 1), rev)
	require.NoError(t, err)
	_, err = a.Replace(ctx, store.Jobs, "p1", "j", jobBody("j", 2), rev)
	require.ErrorIs(t, err, store.ErrPrecondition, "a's stale revision must lose to b's write")
	page, err := a.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, revB, page.Items[0].Rev)

	// Concurrent CAS increments through both handles: none lost.
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errc := make(chan error, 2*workers)
	for w := range 2 * workers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() { errc <- casIncrement(context.Background(), s, "j", each, nil) })
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	it, err = a.Read(ctx, store.Jobs, "p1", "j")
	require.NoError(t, err)
	require.Equal(t, float64(1+2*workers*each), decodeN(t, it.Body))
}

// casIncrement adds 1 to doc's n times times with read → Replace(ifRev),
// retrying lost races; each win is reported to onWin as "old new".
func casIncrement(ctx context.Context, s *Store, id string, times int, onWin func(old, new string)) error {
	for range times {
		for {
			it, err := s.Read(ctx, store.Jobs, "p1", id)
			if err != nil {
				return err
			}
			var b struct{ N int }
			if err := json.Unmarshal(it.Body, &b); err != nil {
				return err
			}
			rev, err := s.Replace(ctx, store.Jobs, "p1", id, jobBody(id, b.N+1), it.Rev)
			if errors.Is(err, store.ErrPrecondition) {
				continue
			}
			if err != nil {
				return err
			}
			if onWin != nil {
				onWin(it.Rev, rev)
			}
			break
		}
	}
	return nil
}

func decodeN(t *testing.T, body []byte) float64 {
	t.Helper()
	var b struct{ N float64 }
	require.NoError(t, json.Unmarshal(body, &b))
	return b.N
}

// Environment of a child process started by TestProcessesCAS.
const (
	childDBEnv    = "FLEET_SQLITE_CHILD_DB"
	childTimesEnv = "FLEET_SQLITE_CHILD_TIMES"
	// childGoroutines is how many goroutines race inside each child.
	childGoroutines = 4
)

// TestProcessesCAS runs the CAS race across real processes: this test
// binary re-executed several times, each process with several goroutines,
// all on one file. No update is lost and no revision has two winners.
func TestProcessesCAS(t *testing.T) {
	if os.Getenv(childDBEnv) != "" {
		t.Skip("running as a child")
	}
	const procs = 4
	times := 25
	if testing.Short() {
		times = 8
	}
	ctx := t.Context()
	s, path := openTemp(t)
	first, err := s.Create(ctx, store.Jobs, "p1", "shared", jobBody("shared", 0))
	require.NoError(t, err)

	exe, err := os.Executable()
	require.NoError(t, err)
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range procs {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestProcessChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childDBEnv+"="+path, fmt.Sprintf("%s=%d", childTimesEnv, times))
		out := &strings.Builder{}
		cmd.Stdout = out
		cmd.Stderr = out
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
		outs = append(outs, out)
	}
	// This process races too.
	var mu sync.Mutex
	var local []string
	require.NoError(t, casIncrement(ctx, s, "shared", times, func(o, n string) {
		mu.Lock()
		local = append(local, o+" "+n)
		mu.Unlock()
	}))
	wins := local
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d:\n%s", i, outs[i])
		sc := bufio.NewScanner(strings.NewReader(outs[i].String()))
		for sc.Scan() {
			if w, ok := strings.CutPrefix(sc.Text(), "WIN "); ok {
				wins = append(wins, w)
			}
		}
	}

	total := procs*childGoroutines*times + times
	it, err := s.Read(ctx, store.Jobs, "p1", "shared")
	require.NoError(t, err)
	require.Equal(t, float64(total), decodeN(t, it.Body), "lost updates across processes")
	require.Len(t, wins, total)
	next := map[string]string{}
	for _, w := range wins {
		old, rev, _ := strings.Cut(w, " ")
		_, dup := next[old]
		require.False(t, dup, "revision %s has two winners", old)
		next[old] = rev
	}
	rev := first
	for range total {
		rev = next[rev]
	}
	require.Equal(t, it.Rev, rev, "winners do not form one chain")
}

// TestProcessChild is the body of a child process of TestProcessesCAS.
func TestProcessChild(t *testing.T) {
	path := os.Getenv(childDBEnv)
	if path == "" {
		t.Skip("only runs as a child of TestProcessesCAS")
	}
	times, err := strconv.Atoi(os.Getenv(childTimesEnv))
	require.NoError(t, err)
	s, err := Open(t.Context(), path)
	require.NoError(t, err)
	defer s.Close()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	errc := make(chan error, childGoroutines)
	for range childGoroutines {
		wg.Go(func() {
			errc <- casIncrement(context.Background(), s, "shared", times, func(o, n string) {
				mu.Lock()
				fmt.Printf("WIN %s %s\n", o, n)
				mu.Unlock()
			})
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
}

// TestChangeMarker: a write moves its container's marker and no other's, so
// a watcher of fleet_jobs is not woken by heartbeats.
func TestChangeMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	defer s.Close()
	mtime := func(c string) time.Time {
		fi, err := os.Stat(s.ChangeMarker(c))
		require.NoError(t, err)
		return fi.ModTime()
	}
	old := time.Unix(1, 0)
	for _, c := range []string{store.Jobs, store.Factories} {
		require.NoError(t, os.Chtimes(s.ChangeMarker(c), old, old))
	}
	_, err = s.Create(ctx, store.Factories, "f1", "f1", []byte(`{"id":"f1"}`))
	require.NoError(t, err)
	require.True(t, mtime(store.Factories).After(old), "the written container's marker moved")
	require.Equal(t, old, mtime(store.Jobs), "other markers stay")

	_, err = s.Create(ctx, store.Jobs, "p", "j1", []byte(`{"id":"j1","productId":"p"}`))
	require.NoError(t, err)
	require.True(t, mtime(store.Jobs).After(old))
}

// TestCommitsLeaveCheckpointsToTheBackground: no commit copies the WAL into
// the database file at SQLite's default threshold of 1,000 pages (a stall
// for the write that crosses it); the background checkpoint does. With the
// checkpoints stopped, the WAL grows past 1,000 pages, and one checkpoint
// then copies all of it. With SQLite's default, the WAL restarts after the
// threshold: '"924" is not greater than "1000"'.
func TestCommitsLeaveCheckpointsToTheBackground(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	s.stopCheckpoints()

	// About 11 WAL frames a document (its pages and its indexes'): some
	// 2,800 in all, past SQLite's 1,000 and short of walSafetyPages.
	pad := strings.Repeat("x", 6000)
	for i := range 250 {
		id := fmt.Sprintf("j%04d", i)
		_, err := s.Create(ctx, store.Jobs, "p1", id, []byte(fmt.Sprintf(`{"id":%q,"productId":"p1","pad":%q}`, id, pad)))
		require.NoError(t, err)
	}
	frames, done, err := s.checkpoint(ctx)
	require.NoError(t, err)
	require.Greater(t, frames, 1000, "no commit checkpointed the WAL")
	require.Equal(t, frames, done, "a passive checkpoint with no reader copies it all")
}
