package fs

import (
	"testing"

	"github.com/gigafactory/fleet/shared/runlog"
	"github.com/gigafactory/fleet/shared/runlog/runlogtest"

	"github.com/stretchr/testify/require"
)

func TestConformance(t *testing.T) {
	runlogtest.Run(t, func(t *testing.T, limits runlog.Limits) runlog.Store {
		s, err := Open(t.TempDir(), limits)
		require.NoError(t, err)
		return s
	})
}

// TestTwoStoresShareADirectory: two stores over one directory (as two
// processes of the stack) append the same chunks; flock keeps them apart.
func TestTwoStoresShareADirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := Open(dir, runlog.Limits{MaxBytes: 1 << 20, Segments: 64})
	require.NoError(t, err)
	b, err := Open(dir, runlog.Limits{MaxBytes: 1 << 20, Segments: 64})
	require.NoError(t, err)
	key := runlog.Key{Namespace: "p1", JobID: "j1", Epoch: 1}
	chunk := make([]byte, 999)
	for i := range chunk {
		chunk[i] = byte('a' + i%26)
	}
	done := make(chan error, 2)
	for _, s := range []*Store{a, b} {
		go func() {
			for off := int64(0); off < 50*999; off += 999 {
				if _, err := s.Append(t.Context(), key, off, chunk); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	info, err := a.Stat(t.Context(), key)
	require.NoError(t, err)
	require.EqualValues(t, 50*999, info.Size)
}
