package sqlite

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// reaperIndexes are the jobs indexes that only a job holding a lease or a
// stop request needs an entry in.
var reaperIndexes = []string{"fleet_jobs_stage_leaseExpiresAt", "fleet_jobs_stage_stopRequestedAt"}

// partialIndexes are every jobs index that holds only the jobs that have
// its field: the reaper's, and the forge sweep's (boolIndexes).
var partialIndexes = append(slices.Clone(reaperIndexes), "fleet_jobs_forgeDue")

// stageJob is job i (of prefix) in stage, and its partition key; lease,
// when not empty, is its leaseExpiresAt.
func stageJob(prefix string, i int, stage, lease string) (pk, id string, body []byte) {
	pk, id = fmt.Sprintf("p%d", i%7), fmt.Sprintf("%s-%05d", prefix, i)
	b := fmt.Appendf(nil, `{"id":%q,"productId":%q,"stage":%q,"priority":1,"targetFactoryId":""`, id, pk, stage)
	if lease != "" {
		b = fmt.Appendf(b, `,"leaseExpiresAt":%q`, lease)
	}
	return pk, id, append(b, '}')
}

// walFrames runs n writes on s from an empty WAL, with no checkpoint
// between them, and returns the WAL frames (pages) they wrote per write.
// SQLite appends every page a commit changes to the WAL, so the count is
// the pages a write dirtied, deterministic for a given file and writes.
func walFrames(t testing.TB, s *Store, n int, write func(i int)) float64 {
	t.Helper()
	ctx := t.Context()
	s.stopCheckpoints()
	var busy, log, done int
	require.NoError(t, s.ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &log, &done))
	require.Zero(t, busy, "the WAL was emptied")
	var free int
	require.NoError(t, s.w.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free))
	require.Zero(t, free, "no free pages: taking one would write the freelist too")
	for i := range n {
		write(i)
	}
	frames, _, err := s.checkpoint(ctx)
	require.NoError(t, err)
	return float64(frames) / float64(n)
}

// TestStageChangeWithoutLeaseSkipsPartialIndexes: a write that changes the
// stage of a job holding neither a lease nor a stop request, and with no
// pull request sync due, writes no page of the partial indexes: it writes
// as many WAL frames as it does with those indexes dropped. A full index
// has an entry (stage, NULL) for every job, which such a write moves.
func TestStageChangeWithoutLeaseSkipsPartialIndexes(t *testing.T) {
	const jobs, writes = 3000, 200
	ctx := t.Context()
	setup := func(drop bool) *Store {
		s, _ := openTemp(t)
		if drop {
			// Before any job: their empty root pages are reused at once,
			// so neither file has free pages when the writes are counted.
			for _, ix := range partialIndexes {
				_, err := s.w.ExecContext(ctx, "DROP INDEX "+quoteIdent(ix))
				require.NoError(t, err)
			}
		}
		for i := range jobs {
			pk, id, body := stageJob("job", i, "queued", "")
			_, err := s.Create(ctx, store.Jobs, pk, id, body)
			require.NoError(t, err)
		}
		return s
	}
	// Every 15th job goes from queued to blocked: the stage changes, and
	// no lease is held; then new queued jobs are created.
	measure := func(s *Store) (create, change float64) {
		change = walFrames(t, s, writes, func(i int) {
			pk, id, body := stageJob("job", i*15, "blocked", "")
			it, err := s.Read(ctx, store.Jobs, pk, id)
			require.NoError(t, err)
			_, err = s.Replace(ctx, store.Jobs, pk, id, body, it.Rev)
			require.NoError(t, err)
		})
		create = walFrames(t, s, writes, func(i int) {
			pk, id, body := stageJob("new", i, "queued", "")
			_, err := s.Create(ctx, store.Jobs, pk, id, body)
			require.NoError(t, err)
		})
		return create, change
	}
	withCreate, with := measure(setup(false))
	withoutCreate, without := measure(setup(true))
	t.Logf("WAL frames per write, with the partial indexes / without them: stage change %.2f / %.2f, create %.2f / %.2f",
		with, without, withCreate, withoutCreate)
	require.Equal(t, without, with, "a stage change of a job without a lease writes no partial index page")
	require.Equal(t, withoutCreate, withCreate, "a create of a job without a lease writes no partial index page")
}

// v1ReaperIndexes is how schema version 1 created the reaper's indexes:
// full, one entry per job.
var v1ReaperIndexes = []string{
	`CREATE INDEX IF NOT EXISTS "fleet_jobs_stage_leaseExpiresAt" ON "fleet_jobs" (json_extract(body, '$.stage'), json_extract(body, '$.leaseExpiresAt'))`,
	`CREATE INDEX IF NOT EXISTS "fleet_jobs_stage_stopRequestedAt" ON "fleet_jobs" (json_extract(body, '$.stage'), json_extract(body, '$.stopRequestedAt'))`,
}

