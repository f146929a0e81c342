//go:build unix

package engine

import (
	"os"
	"path"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// giveTree is a worktree of the factory's (root's) with two directories,
// and a directory outside it holding a file, standing for /etc.
func giveTree(t *testing.T) (tree, outside string) {
	t.Helper()
	base := t.TempDir()
	tree, outside = filepath.Join(base, "wt"), filepath.Join(base, "outside")
	for _, d := range []string{"a/deep", "b/deep", "outside"} {
		require.NoError(t, os.MkdirAll(filepath.Join(base, "wt", d), 0o755))
	}
	require.NoError(t, os.Rename(filepath.Join(tree, "outside"), outside))
	for _, f := range []string{"wt/a/deep/f", "wt/b/deep/f", "wt/top", "outside/token"} {
		require.NoError(t, os.WriteFile(filepath.Join(base, f), nil, 0o644))
	}
	require.NoError(t, os.Symlink(outside, filepath.Join(tree, "link")))
	return tree, outside
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t).Uid
}

// TestGiveHandsOverTheTreeBottomUp: everything in the tree, links
// themselves included, becomes the user's, nothing a link leads to does;
// and while Give walks, every directory above what it gives is still the
// factory's, so no process of the user (another run's, with one
// FLEET_ENGINE_USER) can swap a directory still to be walked for a link.
func TestGiveHandsOverTheTreeBottomUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	t.Parallel()
	tree, outside := giveTree(t)
	var given []string
	u := &User{Name: "eng", UID: 4242, GID: 4242}
	u.gave = func(rel string) {
		given = append(given, rel)
		for dir := path.Dir(rel); ; dir = path.Dir(dir) {
			require.Equal(t, uint32(0), ownerOf(t, filepath.Join(tree, dir)), "%s is given while %s above it is the user's", rel, dir)
			if dir == "." {
				break
			}
		}
	}

	require.NoError(t, u.Give(tree))
	require.ElementsMatch(t, []string{"a", "a/deep", "a/deep/f", "b", "b/deep", "b/deep/f", "top", "link"}, given)
	for _, p := range append(given, ".") {
		require.Equal(t, uint32(4242), ownerOf(t, filepath.Join(tree, p)), p)
	}
	require.Equal(t, uint32(0), ownerOf(t, outside))
	require.Equal(t, uint32(0), ownerOf(t, filepath.Join(outside, "token")))
}

// TestGiveFollowsNoSwappedLink: a directory swapped for a link to one
// outside the tree once Give has read its parent is not followed: Give
// fails and nothing outside changes owner.
func TestGiveFollowsNoSwappedLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	t.Parallel()
	tree, outside := giveTree(t)
	u := &User{Name: "eng", UID: 4242, GID: 4242}
	swapped := false
	u.gave = func(rel string) {
		if swapped {
			return
		}
		// The first entry given: swap whichever of a and b is still to be walked.
		for _, d := range []string{"a", "b"} {
			if ownerOf(t, filepath.Join(tree, d)) == 0 && !isUnder(rel, d) {
				require.NoError(t, os.Rename(filepath.Join(tree, d), filepath.Join(tree, d+".old")))
				require.NoError(t, os.Symlink(outside, filepath.Join(tree, d)))
				swapped = true
				return
			}
		}
	}

	err := u.Give(tree)
	require.True(t, swapped)
	require.Equal(t, uint32(0), ownerOf(t, outside))
	require.Equal(t, uint32(0), ownerOf(t, filepath.Join(outside, "token")), "a file outside the tree is not given")
	require.Error(t, err)
}

// isUnder says rel is dir or below it.
func isUnder(rel, dir string) bool {
	return rel == dir || len(rel) > len(dir) && rel[:len(dir)+1] == dir+"/"
}
