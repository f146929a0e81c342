package app

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLocalOperatorToken: generated once, kept, the same for processes
// racing to create it, and an empty file is an error naming it rather than
// a token.
func TestLocalOperatorToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	toks := make([]string, 16)
	for i := range toks {
		wg.Go(func() {
			tok, err := LocalOperatorToken(dir)
			require.NoError(t, err)
			toks[i] = tok
		})
	}
	wg.Wait()
	for _, tok := range toks {
		require.Equal(t, toks[0], tok, "racing starts agree on one token")
	}
	require.Regexp(t, `^fop_[A-Za-z0-9_-]{43}$`, toks[0])
	again, err := LocalOperatorToken(dir)
	require.NoError(t, err)
	require.Equal(t, toks[0], again, "kept across restarts")
	fi, err := os.Stat(filepath.Join(dir, OperatorTokenFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	left, err := filepath.Glob(filepath.Join(dir, OperatorTokenFile+".*"))
	require.NoError(t, err)
	require.Empty(t, left, "no temporary files left behind")

	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(empty, OperatorTokenFile), nil, 0o600))
	_, err = LocalOperatorToken(empty)
	require.ErrorContains(t, err, filepath.Join(empty, OperatorTokenFile))
}
