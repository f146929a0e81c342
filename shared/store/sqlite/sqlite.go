// Package sqlite is the one-machine store.Store: one SQLite file in WAL mode
// (modernc.org/sqlite, pure Go), shaped after Cosmos DB so the use cases run
// unchanged on either backend.
//
// Layout. One table per container of store.Containers rather than one table
// keyed by container: each container gets its own B-trees, so the jobs
// table's expression indexes cost nothing on event writes, a container's
// change feed scans only its own rows, and the file reads like the Cosmos
// account it stands in for.
//
// Revisions and the change feed. A single-row counter (store_seq) is bumped
// by every write, and the written row takes the new value as its rev. The rev
// is therefore globally unique and never reused (a deleted and re-created
// document cannot match a stale rev, so there is no ABA), and because SQLite
// admits one writer at a time and the counter is read and bumped inside the
// writing statement, rev order is commit order. The change feed of a
// container is its rows with rev greater than the checkpoint, in rev order:
// each document appears once at its latest version, and deleted documents do
// not appear (Cosmos latest-version mode).
//
// Concurrency. Every write is one autocommit statement (the counter bump is a
// trigger), so it is atomic without an explicit transaction. In-process
// writers share one connection, which queues them in Go instead of in
// SQLite's sleeping busy handler; other processes sharing the file are
// serialised by SQLite's WAL write lock and the busy timeout, and an
// SQLITE_BUSY that outlasts both is retried here before it is reported as
// store.ErrThrottled. Reads use a separate pool of read-only connections and
// run in parallel with the writer (WAL snapshots).
package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/go-json-experiment/json/jsontext"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Limits, chosen to match Cosmos DB so that what works here works there.
const (
	// MaxBodyBytes is the largest document accepted (Cosmos: 2 MB); a larger
	// one is store.ErrTooLarge.
	MaxBodyBytes = fleet.MaxDocumentBytes
	// MaxIDLength is the longest id accepted, in bytes (Cosmos: 255).
	MaxIDLength = 255
	// MaxPartitionKeyBytes is the longest partition key value accepted.
	MaxPartitionKeyBytes = 2048
	// DefaultPageSize is the page size of a query or feed read that asks for none.
	DefaultPageSize = 100
	// MaxPageSize caps a page, so one call cannot pull a container into memory.
	MaxPageSize = 1000
)

const (
	// busyTimeoutMS is how long SQLite itself waits for another process's
	// write lock before it reports SQLITE_BUSY.
	busyTimeoutMS = 5000
	// busyRetries is how many more times an operation that still got
	// SQLITE_BUSY is tried before it fails with store.ErrThrottled.
	busyRetries = 3
	// schemaVersion is stored in PRAGMA user_version; a file written by a
	// newer schema is refused rather than misread. 2: the reaper's indexes
	// on jobs are partial (migrate rebuilds a version 1 file's).
	schemaVersion = 2
	// seqTable holds the write counter that revisions and the feed come from.
	seqTable = "store_seq"
	// maxCachedQueries bounds the prepared-statement cache of query shapes.
	maxCachedQueries = 256
)

// indexedFields lists, per container, the top-level fields that get
// expression indexes: the coordinator filters jobs by stage constantly
// (dispatch sweep, reaper, claim), both across partitions and within one.
var indexedFields = map[string][]string{
	store.Jobs: {"stage"},
}

// boolIndex is a boolean field that a sweep filters on across partitions,
// indexed on json_type (the expression a boolean condition compares). Sparse
// ones are omitted from a document while false (omitempty), so the index is
// partial and holds only the documents where the field is set: writes of
// every other document never touch it.
type boolIndex struct {
	field  string
	sparse bool
}

// boolIndexes: without them each sweep tick that looks reads every document
// of the container (a table scan that evaluates the field in each body), and
// the containers keep every job and every tracked job. At 3,900 jobs the
// forge sweep's query took 52 and 83 ms of the handler's one CPU.
var boolIndexes = map[string][]boolIndex{
	store.Jobs:   {{field: "forgeDue", sparse: true}}, // the forge sweep
	store.Echoes: {{field: "open"}},                   // the echo sweep
}

var _ store.Store = (*Store)(nil)

// Store is a store.Store on a SQLite file. It is safe for concurrent use by
// many goroutines, and several processes may open the same file.
type Store struct {
	path   string
	w      *sql.DB // exactly one connection: in-process writes queue here
	r      *sql.DB // read-only connections
	tables map[string]*table
	closed atomic.Bool
	// ck checkpoints the WAL in the background (checkpointLoop), so no
	// commit pays for it; stopCk ends the loop, ckDone says it ended.
	ck     *sql.DB
	stopCk chan struct{}
	ckDone chan struct{}
	ckOnce sync.Once

	qmu    sync.Mutex
	qstmts map[string]*sql.Stmt // query shapes prepared on r, keyed by SQL text
}

