package coord_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/blob"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/blob/azblob"
	"github.com/gigafactory/fleet/shared/blob/blobtest"
	blobfs "github.com/gigafactory/fleet/shared/blob/fs"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/artifacts"
	"github.com/gigafactory/fleet/shared/fleet"
)

// blobBackend is a blob store the artifact tests run on, and a way to
// count the blobs it holds.
type blobBackend struct {
	store blob.Store
	count func(t *testing.T) int
}

// blobBackends are every blob.Store backend available here: the directory
// store always, Azurite when `make test` started it (skipped otherwise, as
// the conformance suite is).
var blobBackends = map[string]func(t *testing.T) blobBackend{
	"fs": func(t *testing.T) blobBackend {
		s, err := blobfs.Open(filepath.Join(t.TempDir(), "blobs"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return blobBackend{store: s, count: func(t *testing.T) int {
			n := 0
			if _, err := os.Stat(filepath.Join(s.Dir(), prod)); errors.Is(err, fs.ErrNotExist) {
				return 0
			}
			require.NoError(t, fs.WalkDir(os.DirFS(filepath.Join(s.Dir(), prod)), ".", func(_ string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					n++
				}
				return err
			}))
			return n
		}}
	},
	"azurite": func(t *testing.T) blobBackend {
		url := blobtest.Azurite(t)
		var b [6]byte
		_, _ = rand.Read(b[:])
		s, err := azblob.New(t.Context(), azblob.Config{ServiceURL: url, Emulator: true,
			Container: "a" + hex.EncodeToString(b[:]), SpoolDir: t.TempDir()})
		require.NoError(t, err)
		return blobBackend{store: s, count: func(t *testing.T) int {
			return countBlobs(t, s)
		}}
	},
}

// countBlobs counts blobs of p1 by their digests as stat sees them: the
// suite keeps the digests it uploaded.
func countBlobs(t *testing.T, s blob.Store) int {
	t.Helper()
	n := 0
	for _, d := range uploadedDigests.list() {
		if _, err := s.Stat(context.Background(), blob.Key{Namespace: prod, SHA256: d}); err == nil {
			n++
		} else {
			require.ErrorIs(t, err, blob.ErrNotFound)
		}
	}
	return n
}

// digestSet remembers every digest the tests uploaded, so that a backend
// without a listing can still be counted.
type digestSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (d *digestSet) add(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]bool{}
	}
	d.m[s] = true
}

func (d *digestSet) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.m))
	for k := range d.m {
		out = append(out, k)
	}
	return out
}

var uploadedDigests digestSet

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	d := hex.EncodeToString(sum[:])
	uploadedDigests.add(d)
	return d
}

// forEachBlobBackend runs fn once per backend, in parallel subtests.
func forEachBlobBackend(t *testing.T, fn func(t *testing.T, e *env, b blobBackend)) {
	t.Helper()
	for name, open := range blobBackends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := open(t)
			e := newEnv(t, withBlobs(b.store), withConfig(coord.Config{ArtifactMaxBytes: 1 << 20}))
			fn(t, e, b)
		})
	}
}

func (e *env) upload(up artifacts.Upload, body []byte) (*fleet.Artifact, error) {
	up.ProductID = prod
	digestOf(body)
	up.Body = bytes.NewReader(body)
	up.Size = int64(len(body))
	return e.c.UploadArtifact(e.ctx, up)
}

func (e *env) content(a *fleet.Artifact) []byte {
	e.t.Helper()
	r, err := e.c.OpenArtifact(e.ctx, a)
	require.NoError(e.t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(e.t, err)
	return b
}

// TestArtifactRoundTrip: a holder's upload is stored with its digest and
// size, listed, read back byte for byte, and recorded as an event of the
// job's run.
func TestArtifactRoundTrip(t *testing.T) {
	t.Parallel()
	forEachBlobBackend(t, func(t *testing.T, e *env, b blobBackend) {
		e.factory("f1")
		j := e.submit()
		cl := e.claim("f1")
		log := []byte("engine output\n" + strings.Repeat("line\n", 1000))
		a, err := e.upload(artifacts.Upload{JobID: j.ID, Name: "output.log", Kind: fleet.ArtifactLog,
			ContentType: "text/plain; charset=utf-8", FactoryID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch)}, log)
		require.NoError(t, err)
		require.Equal(t, digestOf(log), a.SHA256)
		require.Equal(t, int64(len(log)), a.Size)
		require.Equal(t, fleet.RunID(j.ID, cl.LeaseEpoch), a.RunID)
		require.Equal(t, "text/plain; charset=utf-8", a.ContentType)
		require.Equal(t, fleet.ArtifactLog, a.Kind)

		got, err := e.c.GetArtifact(e.ctx, prod, a.ID)
		require.NoError(t, err)
		require.Equal(t, a, got)
		list, err := e.c.Artifacts(e.ctx, prod, j.ID)
		require.NoError(t, err)
		require.Equal(t, []fleet.Artifact{*a}, list)
		body := e.content(a)
		require.Equal(t, a.SHA256, digestOf(body))
		require.Equal(t, log, body)

		evs := e.events(j.ID)
		last := evs[len(evs)-1]
		require.Equal(t, fleet.EventArtifactAdded, last.Type)
		require.Equal(t, fleet.ActorFactory, last.Actor)
		require.Contains(t, string(last.Data), a.ID)
		requireContiguous(t, evs)
		require.Equal(t, 1, b.count(t))
	})
}

