// Package blobtest is the conformance suite every blob.Store backend
// passes: staging with a size limit (streamed, never read past the limit),
// commit, open, stat and conditional delete, identical and concurrent
// commits of the same bytes, a delete racing a commit, namespaces, missing
// blobs and bad keys.
//
// The suite asserts only what the blob.Store contract promises: versions
// are opaque (compared for equality only) and contents are compared byte for
// byte with their SHA-256 checked independently.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/blob"

	"github.com/stretchr/testify/require"
)

// Backend is a store under test.
type Backend struct {
	Store blob.Store
	// Staged counts what the backend's staging area holds now. The suite
	// checks it returns to zero after every failed or discarded stage; nil
	// skips those checks.
	Staged func() int
}

// Run runs the suite. open is called once per subtest and must return a
// store that nothing else writes while the subtest runs (a new directory, a
// new container); it registers its own cleanup with t.Cleanup. Subtests run
// in parallel, each on its own store.
func Run(t *testing.T, open func(t *testing.T) Backend) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"RoundTrip", testRoundTrip},
		{"Empty", testEmpty},
		{"Streamed", testStreamed},
		{"LimitExact", testLimitExact},
		{"OverLimit", testOverLimit},
		{"OverLimitStopsReading", testOverLimitStopsReading},
		{"ReaderError", testReaderError},
		{"CanceledContext", testCanceledContext},
		{"Discard", testDiscard},
		{"IdenticalCommits", testIdenticalCommits},
		{"ConcurrentIdenticalPuts", testConcurrentIdenticalPuts},
		{"Missing", testMissing},
		{"ConditionalDelete", testConditionalDelete},
		{"CommitAfterDelete", testCommitAfterDelete},
		{"DeleteRacingCommit", testDeleteRacingCommit},
		{"Namespaces", testNamespaces},
		{"OpenWhileDeleted", testOpenWhileDeleted},
		{"InvalidKeys", testInvalidKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := open(t)
			require.NotNil(t, b.Store, "open returned no store")
			tc.fn(t, b)
		})
	}
}

const ns = "p1"

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func key(content []byte) blob.Key { return blob.Key{Namespace: ns, SHA256: digest(content)} }

// put stages and commits content and discards the staging copy.
func put(t *testing.T, s blob.Store, content []byte) blob.Info {
	t.Helper()
	st, err := s.Stage(t.Context(), ns, bytes.NewReader(content), int64(len(content))+1)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Discard()) }()
	info, err := st.Commit(t.Context())
	require.NoError(t, err)
	return info
}

// read returns the blob's bytes, checking what Open says about them.
func read(t *testing.T, s blob.Store, k blob.Key) []byte {
	t.Helper()
	rc, info, err := s.Open(t.Context(), k)
	require.NoError(t, err, "open %s", k)
	defer rc.Close()
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Equal(t, k, info.Key)
	require.Equal(t, int64(len(got)), info.Size, "Open's size")
	require.NotEmpty(t, info.Version)
	require.Equal(t, k.SHA256, digest(got), "bytes read back hash to their key")
	return got
}

func requireGone(t *testing.T, s blob.Store, k blob.Key) {
	t.Helper()
	_, err := s.Stat(t.Context(), k)
	require.ErrorIs(t, err, blob.ErrNotFound, "stat %s", k)
	_, _, err = s.Open(t.Context(), k)
	require.ErrorIs(t, err, blob.ErrNotFound, "open %s", k)
}

func requireNoStaging(t *testing.T, b Backend) {
	t.Helper()
	if b.Staged != nil {
		require.Zero(t, b.Staged(), "the staging area still holds an upload")
	}
}

func testRoundTrip(t *testing.T, b Backend) {
	s := b.Store
	content := []byte("the engine's output log\nline two\n")
	st, err := s.Stage(t.Context(), ns, bytes.NewReader(content), 1<<20)
	require.NoError(t, err)
	require.Equal(t, key(content), st.Key())
	require.Equal(t, int64(len(content)), st.Size())
	requireGone(t, s, st.Key()) // staged is not stored

	info, err := st.Commit(t.Context())
	require.NoError(t, err)
	require.Equal(t, key(content), info.Key)
	require.Equal(t, int64(len(content)), info.Size)
	require.NotEmpty(t, info.Version)
	require.NoError(t, st.Discard())
	requireNoStaging(t, b)

	stat, err := s.Stat(t.Context(), info.Key)
	require.NoError(t, err)
	require.Equal(t, info, stat, "Stat describes what Commit wrote")
	require.Equal(t, content, read(t, s, info.Key))
}