// indexSQL returns the CREATE statements of the reaper's indexes as the
// file holds them, and its user_version.
func indexSQL(t *testing.T, s *Store) (sqls []string, version int) {
	t.Helper()
	ctx := t.Context()
	for _, ix := range reaperIndexes {
		var text string
		require.NoError(t, s.w.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?`, ix).Scan(&text), ix)
		sqls = append(sqls, text)
	}
	require.NoError(t, s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version))
	return sqls, version
}

// TestMigrateFullReaperIndexes: a file of schema version 1 has the
// reaper's indexes full; opening it replaces them with the partial ones
// and moves it to version 2, with every document as it was, even when
// several handles (processes) open it at once.
func TestMigrateFullReaperIndexes(t *testing.T) {
	ctx := t.Context()
	s, path := openTemp(t)
	stages := []string{"queued", "assigned", "building", "blocked"}
	want := map[string]string{}      // pk/id -> body
	overdue := map[string][]string{} // field -> pk/id past it
	for i := range 40 {
		stage, lease := stages[i%len(stages)], ""
		if stage == "assigned" || stage == "building" {
			lease = "2026-01-01T00:00:00Z"
			if i%3 == 0 {
				lease = "2999-01-01T00:00:00Z"
			}
		}
		pk, id, body := stageJob("job", i, stage, lease)
		if i == 9 { // a stop request past its grace, on a live lease
			body = append(body[:len(body)-1], `,"stopRequestedAt":"2026-01-01T00:00:00Z"}`...)
			overdue["stopRequestedAt"] = append(overdue["stopRequestedAt"], pk+"/"+id)
		}
		_, err := s.Create(ctx, store.Jobs, pk, id, body)
		require.NoError(t, err)
		want[pk+"/"+id] = string(body)
		if lease != "" && lease < "2999" {
			overdue["leaseExpiresAt"] = append(overdue["leaseExpiresAt"], pk+"/"+id)
		}
	}
	// Make it a version 1 file.
	for _, ix := range reaperIndexes {
		_, err := s.w.ExecContext(ctx, "DROP INDEX "+quoteIdent(ix))
		require.NoError(t, err)
	}
	for _, q := range append(v1ReaperIndexes, "PRAGMA user_version = 1") {
		_, err := s.w.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	sqls, version := indexSQL(t, s)
	require.Equal(t, 1, version)
	for _, text := range sqls {
		require.NotContains(t, text, "WHERE", "a version 1 file")
	}
	require.NoError(t, s.Close())

	// Several handles open it at once; each sees it migrated.
	const handles = 4
	opened := make([]*Store, handles)
	errc := make(chan error, handles)
	for i := range opened {
		go func() {
			var err error
			opened[i], err = Open(ctx, path)
			errc <- err
		}()
	}
	for range handles {
		require.NoError(t, <-errc)
	}
	for _, s := range opened {
		t.Cleanup(func() { require.NoError(t, s.Close()) })
	}
	s = opened[0]
	sqls, version = indexSQL(t, s)
	for i, f := range reaperFields {
		require.Contains(t, sqls[i], ` WHERE json_extract(body, '$.`+f+`') IS NOT NULL`)
		require.Equal(t, "CREATE INDEX "+strings.TrimPrefix(reaperIndexDDL(store.Jobs, f), "CREATE INDEX IF NOT EXISTS "), sqls[i])
	}
	require.Equal(t, 2, version)
	require.Equal(t, schemaVersion, version)
	var integrity string
	require.NoError(t, s.w.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&integrity))
	require.Equal(t, "ok", integrity)

	// The documents are intact, and the reaper's queries find the same.
	got := map[string]string{}
	page, err := s.Query(ctx, store.Jobs, store.Query{Limit: 1000})
	require.NoError(t, err)
	for _, it := range page.Items {
		got[it.PartitionKey+"/"+it.ID] = string(it.Body)
	}
	require.Equal(t, want, got)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range reaperFields {
		page, err := s.Query(ctx, store.Jobs, store.Query{Limit: 1000, Where: []store.Cond{store.In("stage", "assigned", "building"), store.Before(f, now)}})
		require.NoError(t, err)
		var past []string
		for _, it := range page.Items {
			past = append(past, it.PartitionKey+"/"+it.ID)
		}
		require.NotEmpty(t, overdue[f])
		require.ElementsMatch(t, overdue[f], past, f)
	}

	// Opening it again changes nothing.
	s2, err := Open(ctx, path)
	require.NoError(t, err)
	again, version := indexSQL(t, s2)
	require.NoError(t, s2.Close())
	require.Equal(t, sqls, again)
	require.Equal(t, 2, version)
}