// TestArtifactOverLimit: more than ArtifactMaxBytes is too_large and
// nothing is stored, whether the size was declared or found while reading.
func TestArtifactOverLimit(t *testing.T) {
	t.Parallel()
	forEachBlobBackend(t, func(t *testing.T, e *env, b blobBackend) {
		j := e.submit()
		big := bytes.Repeat([]byte("x"), 1<<20+1)
		before := e.snapshotContainers(store.Jobs, store.Artifacts, store.Events)
		_, err := e.upload(artifacts.Upload{JobID: j.ID, Name: "big.bin"}, big)
		requireCode(t, err, fleet.CodeTooLarge, "body")
		_, err = e.c.UploadArtifact(e.ctx, artifacts.Upload{ProductID: prod, JobID: j.ID, Name: "big.bin", ActorID: "op", Size: -1, Body: bytes.NewReader(big)})
		requireCode(t, err, fleet.CodeTooLarge, "body")
		require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Artifacts, store.Events))
		require.Equal(t, 0, b.count(t))

		exact := bytes.Repeat([]byte("y"), 1<<20)
		_, err = e.upload(artifacts.Upload{JobID: j.ID, Name: "exact.bin"}, exact)
		require.NoError(t, err, "exactly the limit is allowed")
	})
}

// TestArtifactFenced: a holder whose lease moved on (stale epoch, or
// another factory's lease) stores nothing, not even bytes.
func TestArtifactFenced(t *testing.T) {
	t.Parallel()
	forEachBlobBackend(t, func(t *testing.T, e *env, b blobBackend) {
		e.factory("f1")
		e.factory("f2")
		j := e.submit()
		cl := e.claim("f1")
		queued := e.submit()
		before := e.snapshotContainers(store.Jobs, store.Artifacts, store.Events)
		for name, up := range map[string]artifacts.Upload{
			"stale epoch":    {JobID: j.ID, Name: "output.log", FactoryID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch - 1)},
			"not the holder": {JobID: j.ID, Name: "output.log", FactoryID: "f2", LeaseEpoch: ptr(cl.LeaseEpoch)},
			"future epoch":   {JobID: j.ID, Name: "output.log", FactoryID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch + 1)},
			"queued job":     {JobID: queued.ID, Name: "output.log", FactoryID: "f1", LeaseEpoch: ptr(int64(0))},
		} {
			_, err := e.upload(up, []byte("output of "+name))
			requireCode(t, err, fleet.CodeFenced, "")
			require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Artifacts, store.Events), name)
		}
		require.Equal(t, 0, b.count(t))
	})
}