func testEmpty(t *testing.T, b Backend) {
	info := put(t, b.Store, nil)
	require.Equal(t, digest(nil), info.Key.SHA256)
	require.Zero(t, info.Size)
	require.Empty(t, read(t, b.Store, info.Key))
}

// pattern is a reader of n deterministic bytes made as they are read, so a
// large upload is never in the test's memory either.
type pattern struct {
	n, off int64
	read   int64 // bytes handed out
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := range b {
		x := uint64(p.off + int64(i))
		b[i] = byte(x*2654435761>>13) ^ byte(x)
	}
	p.off += int64(len(b))
	p.read += int64(len(b))
	return len(b), nil
}

func patternDigest(t *testing.T, n int64) string {
	t.Helper()
	h := sha256.New()
	_, err := io.Copy(h, &pattern{n: n})
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// testStreamed: a multi-megabyte upload goes through in chunks (the
// backend's multi-part path, where it has one) and reads back intact.
func testStreamed(t *testing.T, b Backend) {
	const n = 9<<20 + 12345
	st, err := b.Store.Stage(t.Context(), ns, &pattern{n: n}, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Discard()) }()
	want := blob.Key{Namespace: ns, SHA256: patternDigest(t, n)}
	require.Equal(t, want, st.Key())
	require.Equal(t, int64(n), st.Size())
	info, err := st.Commit(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(n), info.Size)

	rc, oinfo, err := b.Store.Open(t.Context(), want)
	require.NoError(t, err)
	defer rc.Close()
	h := sha256.New()
	got, err := io.Copy(h, rc)
	require.NoError(t, err)
	require.Equal(t, int64(n), got)
	require.Equal(t, int64(n), oinfo.Size)
	require.Equal(t, want.SHA256, hex.EncodeToString(h.Sum(nil)))
}

func testLimitExact(t *testing.T, b Backend) {
	content := bytes.Repeat([]byte("x"), 1000)
	st, err := b.Store.Stage(t.Context(), ns, bytes.NewReader(content), 1000)
	require.NoError(t, err, "exactly the limit is allowed")
	defer func() { require.NoError(t, st.Discard()) }()
	_, err = st.Commit(t.Context())
	require.NoError(t, err)
	require.Equal(t, content, read(t, b.Store, key(content)))
}

func testOverLimit(t *testing.T, b Backend) {
	content := bytes.Repeat([]byte("y"), 1001)
	st, err := b.Store.Stage(t.Context(), ns, bytes.NewReader(content), 1000)
	require.ErrorIs(t, err, blob.ErrTooLarge)
	require.Nil(t, st)
	requireGone(t, b.Store, key(content))
	requireGone(t, b.Store, key(content[:1000]))
	requireNoStaging(t, b)
}

// testOverLimitStopsReading: an endless upload is refused after about the
// limit, not read to its end.
func testOverLimitStopsReading(t *testing.T, b Backend) {
	const limit = 1 << 20
	src := &pattern{n: 1 << 62}
	_, err := b.Store.Stage(t.Context(), ns, src, limit)
	require.ErrorIs(t, err, blob.ErrTooLarge)
	require.LessOrEqual(t, src.read, int64(limit+(1<<20)), "read far past the limit")
	requireNoStaging(t, b)
}

type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

var errClientGone = errors.New("client went away")

func testReaderError(t *testing.T, b Backend) {
	content := []byte("half an upload")
	_, err := b.Store.Stage(t.Context(), ns, &failingReader{data: content, err: errClientGone}, 1<<20)
	require.ErrorIs(t, err, errClientGone, "the reader's error comes back wrapped")
	require.NotErrorIs(t, err, blob.ErrTooLarge)
	requireGone(t, b.Store, key(content))
	requireNoStaging(t, b)
}

func testCanceledContext(t *testing.T, b Backend) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	content := []byte("never stored")
	_, err := b.Store.Stage(ctx, ns, bytes.NewReader(content), 1<<20)
	require.ErrorIs(t, err, context.Canceled)
	requireNoStaging(t, b)

	st, err := b.Store.Stage(t.Context(), ns, bytes.NewReader(content), 1<<20)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Discard()) }()
	_, err = st.Commit(ctx)
	require.ErrorIs(t, err, context.Canceled)
	requireGone(t, b.Store, key(content))

	info, err := st.Commit(t.Context())
	require.NoError(t, err)
	_, err = b.Store.Stat(ctx, info.Key)
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = b.Store.Open(ctx, info.Key)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, b.Store.Delete(ctx, info.Key, ""), context.Canceled)
	require.Equal(t, content, read(t, b.Store, info.Key), "nothing a canceled call did removed it")
}