// table is one container's table and its prepared statements.
type table struct {
	name    string
	pkField string // top-level body field holding the partition key

	read, revOf, feed, guarded                        *sql.Stmt // on r
	create, replace, upsert, del, delIf, incr, incrIf *sql.Stmt // on w
}

// Open opens (creating if needed) the store at path, a file system path.
// The parent directory must exist.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		// A WAL database shared by two connection pools needs a real file.
		return nil, fmt.Errorf("sqlite: open %q: need a file system path", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{path: abs, tables: make(map[string]*table), qstmts: make(map[string]*sql.Stmt)}
	if err := s.open(ctx); err != nil {
		_ = s.closeAll()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, classify(ctx, err))
	}
	return s, nil
}

func dsn(path string, params url.Values) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: params.Encode()}
	if !strings.HasPrefix(u.Path, "/") {
		u.Path = "/" + u.Path // Windows drive paths: file:///C:/...
	}
	return u.String()
}

func (s *Store) open(ctx context.Context) error {
	busy := strconv.Itoa(busyTimeoutMS)
	var err error
	s.w, err = sql.Open("sqlite", dsn(s.path, url.Values{
		"_busy_timeout": {busy},
		"_journal_mode": {"WAL"},
		// NORMAL in WAL mode: a commit survives a process crash; only a power
		// loss can drop the last commits, never corrupt the file.
		"_synchronous": {"NORMAL"},
		"_txlock":      {"immediate"},
		// Checkpoints stay off the commit path: one copies the WAL into
		// the database file and syncs it, a stall of milliseconds for the
		// write that crosses the threshold (and every write queued behind
		// it). checkpointLoop does it instead; a commit checkpoints only
		// when that falls behind (walSafetyPages), as under writes that
		// never pause, where a checkpoint running beside them never
		// catches up and the WAL would grow without bound.
		"_pragma": {fmt.Sprintf("wal_autocheckpoint(%d)", walSafetyPages)},
	}))
	if err != nil {
		return err
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)

	if err := s.retry(ctx, func() error { return s.migrate(ctx) }); err != nil {
		return err
	}

	s.r, err = sql.Open("sqlite", dsn(s.path, url.Values{
		"_busy_timeout": {busy},
		"_query_only":   {"true"},
	}))
	if err != nil {
		return err
	}
	n := max(4, runtime.GOMAXPROCS(0))
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	s.r.SetConnMaxIdleTime(5 * time.Minute)

	for _, c := range store.Containers {
		t, err := s.prepare(ctx, c)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", c.Name, err)
		}
		s.tables[c.Name] = t
	}
	if err := s.createMarkers(); err != nil {
		return fmt.Errorf("change markers: %w", err)
	}
	s.ck, err = sql.Open("sqlite", dsn(s.path, url.Values{"_busy_timeout": {"0"}}))
	if err != nil {
		return err
	}
	s.ck.SetMaxOpenConns(1)
	s.stopCk, s.ckDone = make(chan struct{}), make(chan struct{})
	go s.checkpointLoop()
	return nil
}

// checkpointEvery is how often the WAL is copied into the database file;
// walSafetyPages the WAL size at which a commit does it itself (SQLite's
// default is 1,000 pages).
const (
	checkpointEvery = 250 * time.Millisecond
	walSafetyPages  = 4000
)

// checkpointLoop checkpoints the WAL every checkpointEvery, PASSIVE: it
// copies what no reader still needs and never waits for a reader or a
// writer, so writes go on meanwhile (each process that opened the file runs
// one; a busy answer is another's checkpoint running).
func (s *Store) checkpointLoop() {
	defer close(s.ckDone)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stopCk:
			return
		case <-t.C:
			_, _, _ = s.checkpoint(context.Background())
		}
	}
}

// stopCheckpoints ends checkpointLoop and waits for it.
func (s *Store) stopCheckpoints() {
	s.ckOnce.Do(func() {
		if s.stopCk != nil {
			close(s.stopCk)
			<-s.ckDone
		}
	})
}

// checkpoint runs one passive checkpoint and returns the WAL's frames and
// how many of them are now in the database file.
func (s *Store) checkpoint(ctx context.Context) (frames, done int, err error) {
	var busy int
	err = s.ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done)
	return frames, done, err
}