// TestArtifactFencedMidUpload: the lease is lost while the bytes stream
// (the reaper revokes it): the upload is refused at its decision and
// leaves no pointer and no bytes.
func TestArtifactFencedMidUpload(t *testing.T) {
	t.Parallel()
	forEachBlobBackend(t, func(t *testing.T, e *env, b blobBackend) {
		e.factory("f1")
		j := e.submit()
		cl := e.claim("f1")
		data := []byte("half of it, then the lease is gone")
		digestOf(data)
		body := &hookReader{r: bytes.NewReader(data), at: 5, hook: func() {
			e.clock.Advance(coord.DefaultLeaseTTL + time.Second)
			n, err := e.c.Reap(e.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}}
		_, err := e.c.UploadArtifact(e.ctx, artifacts.Upload{ProductID: prod, JobID: j.ID, Name: "output.log",
			FactoryID: "f1", LeaseEpoch: ptr(cl.LeaseEpoch), Size: -1, Body: body})
		requireCode(t, err, fleet.CodeFenced, "")
		list, err := e.c.Artifacts(e.ctx, prod, j.ID)
		require.NoError(t, err)
		require.Empty(t, list)
		require.Equal(t, 0, b.count(t))
	})
}

// hookReader runs hook once, after at bytes were read.
type hookReader struct {
	r    io.Reader
	at   int
	read int
	hook func()
	done bool
}

func (h *hookReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	n, err := h.r.Read(p)
	h.read += n
	if !h.done && h.read >= h.at {
		h.done = true
		h.hook()
	}
	return n, err
}

// TestArtifactContentAddressed: identical uploads are one blob; deleting
// one pointer keeps the bytes for the other; deleting the last removes
// them. Each delete is an event.
func TestArtifactContentAddressed(t *testing.T) {
	t.Parallel()
	forEachBlobBackend(t, func(t *testing.T, e *env, b blobBackend) {
		j1, j2 := e.submit(), e.submit()
		same := []byte("the same diff")
		a1, err := e.upload(artifacts.Upload{JobID: j1.ID, Name: "change.diff", Kind: fleet.ArtifactDiff, ActorID: "op"}, same)
		require.NoError(t, err)
		a2, err := e.upload(artifacts.Upload{JobID: j2.ID, Name: "change.diff", Kind: fleet.ArtifactDiff, ActorID: "op"}, same)
		require.NoError(t, err)
		require.NotEqual(t, a1.ID, a2.ID)
		require.Equal(t, a1.SHA256, a2.SHA256)
		require.Equal(t, 1, b.count(t), "identical bytes are stored once")

		require.NoError(t, e.c.DeleteArtifact(e.ctx, "op", a1))
		_, err = e.c.GetArtifact(e.ctx, prod, a1.ID)
		requireCode(t, err, fleet.CodeNotFound, "")
		require.Equal(t, same, e.content(a2), "the other pointer keeps the bytes")
		require.Equal(t, fleet.EventArtifactDeleted, e.events(j1.ID)[len(e.events(j1.ID))-1].Type)

		require.NoError(t, e.c.DeleteArtifact(e.ctx, "op", a2))
		require.Equal(t, 0, b.count(t), "no pointer left: the bytes are gone")
		err = e.c.DeleteArtifact(e.ctx, "op", a2)
		requireCode(t, err, fleet.CodeNotFound, "")
		requireContiguous(t, e.events(j2.ID))
	})
}

// TestArtifactDeleteRacingUpload: the last pointer of some bytes is deleted
// while an identical upload runs, over and over, with real goroutines:
// whatever the interleaving, the upload's pointer always has its bytes.
func TestArtifactDeleteRacingUpload(t *testing.T) {
	t.Parallel()
	forEachBlobBackend(t, func(t *testing.T, e *env, b blobBackend) {
		j := e.submit()
		for i := range 20 {
			body := []byte(fmt.Sprintf("round %d", i))
			old, err := e.upload(artifacts.Upload{JobID: j.ID, Name: "old.log", ActorID: "op"}, body)
			require.NoError(t, err)
			var wg sync.WaitGroup
			var fresh *fleet.Artifact
			var upErr, delErr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				fresh, upErr = e.upload(artifacts.Upload{JobID: j.ID, Name: "new.log", ActorID: "op"}, body)
			}()
			go func() {
				defer wg.Done()
				delErr = e.c.DeleteArtifact(e.ctx, "op", old)
			}()
			wg.Wait()
			require.NoError(t, upErr)
			require.NoError(t, delErr)
			require.Equal(t, body, e.content(fresh), "round %d: the upload's bytes went with the other pointer", i)
			require.NoError(t, e.c.DeleteArtifact(e.ctx, "op", fresh))
		}
		require.Equal(t, 0, b.count(t))
	})
}

// TestArtifactBadInput: each bad field is named, and nothing is stored.
func TestArtifactBadInput(t *testing.T) {
	t.Parallel()
	forEachBlobBackend(t, func(t *testing.T, e *env, b blobBackend) {
		e.factory("f1")
		j := e.submit()
		cl := e.claim("f1")
		epoch := ptr(cl.LeaseEpoch)
		before := e.snapshotContainers(store.Jobs, store.Artifacts, store.Events)
		for _, tc := range []struct {
			name  string
			up    artifacts.Upload
			field string
		}{
			{"no name", artifacts.Upload{JobID: j.ID, ActorID: "op"}, "name"},
			{"path as name", artifacts.Upload{JobID: j.ID, Name: "../etc/passwd", ActorID: "op"}, "name"},
			{"name with a slash", artifacts.Upload{JobID: j.ID, Name: "a/b", ActorID: "op"}, "name"},
			{"unknown kind", artifacts.Upload{JobID: j.ID, Name: "x", Kind: "binary", ActorID: "op"}, "kind"},
			{"bad content type", artifacts.Upload{JobID: j.ID, Name: "x", ContentType: "text/", ActorID: "op"}, "Content-Type"},
			{"holder without epoch", artifacts.Upload{JobID: j.ID, Name: "x", FactoryID: "f1"}, "leaseEpoch"},
			{"operator with epoch", artifacts.Upload{JobID: j.ID, Name: "x", ActorID: "op", LeaseEpoch: epoch}, "leaseEpoch"},
		} {
			_, err := e.upload(tc.up, []byte("bytes"))
			requireCode(t, err, fleet.CodeInvalid, tc.field)
		}
		_, err := e.upload(artifacts.Upload{JobID: "jmissing", Name: "x", ActorID: "op"}, []byte("bytes"))
		requireCode(t, err, fleet.CodeNotFound, "")
		_, err = e.c.UploadArtifact(e.ctx, artifacts.Upload{ProductID: prod, JobID: j.ID, Name: "x", ActorID: "op",
			Size: -1, Body: io.MultiReader(strings.NewReader("start"), errReader{io.ErrUnexpectedEOF})})
		requireCode(t, err, fleet.CodeInvalid, "body")
		require.Equal(t, before, e.snapshotContainers(store.Jobs, store.Artifacts, store.Events))
		require.Equal(t, 0, b.count(t))
		for _, id := range []string{"nodot", "j1.", ".x", "j1.x/y"} {
			_, err := e.c.GetArtifact(e.ctx, prod, id)
			requireCode(t, err, fleet.CodeNotFound, "")
		}
	})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestArtifactsNeedBlobStore: without a blob store the use cases say so.
func TestArtifactsNeedBlobStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.submit()
	_, err := e.upload(artifacts.Upload{JobID: j.ID, Name: "x", ActorID: "op"}, []byte("x"))
	require.True(t, errors.Is(err, fleet.ErrUnavailable), "%v", err)
}

