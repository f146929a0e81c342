package sqlite

import (
	"fmt"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// reaperIndexes are the jobs indexes that only a job holding a lease or a
// stop request needs an entry in.
var reaperIndexes = []string{"fleet_jobs_stage_leaseExpiresAt", "fleet_jobs_stage_stopRequestedAt"}

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
func walFrames(t *testing.T, s *Store, n int, write func(i int)) float64 {
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

// TestStageChangeWithoutLeaseSkipsReaperIndexes: a write that changes the
// stage of a job holding neither a lease nor a stop request writes no page
// of the reaper's indexes: it writes as many WAL frames as it does with
// those indexes dropped. A full index has an entry (stage, NULL) for every
// job, which such a write moves.
func TestStageChangeWithoutLeaseSkipsReaperIndexes(t *testing.T) {
	const jobs, writes = 3000, 200
	ctx := t.Context()
	setup := func(drop bool) *Store {
		s, _ := openTemp(t)
		if drop {
			// Before any job: their empty root pages are reused at once,
			// so neither file has free pages when the writes are counted.
			for _, ix := range reaperIndexes {
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
	t.Logf("WAL frames per write, with the reaper indexes / without them: stage change %.2f / %.2f, create %.2f / %.2f",
		with, without, withCreate, withoutCreate)
	require.Equal(t, without, with, "a stage change of a job without a lease writes no reaper index page")
	require.Equal(t, withoutCreate, withCreate, "a create of a job without a lease writes no reaper index page")
}