// migrate creates the tables, indexes and triggers, idempotently, so
// several processes may open a new file at once, and brings an older
// file's schema up to schemaVersion in the same transaction: the first
// process to take the write lock migrates it, the others then find it
// done.
func (s *Store) migrate(ctx context.Context) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		// Some file systems (network mounts) cannot do WAL; without it readers
		// block the writer and the concurrency claims above do not hold.
		return fmt.Errorf("journal_mode is %q, want wal", mode)
	}
	tx, err := s.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if version > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this program's %d", version, schemaVersion)
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + seqTable + ` (one INTEGER PRIMARY KEY CHECK (one = 1), v INTEGER NOT NULL)`,
		`INSERT OR IGNORE INTO ` + seqTable + ` (one, v) VALUES (1, 0)`,
	}
	if version < 2 {
		// Version 1 made the reaper's indexes full, and CREATE INDEX IF
		// NOT EXISTS below would keep them: drop them, the DDL below
		// creates them partial (a new file has none to drop).
		for _, f := range reaperFields {
			stmts = append(stmts, `DROP INDEX IF EXISTS `+quoteIdent(reaperIndex(store.Jobs, f)))
		}
	}
	for _, c := range store.Containers {
		if c.Name == seqTable {
			return fmt.Errorf("container name %q is reserved", c.Name)
		}
		stmts = append(stmts, tableDDL(c.Name)...)
	}
	stmts = append(stmts, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return tx.Commit()
}

func tableDDL(name string) []string {
	q := quoteIdent(name)
	ddl := []string{
		// rid is an explicit INTEGER PRIMARY KEY so VACUUM keeps it stable:
		// cross-partition query continuations hold it. body is TEXT because
		// SQLite's JSON functions read a BLOB as JSONB.
		`CREATE TABLE IF NOT EXISTS ` + q + ` (
			rid  INTEGER PRIMARY KEY,
			pk   TEXT NOT NULL,
			id   TEXT NOT NULL,
			rev  INTEGER NOT NULL,
			body TEXT NOT NULL,
			UNIQUE (pk, id)
		)`,
		// The change feed reads in rev order; UNIQUE also turns a counter bug
		// into a loud constraint error instead of two documents sharing a rev.
		`CREATE UNIQUE INDEX IF NOT EXISTS ` + quoteIdent(name+"_rev") + ` ON ` + q + ` (rev)`,
		// Every write takes rev = store_seq + 1 in the statement itself; these
		// triggers advance the counter in the same statement, so the bump and
		// the write commit together (deletes do not advance it: they leave
		// nothing in the feed, and revs are never reused anyway).
		`CREATE TRIGGER IF NOT EXISTS ` + quoteIdent(name+"_seq_insert") + ` AFTER INSERT ON ` + q +
			` BEGIN UPDATE ` + seqTable + ` SET v = NEW.rev WHERE one = 1; END`,
		`CREATE TRIGGER IF NOT EXISTS ` + quoteIdent(name+"_seq_update") + ` AFTER UPDATE OF rev ON ` + q +
			` BEGIN UPDATE ` + seqTable + ` SET v = NEW.rev WHERE one = 1; END`,
	}
	for _, f := range indexedFields[name] {
		// Cross-partition filters: (field, rowid) serves WHERE field = ? AND
		// rid > ? ORDER BY rid without a sort. Single-partition filters:
		// (pk, field, id) serves WHERE pk = ? AND field = ? AND id > ? ORDER BY id.
		ddl = append(ddl,
			`CREATE INDEX IF NOT EXISTS `+quoteIdent(name+"_"+f)+` ON `+q+` (`+fieldExpr(f)+`)`,
			`CREATE INDEX IF NOT EXISTS `+quoteIdent(name+"_pk_"+f)+` ON `+q+` (pk, `+fieldExpr(f)+`, id)`,
		)
	}
	for _, b := range boolIndexes[name] {
		ddl = append(ddl, boolIndexDDL(name, b))
	}
	if name == store.Jobs {
		// A poll claim reads one product's queued jobs of one priority
		// oldest first, a page at a time (WHERE pk = ? AND stage = ? AND
		// priority = ? AND id > ? ORDER BY id LIMIT ?): this index serves
		// it without reading the rest of the queue.
		ddl = append(ddl, `CREATE INDEX IF NOT EXISTS `+quoteIdent(name+"_pk_stage_priority")+` ON `+q+
			` (pk, `+fieldExpr("stage")+`, `+fieldExpr("priority")+`, id)`)
		// The reaper reads the leases past a deadline, across partitions
		// (WHERE stage IN (...) AND leaseExpiresAt < ?, likewise
		// stopRequestedAt): these serve it reading only the rows past the
		// deadline, not every lease. They are partial, holding only the
		// jobs that have the field: a job has leaseExpiresAt only while
		// leased and stopRequestedAt only after a stop was asked for
		// (fleet.Job omits them when zero), and a full index would hold a
		// (stage, NULL) entry for every other job, which each write
		// changing its stage moves (about 2 pages per index per write). The
		// planner still takes them for the reaper's query, whose field < ?
		// implies field IS NOT NULL (the same fieldExpr text on both
		// sides; TestStageQueriesUseIndexes).
		for _, f := range reaperFields {
			ddl = append(ddl, reaperIndexDDL(name, f))
		}
	}
	return ddl
}