func testDiscard(t *testing.T, b Backend) {
	content := []byte("staged, then dropped")
	st, err := b.Store.Stage(t.Context(), ns, bytes.NewReader(content), 1<<20)
	require.NoError(t, err)
	require.NoError(t, st.Discard())
	require.NoError(t, st.Discard(), "a second discard is harmless")
	requireGone(t, b.Store, key(content))
	requireNoStaging(t, b)

	// Discarding after a commit leaves the blob.
	info := put(t, b.Store, content)
	require.Equal(t, content, read(t, b.Store, info.Key))
	requireNoStaging(t, b)
}

// testIdenticalCommits: the same bytes twice are one blob, and the second
// commit gives it a new version.
func testIdenticalCommits(t *testing.T, b Backend) {
	content := []byte("same diff every time")
	first := put(t, b.Store, content)
	second := put(t, b.Store, content)
	require.Equal(t, first.Key, second.Key)
	require.Equal(t, first.Size, second.Size)
	require.NotEqual(t, first.Version, second.Version, "a commit of present bytes gives a new version")
	stat, err := b.Store.Stat(t.Context(), first.Key)
	require.NoError(t, err)
	require.Equal(t, second.Version, stat.Version)
	require.Equal(t, content, read(t, b.Store, first.Key))
}

// testConcurrentIdenticalPuts: many uploads of the same bytes at once all
// succeed, each with its own version, and leave one intact blob.
func testConcurrentIdenticalPuts(t *testing.T, b Backend) {
	const workers = 12
	content := bytes.Repeat([]byte("concurrent "), 5000)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		versions = map[string]bool{}
		errs     []error
	)
	for range workers {
		wg.Go(func() {
			st, err := b.Store.Stage(context.Background(), ns, bytes.NewReader(content), 1<<20)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer func() { _ = st.Discard() }()
			info, err := st.Commit(context.Background())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if info.Key != key(content) || info.Size != int64(len(content)) {
				errs = append(errs, errors.New("commit described another blob"))
			}
			versions[info.Version] = true
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, versions, workers, "every commit gives a version of its own")
	require.Equal(t, content, read(t, b.Store, key(content)))
	requireNoStaging(t, b)
}

func testMissing(t *testing.T, b Backend) {
	k := key([]byte("never uploaded"))
	requireGone(t, b.Store, k)
	require.NoError(t, b.Store.Delete(t.Context(), k, ""), "deleting a missing blob is not an error")
	require.NoError(t, b.Store.Delete(t.Context(), k, "some-version"))
}

func testConditionalDelete(t *testing.T, b Backend) {
	content := []byte("delete me when nobody wrote me since")
	v1 := put(t, b.Store, content)
	v2 := put(t, b.Store, content)
	require.ErrorIs(t, b.Store.Delete(t.Context(), v1.Key, v1.Version), blob.ErrVersion)
	require.Equal(t, content, read(t, b.Store, v1.Key), "a refused delete removes nothing")
	require.NoError(t, b.Store.Delete(t.Context(), v2.Key, v2.Version))
	requireGone(t, b.Store, v2.Key)

	put(t, b.Store, content)
	require.NoError(t, b.Store.Delete(t.Context(), v1.Key, ""), "an unconditional delete")
	requireGone(t, b.Store, v1.Key)
}

// testCommitAfterDelete: a staged blob can be committed again after its
// blob was deleted, and comes back under a version never seen before.
func testCommitAfterDelete(t *testing.T, b Backend) {
	content := []byte("back again")
	st, err := b.Store.Stage(t.Context(), ns, bytes.NewReader(content), 1<<20)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Discard()) }()
	first, err := st.Commit(t.Context())
	require.NoError(t, err)
	require.NoError(t, b.Store.Delete(t.Context(), first.Key, first.Version))
	requireGone(t, b.Store, first.Key)

	again, err := st.Commit(t.Context())
	require.NoError(t, err)
	require.NotEqual(t, first.Version, again.Version, "a recreated blob has a new version")
	require.Equal(t, content, read(t, b.Store, first.Key))
	require.ErrorIs(t, b.Store.Delete(t.Context(), first.Key, first.Version), blob.ErrVersion,
		"a delete conditional on the old version cannot remove the new blob")
	require.Equal(t, content, read(t, b.Store, first.Key))
}