// hookBlobs runs a hook once at a chosen point of the blob store's calls,
// to force one interleaving of an upload and a delete.
type hookBlobs struct {
	blob.Store
	mu                                   sync.Mutex
	afterCommit, afterStat, beforeDelete func()
}

// take returns the hook *slot held and disarms it.
func (h *hookBlobs) take(slot *func()) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn := *slot
	*slot = nil
	return fn
}

func (h *hookBlobs) Stage(ctx context.Context, ns string, r io.Reader, limit int64) (blob.Staged, error) {
	s, err := h.Store.Stage(ctx, ns, r, limit)
	if err != nil {
		return nil, err
	}
	return &hookStaged{Staged: s, h: h}, nil
}

func (h *hookBlobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	info, err := h.Store.Stat(ctx, key)
	if fn := h.take(&h.afterStat); fn != nil {
		fn()
	}
	return info, err
}

func (h *hookBlobs) Delete(ctx context.Context, key blob.Key, ifVersion string) error {
	if fn := h.take(&h.beforeDelete); fn != nil {
		fn()
	}
	return h.Store.Delete(ctx, key, ifVersion)
}

type hookStaged struct {
	blob.Staged
	h *hookBlobs
}

func (s *hookStaged) Commit(ctx context.Context) (blob.Info, error) {
	info, err := s.Staged.Commit(ctx)
	if fn := s.h.take(&s.h.afterCommit); fn != nil {
		fn()
	}
	return info, err
}

// TestArtifactReleaseInterleavings forces each interleaving of deleting the
// last pointer of some bytes with an upload of the same bytes that the
// reference rules (artifacts.go) must survive: the new pointer always
// keeps its bytes.
func TestArtifactReleaseInterleavings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// arm sets the hook at which the racing operation runs; del
		// says whether the delete is the racing one (else the upload).
		arm func(h *hookBlobs, race func())
		del bool
	}{
		{"delete between the upload's commit and its return", func(h *hookBlobs, race func()) { h.afterCommit = race }, true},
		{"upload between the delete's stat and its query", func(h *hookBlobs, race func()) { h.afterStat = race }, false},
		{"upload between the delete's query and its blob delete", func(h *hookBlobs, race func()) { h.beforeDelete = race }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsStore, err := blobfs.Open(filepath.Join(t.TempDir(), "blobs"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = fsStore.Close() })
			h := &hookBlobs{Store: fsStore}
			e := newEnv(t, withBlobs(h))
			j := e.submit()
			body := []byte("shared bytes")
			old, err := e.upload(artifacts.Upload{JobID: j.ID, Name: "old.log", ActorID: "op"}, body)
			require.NoError(t, err)
			var fresh *fleet.Artifact
			var upErr, delErr error
			upload := func() {
				fresh, upErr = e.upload(artifacts.Upload{JobID: j.ID, Name: "new.log", ActorID: "op"}, body)
			}
			del := func() { delErr = e.c.DeleteArtifact(e.ctx, "op", old) }
			if tc.del {
				tc.arm(h, del)
				upload()
			} else {
				tc.arm(h, upload)
				del()
			}
			require.NoError(t, upErr)
			require.NoError(t, delErr)
			_, err = e.c.GetArtifact(e.ctx, prod, old.ID)
			requireCode(t, err, fleet.CodeNotFound, "")
			require.Equal(t, body, e.content(fresh), "the new pointer lost its bytes")
		})
	}
}