// boolIndexDDL creates b's index on container name. A sparse one is
// partial: the planner takes it for the condition's json_type(...) = ?,
// which implies IS NOT NULL (TestStageQueriesUseIndexes).
func boolIndexDDL(name string, b boolIndex) string {
	ddl := `CREATE INDEX IF NOT EXISTS ` + quoteIdent(name+"_"+b.field) + ` ON ` + quoteIdent(name) + ` (` + fieldType(b.field) + `)`
	if b.sparse {
		ddl += ` WHERE ` + fieldType(b.field) + ` IS NOT NULL`
	}
	return ddl
}

// reaperFields are the fields of the jobs' partial reaper indexes.
var reaperFields = []string{"leaseExpiresAt", "stopRequestedAt"}

// reaperIndex names the (stage, field) index of container name.
func reaperIndex(name, field string) string { return name + "_stage_" + field }

// reaperIndexDDL creates the partial (stage, field) index of container name.
func reaperIndexDDL(name, field string) string {
	return `CREATE INDEX IF NOT EXISTS ` + quoteIdent(reaperIndex(name, field)) + ` ON ` + quoteIdent(name) +
		` (` + fieldExpr("stage") + `, ` + fieldExpr(field) + `) WHERE ` + fieldExpr(field) + ` IS NOT NULL`
}

// seqNext is the rev a write takes: one past the counter, read inside the
// writing statement while it holds the write lock.
const seqNext = `(SELECT v + 1 FROM ` + seqTable + ` WHERE one = 1)`

func (s *Store) prepare(ctx context.Context, c store.Container) (*table, error) {
	t := &table{name: c.Name, pkField: strings.TrimPrefix(c.PartitionKey, "/")}
	if !validField(t.pkField) {
		return nil, fmt.Errorf("partition key path %q is not a top-level field", c.PartitionKey)
	}
	q := quoteIdent(c.Name)
	for _, p := range []struct {
		db   *sql.DB
		dst  **sql.Stmt
		text string
	}{
		{s.r, &t.read, `SELECT rev, body FROM ` + q + ` WHERE pk = ?1 AND id = ?2`},
		{s.r, &t.revOf, `SELECT rev FROM ` + q + ` WHERE pk = ?1 AND id = ?2`},
		{s.r, &t.feed, `SELECT pk, id, rev, body FROM ` + q + ` WHERE rev > ?1 ORDER BY rev LIMIT ?2`},
		// incrIf's condition alone, on a reader (?4, the delta, unused).
		{s.r, &t.guarded, `SELECT coalesce(` + guardHolds + `, 0) FROM ` + q + ` WHERE pk = ?1 AND id = ?2`},
		{s.w, &t.create, `INSERT INTO ` + q + ` (pk, id, rev, body) VALUES (?1, ?2, ` + seqNext + `, ?3)
			ON CONFLICT (pk, id) DO NOTHING RETURNING rev`},
		{s.w, &t.replace, `UPDATE ` + q + ` SET body = ?3, rev = ` + seqNext + `
			WHERE pk = ?1 AND id = ?2 AND rev = ?4 RETURNING rev`},
		{s.w, &t.upsert, `INSERT INTO ` + q + ` (pk, id, rev, body) VALUES (?1, ?2, ` + seqNext + `, ?3)
			ON CONFLICT (pk, id) DO UPDATE SET body = excluded.body, rev = excluded.rev RETURNING rev`},
		{s.w, &t.del, `DELETE FROM ` + q + ` WHERE pk = ?1 AND id = ?2`},
		{s.w, &t.delIf, `DELETE FROM ` + q + ` WHERE pk = ?1 AND id = ?2 AND rev = ?3`},
		// ?3 is the JSON path of the field. The WHERE clause refuses a field
		// that holds anything but an integer (SQLite would coerce "5" to 5)
		// and a sum that overflows int64 (SQLite would turn it into a REAL);
		// a missing field counts as 0, as Cosmos's patch increment creates it.
		{s.w, &t.incr, `UPDATE ` + q + `
			SET body = json_set(body, ?3, coalesce(json_extract(body, ?3), 0) + ?4), rev = ` + seqNext + `
			WHERE pk = ?1 AND id = ?2
			  AND coalesce(json_type(body, ?3), 'integer') = 'integer'
			  AND typeof(coalesce(json_extract(body, ?3), 0) + ?4) = 'integer'
			RETURNING json_extract(body, ?3)`},
		// incr on guardHolds, and on a sum that stays an integer.
		{s.w, &t.incrIf, `UPDATE ` + q + `
			SET body = json_set(body, ?3, json_extract(body, ?3) + ?4), rev = ` + seqNext + `
			WHERE pk = ?1 AND id = ?2 AND ` + guardHolds + `
			  AND typeof(json_extract(body, ?3) + ?4) = 'integer'
			RETURNING json_extract(body, ?3)`},
	} {
		st, err := p.db.PrepareContext(ctx, p.text)
		if err != nil {
			return nil, err
		}
		*p.dst = st
	}
	return t, nil
}

