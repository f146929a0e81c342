package fs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/blob"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/blob/blobtest"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Backend {
		s := open(t, t.TempDir())
		return blobtest.Backend{Store: s, Staged: func() int {
			n, err := s.StagingFiles()
			require.NoError(t, err)
			return n
		}}
	})
}

// Two stores on one directory stand for two processes: flock, not the
// mutex, is what keeps a racing delete from removing a fresh commit, and
// the version counter in the lock file keeps versions unique between them.
func TestTwoProcessesShareTheDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := open(t, dir), open(t, dir)
	content := []byte("shared between processes")
	stage := func(s *Store) blob.Staged {
		st, err := s.Stage(t.Context(), "p1", bytes.NewReader(content), 1<<10)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Discard()) })
		return st
	}
	sa, sb := stage(a), stage(b)
	seen := map[string]bool{}
	for round := range 40 {
		v, err := sa.Commit(t.Context())
		require.NoError(t, err)
		require.False(t, seen[v.Version], "round %d: version %s issued twice", round, v.Version)
		seen[v.Version] = true
		var wg sync.WaitGroup
		var delErr, commitErr error
		var w blob.Info
		wg.Go(func() { delErr = a.Delete(context.Background(), v.Key, v.Version) })
		wg.Go(func() { w, commitErr = sb.Commit(context.Background()) })
		wg.Wait()
		require.NoError(t, commitErr)
		require.False(t, seen[w.Version], "round %d: version %s issued twice", round, w.Version)
		seen[w.Version] = true
		if delErr != nil {
			require.ErrorIs(t, delErr, blob.ErrVersion)
		}
		_, err = b.Stat(t.Context(), v.Key)
		require.NoError(t, err, "round %d: the commit must survive the racing delete", round)
	}
}

func TestVersionsSurviveReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	content := []byte("versions outlive the process")
	commit := func() blob.Info {
		s, err := Open(dir)
		require.NoError(t, err)
		defer s.Close()
		st, err := s.Stage(t.Context(), "p1", bytes.NewReader(content), 1<<10)
		require.NoError(t, err)
		defer st.Discard()
		info, err := st.Commit(t.Context())
		require.NoError(t, err)
		require.NoError(t, s.Delete(t.Context(), info.Key, info.Version))
		return info
	}
	first, second := commit(), commit()
	require.Less(t, first.Version, second.Version)
}

func TestOpenRemovesOnlyStaleStaging(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	stale := filepath.Join(dir, stagingDir, "stage-stale")
	fresh := filepath.Join(dir, stagingDir, "stage-fresh")
	for _, p := range []string{stale, fresh} {
		require.NoError(t, os.WriteFile(p, []byte("partial"), 0o600))
	}
	old := time.Now().Add(-StaleStaging - time.Minute)
	require.NoError(t, os.Chtimes(stale, old, old))
	_ = s

	open(t, dir)
	require.NoFileExists(t, stale, "left by a process that died mid-upload")
	require.FileExists(t, fresh, "may be another process's upload in progress")
}

func TestBlobsLiveUnderTheirNamespaceAndDigest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	st, err := s.Stage(t.Context(), "p1", bytes.NewReader([]byte("x")), 10)
	require.NoError(t, err)
	defer st.Discard()
	info, err := st.Commit(t.Context())
	require.NoError(t, err)
	k := info.Key.SHA256
	require.FileExists(t, filepath.Join(dir, "p1", k[:2], k))
}
