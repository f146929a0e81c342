package tests

import (
	"archive/zip"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPackageZipLayout runs `make package` and opens the zip: host.json,
// the handler (a linux/amd64 executable, executable bit set) and one folder
// per function with its function.json, all at the root, nothing else.
func TestPackageZipLayout(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not on PATH")
	}
	dist := t.TempDir()
	cmd := exec.Command("make", "package", "DIST="+dist)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make package:\n%s", out)

	zr, err := zip.OpenReader(filepath.Join(dist, "fleet-functions.zip"))
	require.NoError(t, err)
	defer zr.Close()

	folders, err := filepath.Glob(filepath.Join(repoRoot, "functions", "*", "function.json"))
	require.NoError(t, err)
	want := []string{"handler", "host.json"}
	for _, f := range folders {
		want = append(want, filepath.Base(filepath.Dir(f))+"/function.json")
	}
	sort.Strings(want)
	var got []string
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		got = append(got, f.Name)
		files[f.Name] = f
	}
	sort.Strings(got)
	require.Equal(t, want, got)
	var names []string
	for _, f := range folders {
		names = append(names, filepath.Base(filepath.Dir(f)))
	}
	require.ElementsMatch(t, []string{"api", "dispatch", "echo", "echosweep", "forgesweep", "gcsweep", "prune", "reaper", "redispatch"}, names, "the app's functions")

	for _, f := range folders {
		name := filepath.Base(filepath.Dir(f)) + "/function.json"
		disk, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Equal(t, disk, read(t, files[name]), "%s matches the repository", name)
	}
	hostJSON, err := os.ReadFile(filepath.Join(repoRoot, "host.json"))
	require.NoError(t, err)
	require.Equal(t, hostJSON, read(t, files["host.json"]))

	h := files["handler"]
	require.NotZero(t, h.Mode()&0o111, "the handler keeps its executable bit (the app runs from the package)")
	exe, err := elf.NewFile(bytes.NewReader(read(t, h)))
	require.NoError(t, err, "the handler is an ELF binary")
	require.Equal(t, elf.EM_X86_64, exe.Machine)
}

func read(t *testing.T, f *zip.File) []byte {
	t.Helper()
	rc, err := f.Open()
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}