// Close releases the store's connections. Calls after Close fail with
// store.ErrUnavailable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.closeAll()
}

func (s *Store) closeAll() error {
	var errs []error
	s.stopCheckpoints()
	if s.ck != nil {
		errs = append(errs, s.ck.Close())
	}
	for _, t := range s.tables {
		for _, st := range []*sql.Stmt{t.read, t.revOf, t.feed, t.guarded, t.create, t.replace, t.upsert, t.del, t.delIf, t.incr, t.incrIf} {
			if st != nil {
				errs = append(errs, st.Close())
			}
		}
	}
	s.qmu.Lock()
	for _, st := range s.qstmts {
		errs = append(errs, st.Close())
	}
	s.qstmts = nil
	s.qmu.Unlock()
	for _, db := range []*sql.DB{s.r, s.w} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", s.path, err)
	}
	return nil
}

// Create writes a new document; store.ErrExists when the id is taken.
func (s *Store) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	t, err := s.writable(container, pk, id, body)
	if err != nil {
		return "", opErr("create", container, pk, id, err)
	}
	var rev int64
	err = s.retry(ctx, func() error { return writeRow(ctx, t.create, []any{pk, id, string(body)}, &rev) })
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrExists
	}
	if err != nil {
		return "", opErr("create", container, pk, id, classify(ctx, err))
	}
	s.changed(t)
	return formatRev(rev), nil
}

// Read returns one document; store.ErrNotFound when absent.
func (s *Store) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	t, err := s.addressed(container, pk, id)
	if err != nil {
		return store.Item{}, opErr("read", container, pk, id, err)
	}
	var (
		rev  int64
		body []byte
	)
	err = s.retry(ctx, func() error { return t.read.QueryRowContext(ctx, pk, id).Scan(&rev, &body) })
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Item{}, opErr("read", container, pk, id, classify(ctx, err))
	}
	return store.Item{ID: id, PartitionKey: pk, Rev: formatRev(rev), Body: body}, nil
}

// Replace overwrites an existing document if its revision is still ifRev;
// store.ErrPrecondition when it changed, store.ErrNotFound when it is gone.
// An empty ifRev is refused: a compare-and-swap that silently turns
// unconditional is how double claims happen (Upsert writes unconditionally).
func (s *Store) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	t, err := s.writable(container, pk, id, body)
	if err == nil && ifRev == "" {
		err = errors.New("empty ifRev: Replace is a compare-and-swap; use Upsert to write unconditionally")
	}
	if err != nil {
		return "", opErr("replace", container, pk, id, err)
	}
	var rev int64
	err = s.retry(ctx, func() error {
		return writeRow(ctx, t.replace, []any{pk, id, string(body), parseRev(ifRev)}, &rev)
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = s.whyNot(ctx, t, pk, id)
	}
	if err != nil {
		return "", opErr("replace", container, pk, id, classify(ctx, err))
	}
	s.changed(t)
	return formatRev(rev), nil
}

// Upsert writes a document whether or not it exists.
func (s *Store) Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	t, err := s.writable(container, pk, id, body)
	if err != nil {
		return "", opErr("upsert", container, pk, id, err)
	}
	var rev int64
	err = s.retry(ctx, func() error { return writeRow(ctx, t.upsert, []any{pk, id, string(body)}, &rev) })
	if err != nil {
		return "", opErr("upsert", container, pk, id, classify(ctx, err))
	}
	s.changed(t)
	return formatRev(rev), nil
}

