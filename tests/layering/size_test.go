package layering

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxPackageLines bounds a package's non-test Go lines: past it a package
// holds more than one room's use cases (issue 24 split shared/coord at
// 8.6k lines into the lifecycle and the packages behind its façade).
const maxPackageLines = 3000

// TestNoPackageOutgrowsARoom counts the non-test lines of coord and the
// packages behind its façade.
func TestNoPackageOutgrowsARoom(t *testing.T) {
	t.Parallel()
	lines := map[string]int{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines[filepath.Dir(path)] += bytes.Count(b, []byte("\n"))
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, lines[filepath.Join("../..", "shared", "coord")], "the walk reached shared/coord")
	for dir, n := range lines {
		if !strings.Contains(dir, "shared/coord") {
			continue
		}
		require.LessOrEqual(t, n, maxPackageLines, "%s has %d non-test lines", strings.TrimPrefix(dir, "../../"), n)
	}
}