// testDeleteRacingCommit is the race a garbage collector runs into: it read
// version v, then deletes on v while an upload of the same bytes commits.
// Whatever the interleaving, once both are done the blob exists: either the
// delete came first and the commit wrote the bytes again, or the commit
// came first and changed the version, so the delete was refused.
func testDeleteRacingCommit(t *testing.T, b Backend) {
	rounds := 25
	if testing.Short() {
		rounds = 8
	}
	content := []byte("raced bytes")
	st, err := b.Store.Stage(t.Context(), ns, bytes.NewReader(content), 1<<20)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Discard()) }()
	for round := range rounds {
		v, err := st.Commit(t.Context())
		require.NoError(t, err)
		var wg sync.WaitGroup
		var delErr, commitErr error
		wg.Go(func() { delErr = b.Store.Delete(context.Background(), v.Key, v.Version) })
		wg.Go(func() { _, commitErr = st.Commit(context.Background()) })
		wg.Wait()
		require.NoError(t, commitErr, "round %d", round)
		if delErr != nil {
			require.ErrorIs(t, delErr, blob.ErrVersion, "round %d", round)
		}
		require.Equal(t, content, read(t, b.Store, v.Key), "round %d: the committed blob must survive the racing delete", round)
	}
}

func testNamespaces(t *testing.T, b Backend) {
	content := []byte("shared by two products")
	a := blob.Key{Namespace: "prod-a", SHA256: digest(content)}
	other := blob.Key{Namespace: "prod.b_2", SHA256: digest(content)}
	for _, k := range []blob.Key{a, other} {
		st, err := b.Store.Stage(t.Context(), k.Namespace, bytes.NewReader(content), 1<<20)
		require.NoError(t, err)
		require.Equal(t, k, st.Key())
		_, err = st.Commit(t.Context())
		require.NoError(t, err)
		require.NoError(t, st.Discard())
	}
	require.NoError(t, b.Store.Delete(t.Context(), a, ""))
	requireGone(t, b.Store, a)
	require.Equal(t, content, read(t, b.Store, other), "a namespace's blobs are its own")
	requireGone(t, b.Store, blob.Key{Namespace: ns, SHA256: digest(content)})
}

// testOpenWhileDeleted: a reader opened before a delete yields the whole
// blob or an error, never other bytes.
func testOpenWhileDeleted(t *testing.T, b Backend) {
	const n = 3 << 20
	st, err := b.Store.Stage(t.Context(), ns, &pattern{n: n}, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Discard()) }()
	info, err := st.Commit(t.Context())
	require.NoError(t, err)
	rc, _, err := b.Store.Open(t.Context(), info.Key)
	require.NoError(t, err)
	defer rc.Close()
	first := make([]byte, 1024)
	_, err = io.ReadFull(rc, first)
	require.NoError(t, err)
	require.NoError(t, b.Store.Delete(t.Context(), info.Key, ""))
	h := sha256.New()
	h.Write(first)
	if _, err := io.Copy(h, rc); err == nil {
		require.Equal(t, info.Key.SHA256, hex.EncodeToString(h.Sum(nil)), "a reader that ends cleanly yields the blob's bytes")
	}
	requireGone(t, b.Store, info.Key)
}

func testInvalidKeys(t *testing.T, b Backend) {
	good := digest([]byte("x"))
	for _, k := range []blob.Key{
		{Namespace: "", SHA256: good},
		{Namespace: "..", SHA256: good},
		{Namespace: "a/b", SHA256: good},
		{Namespace: ns, SHA256: ""},
		{Namespace: ns, SHA256: "../../etc/passwd"},
		{Namespace: ns, SHA256: good[:63]},
		{Namespace: ns, SHA256: "A" + good[1:]},
	} {
		_, err := b.Store.Stat(t.Context(), k)
		require.Error(t, err, "stat %q", k)
		require.NotErrorIs(t, err, blob.ErrNotFound, "stat %q: a bad key is not a missing blob", k)
		_, _, err = b.Store.Open(t.Context(), k)
		require.Error(t, err, "open %q", k)
		require.NotErrorIs(t, err, blob.ErrNotFound, "open %q", k)
		require.Error(t, b.Store.Delete(t.Context(), k, ""), "delete %q", k)
	}
	for _, bad := range []string{"", "..", "a/b", "-x"} {
		_, err := b.Store.Stage(t.Context(), bad, bytes.NewReader([]byte("x")), 10)
		require.Error(t, err, "stage into namespace %q", bad)
	}
	requireNoStaging(t, b)
}

// EnvAzurite names the variable holding the blob endpoint of a running
// Azurite (http://127.0.0.1:<port>/devstoreaccount1); `make test` starts one
// and sets it (tests/azurite).
const EnvAzurite = "FLEET_TEST_AZURITE_BLOB"

// Azurite returns the Azurite blob endpoint the tests may use. Without one,
// a test fails under CI=true (CI must run the suite against Azurite) and is
// skipped with a one-line reason otherwise.
func Azurite(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvAzurite)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set but CI=true: CI runs this test against Azurite; run it through `make test`", EnvAzurite)
		}
		t.Skipf("Azurite not available: %s is unset (`make test` starts Azurite and sets it)", EnvAzurite)
	}
	return url
}