// Delete removes a document; with ifRev set only at that revision.
func (s *Store) Delete(ctx context.Context, container, pk, id, ifRev string) error {
	t, err := s.addressed(container, pk, id)
	if err != nil {
		return opErr("delete", container, pk, id, err)
	}
	var n int64
	err = s.retry(ctx, func() error {
		var res sql.Result
		var err error
		if ifRev == "" {
			res, err = t.del.ExecContext(ctx, pk, id)
		} else {
			res, err = t.delIf.ExecContext(ctx, pk, id, parseRev(ifRev))
		}
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err == nil && n == 0 {
		err = store.ErrNotFound
		if ifRev != "" {
			err = s.whyNot(ctx, t, pk, id)
		}
	}
	if err != nil {
		return opErr("delete", container, pk, id, classify(ctx, err))
	}
	s.changed(t)
	return nil
}

// Increment adds delta to an integer top-level field in one atomic write and
// returns the new value. A missing field counts as 0 (Cosmos patch
// increment creates it); a field holding anything else, or a sum that
// overflows int64, is an error and changes nothing.
func (s *Store) Increment(ctx context.Context, container, pk, id, field string, delta int64) (int64, error) {
	t, err := s.incrementable(container, pk, id, field)
	if err != nil {
		return 0, opErr("increment", container, pk, id, err)
	}
	var v int64
	err = s.retry(ctx, func() error { return writeRow(ctx, t.incr, []any{pk, id, "$." + field, delta}, &v) })
	if errors.Is(err, sql.ErrNoRows) {
		// Absent, or the guard refused it: tell which.
		if err = s.whyNot(ctx, t, pk, id); errors.Is(err, store.ErrPrecondition) {
			err = fmt.Errorf("field %q is not an integer or adding %d overflows it", field, delta)
		}
	}
	if err != nil {
		return 0, opErr("increment", container, pk, id, classify(ctx, err))
	}
	s.changed(t)
	return v, nil
}

// incrementable is the table of a document whose field an increment may
// change: a valid name, and not the document's address.
func (s *Store) incrementable(container, pk, id, field string) (*table, error) {
	t, err := s.addressed(container, pk, id)
	switch {
	case err != nil:
		return nil, err
	case !validField(field):
		return nil, fmt.Errorf("invalid field name %q", field)
	case field == "id" || field == t.pkField:
		return nil, fmt.Errorf("field %q is the document's address and cannot change", field)
	}
	return t, nil
}

// guardHolds is IncrementIfEqual's condition, for statements binding the
// field's path at ?3 and the guard's at ?5: both hold the same integer (an
// absent field, NULL, matches nothing).
const guardHolds = `json_type(body, ?3) = 'integer' AND json_type(body, ?5) = 'integer'
	AND json_extract(body, ?3) = json_extract(body, ?5)`

// IncrementIfEqual adds delta to an integer top-level field only while the
// field guard holds the same integer, in one atomic write, and returns the
// new value. ErrPrecondition when guard differs, either field is absent or
// not an integer, or the sum would overflow; nothing is written then.
//
// The condition is read first, on a reader: a refusal, the common answer
// (the ledger's bumps, see coord's Bump), then takes no write lock and
// waits behind no write. It is linearizable at that read, whose snapshot
// is taken after the call began; a condition that holds there is checked
// again by the write, atomically.
func (s *Store) IncrementIfEqual(ctx context.Context, container, pk, id, field, guard string, delta int64) (int64, error) {
	t, err := s.incrementable(container, pk, id, field)
	if err == nil && !validField(guard) {
		err = fmt.Errorf("invalid guard field name %q", guard)
	}
	if err != nil {
		return 0, opErr("increment", container, pk, id, err)
	}
	var holds bool
	err = s.retry(ctx, func() error {
		return t.guarded.QueryRowContext(ctx, pk, id, "$."+field, delta, "$."+guard).Scan(&holds)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, opErr("increment", container, pk, id, store.ErrNotFound)
	case err != nil:
		return 0, opErr("increment", container, pk, id, classify(ctx, err))
	case !holds:
		return 0, opErr("increment", container, pk, id, store.ErrPrecondition)
	}
	var v int64
	err = s.retry(ctx, func() error {
		return writeRow(ctx, t.incrIf, []any{pk, id, "$." + field, delta, "$." + guard}, &v)
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = s.whyNot(ctx, t, pk, id)
	}
	if err != nil {
		return 0, opErr("increment", container, pk, id, classify(ctx, err))
	}
	s.changed(t)
	return v, nil
}

// writeRow runs a write with a RETURNING clause and scans its one row, or
// returns sql.ErrNoRows when it matched none. Unlike QueryRow, it steps the
// statement to its end: SQLite runs the WAL hook, and so the automatic
// checkpoint, only when a statement finishes stepping, not when it is
// reset, and without it the WAL would grow until some other write ran.
func writeRow(ctx context.Context, st *sql.Stmt, args []any, dest any) error {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest); err != nil {
		return err
	}
	if rows.Next() {
		return errors.New("write returned more than one row")
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// whyNot explains a conditional write that matched no row: store.ErrNotFound
// when the document is absent now, else store.ErrPrecondition. The write had
// no effect, so reporting the state seen by this later read is linearizable.
func (s *Store) whyNot(ctx context.Context, t *table, pk, id string) error {
	var rev int64
	err := s.retry(ctx, func() error { return t.revOf.QueryRowContext(ctx, pk, id).Scan(&rev) })
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	}
	return store.ErrPrecondition
}

// Query returns one page of documents matching q. A single-partition query
// returns documents in id order (or its reverse); a cross-partition one in
// storage order.
func (s *Store) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	t, err := s.table(container)
	if err != nil {
		return store.Page{}, fmt.Errorf("sqlite: query %s: %w", container, err)
	}
	text, args, limit, err := buildQuery(t, q)
	if err != nil {
		return store.Page{}, fmt.Errorf("sqlite: query %s: %w", container, err)
	}
	var page store.Page
	err = s.retry(ctx, func() error {
		page = store.Page{}
		rows, err := s.queryStmt(ctx, text, args)
		if err != nil {
			return err
		}
		defer rows.Close()
		var lastRID int64
		for rows.Next() {
			if len(page.Items) == limit {
				// The extra row only says there is more.
				if q.PartitionKey != "" {
					page.Continuation = partitionPrefix(q) + page.Items[limit-1].ID
				} else {
					page.Continuation = crossCont + strconv.FormatInt(lastRID, 10)
				}
				break
			}
			var (
				it  store.Item
				rev int64
			)
			if err := rows.Scan(&lastRID, &it.PartitionKey, &it.ID, &rev, &it.Body); err != nil {
				return err
			}
			it.Rev = formatRev(rev)
			page.Items = append(page.Items, it)
		}
		return rows.Err()
	})
	if err != nil {
		return store.Page{}, fmt.Errorf("sqlite: query %s: %w", container, classify(ctx, err))
	}
	return page, nil
}

// queryStmt runs a query shape through a cached prepared statement; shapes
// beyond the cache's bound run unprepared.
func (s *Store) queryStmt(ctx context.Context, text string, args []any) (*sql.Rows, error) {
	s.qmu.Lock()
	st, ok := s.qstmts[text]
	s.qmu.Unlock()
	if ok {
		return st.QueryContext(ctx, args...)
	}
	st, err := s.r.PrepareContext(ctx, text)
	if err != nil {
		return nil, err
	}
	s.qmu.Lock()
	switch prev, dup := s.qstmts[text]; {
	case s.qstmts == nil || (!dup && len(s.qstmts) >= maxCachedQueries):
		s.qmu.Unlock()
		defer st.Close()
		return st.QueryContext(ctx, args...)
	case dup: // another goroutine prepared it first
		s.qmu.Unlock()
		_ = st.Close()
		st = prev
	default:
		s.qstmts[text] = st
		s.qmu.Unlock()
	}
	return st.QueryContext(ctx, args...)
}

// ReadChanges returns up to max documents (DefaultPageSize when max <= 0)
// changed after continuation, each once at its latest version, in the order
// of their last change. The continuation is the rev of the last document
// returned; an empty page returns the continuation it was given.
func (s *Store) ReadChanges(ctx context.Context, container, continuation string, max int) (store.ChangePage, error) {
	t, err := s.table(container)
	if err != nil {
		return store.ChangePage{}, fmt.Errorf("sqlite: read changes %s: %w", container, err)
	}
	var after int64
	if continuation != "" {
		after, err = strconv.ParseInt(continuation, 10, 64)
		if err != nil || after < 0 {
			return store.ChangePage{}, fmt.Errorf("sqlite: read changes %s: continuation %q: %w", container, continuation, store.ErrBadContinuation)
		}
	}
	limit := pageSize(max)
	var page store.ChangePage
	err = s.retry(ctx, func() error {
		page = store.ChangePage{Continuation: continuation}
		rows, err := t.feed.QueryContext(ctx, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				it  store.Item
				rev int64
			)
			if err := rows.Scan(&it.PartitionKey, &it.ID, &rev, &it.Body); err != nil {
				return err
			}
			it.Rev = formatRev(rev)
			page.Items = append(page.Items, it)
			page.Continuation = it.Rev
		}
		return rows.Err()
	})
	if err != nil {
		return store.ChangePage{}, fmt.Errorf("sqlite: read changes %s: %w", container, classify(ctx, err))
	}
	return page, nil
}

// ChangesHead returns the store's write counter: every later write to any
// container takes a larger rev, so the feed after it holds only new changes.
func (s *Store) ChangesHead(ctx context.Context, container string) (string, error) {
	if _, err := s.table(container); err != nil {
		return "", fmt.Errorf("sqlite: changes head %s: %w", container, err)
	}
	var v int64
	err := s.retry(ctx, func() error {
		return s.r.QueryRowContext(ctx, `SELECT v FROM `+seqTable+` WHERE one = 1`).Scan(&v)
	})
	if err != nil {
		return "", fmt.Errorf("sqlite: changes head %s: %w", container, classify(ctx, err))
	}
	return formatRev(v), nil
}

// table resolves a container name.
func (s *Store) table(container string) (*table, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("store is closed: %w", store.ErrUnavailable)
	}
	t, ok := s.tables[container]
	if !ok {
		return nil, fmt.Errorf("unknown container %q", container)
	}
	return t, nil
}

// addressed resolves a container and checks a document address.
func (s *Store) addressed(container, pk, id string) (*table, error) {
	t, err := s.table(container)
	if err != nil {
		return nil, err
	}
	if err := checkAddress(pk, id); err != nil {
		return nil, err
	}
	return t, nil
}

// writable checks a document about to be written.
func (s *Store) writable(container, pk, id string, body []byte) (*table, error) {
	t, err := s.addressed(container, pk, id)
	if err != nil {
		return nil, err
	}
	if err := checkBody(t, pk, id, body); err != nil {
		return nil, err
	}
	return t, nil
}

// checkAddress applies Cosmos DB's rules to an id and a partition key value,
// so an id that Cosmos would refuse is refused here too.
func checkAddress(pk, id string) error {
	switch {
	case id == "":
		return errors.New("empty id")
	case len(id) > MaxIDLength:
		return fmt.Errorf("id is longer than %d bytes", MaxIDLength)
	case strings.ContainsAny(id, `/\?#`):
		return fmt.Errorf("id %q contains one of / \\ ? #", id)
	case pk == "":
		return errors.New("empty partition key")
	case len(pk) > MaxPartitionKeyBytes:
		return fmt.Errorf("partition key longer than %d bytes", MaxPartitionKeyBytes)
	}
	return nil
}

// checkBody requires a JSON object of at most MaxBodyBytes without
// duplicate fields whose "id" and partition-key field, when present, are the
// strings it is written under. Cosmos DB routes a document by those body
// fields, so a disagreeing body is a caller bug that would land elsewhere
// there; duplicates are refused because which one wins differs between
// SQLite, Cosmos and encoding/json. Absent fields are fine: the Cosmos
// backend adds them on write and strips them on read.
func checkBody(t *table, pk, id string, body []byte) error {
	if len(body) > MaxBodyBytes {
		return fmt.Errorf("body is %d bytes, more than %d: %w", len(body), MaxBodyBytes, store.ErrTooLarge)
	}
	// jsontext reads the names and skips the values in one pass without
	// decoding them: every write crosses this. It takes what encoding/json
	// takes (duplicates below the top level, invalid UTF-8 in strings).
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return errors.New("body is not a JSON object")
	}
	seen := make(map[string]bool)
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return fmt.Errorf("body is not JSON: %w", err)
		}
		key := tok.String()
		if seen[key] {
			return fmt.Errorf("body has duplicate field %q", key)
		}
		seen[key] = true
		want, address := "", false
		switch key {
		case "id":
			want, address = id, true
		case t.pkField:
			want, address = pk, true
		}
		if !address {
			if err := dec.SkipValue(); err != nil {
				return fmt.Errorf("body field %q: %w", key, err)
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("body field %q: %w", key, err)
		}
		// Two short values: encoding/json reads them, as it always did
		// (it mends what jsontext refuses, an unpaired surrogate).
		var got string
		if v.Kind() != '"' || json.Unmarshal(v, &got) != nil || got != want {
			return fmt.Errorf("body field %q is %s, want the string %q it is written under", key, v, want)
		}
	}
	if _, err := dec.ReadToken(); err != nil { // the closing brace
		return fmt.Errorf("body is not JSON: %w", err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return errors.New("body has data after the JSON object")
	}
	if t.pkField == "id" && pk != id {
		return fmt.Errorf("container is partitioned on id: partition key %q must equal id %q", pk, id)
	}
	return nil
}

// retry runs op again while it fails with SQLITE_BUSY: another process held
// the write lock past the busy timeout, or a WAL recovery was under way.
func (s *Store) retry(ctx context.Context, op func() error) error {
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil || attempt == busyRetries || !isBusy(err) {
			return err
		}
		d := time.Duration(5<<attempt)*time.Millisecond + rand.N(5*time.Millisecond)
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
	}
}

func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_BUSY || se.Code()&0xff == sqlite3.SQLITE_LOCKED)
}

// classify maps a driver error onto coord's sentinels, keeping the driver
// error in the chain: a done context first (SQLite reports an interrupted
// call as its own error), then lock contention, then I/O trouble.
func classify(ctx context.Context, err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrPrecondition) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", store.ErrThrottled, err)
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
	if errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

func opErr(op, container, pk, id string, err error) error {
	return fmt.Errorf("sqlite: %s %s/%s/%s: %w", op, container, pk, id, err)
}

func formatRev(rev int64) string { return strconv.FormatInt(rev, 10) }

// parseRev turns an IfRev back into the stored integer. A string this store
// never issued yields -1, which matches no row, so it fails as a stale
// revision would.
func parseRev(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || formatRev(v) != s {
		return -1
	}
	return v
}

func pageSize(n int) int {
	switch {
	case n <= 0:
		return DefaultPageSize
	case n > MaxPageSize:
		return MaxPageSize
	}
	return n
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
