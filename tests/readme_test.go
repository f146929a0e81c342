package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
)

// readmeBlock returns the first ```sh block after heading.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), heading)
	require.True(t, ok, "README has no %q", heading)
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(after)
	require.NotNil(t, m, "no sh block after %q", heading)
	return m[1]
}

// TestReadmeQuickStart runs the README's quick start as written, in a shell,
// from a directory whose .fleet is the stack's data directory — as a new
// user would paste it at the repository root while `make run` runs.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quick start needs %s, which is not on PATH", tool)
		}
	}
	work := t.TempDir()
	dataDir := filepath.Join(work, ".fleet")
	// As `make run` does: generated operator token, push dispatch on.
	s := startStack(t, "FLEET_DATA_DIR="+dataDir, "FLEET_OPERATOR_TOKEN=", "FLEET_BUS=nats")
	script := readmeBlock(t, "## The API with curl")

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "FLEET="+s.URL)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "quick start failed:\n%s", out)
	require.Contains(t, string(out), "shipped")
	require.Regexp(t, `\d+ testing -> shipped by operator`, string(out))
}

// TestReadmeDocumentsEverySetting: the configuration reference
// (docs/configuration.md, linked from the README) has a table row for every
// setting the code reads.
func TestReadmeDocumentsEverySetting(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	require.NoError(t, err)
	var missing []string
	for _, s := range config.Settings {
		if !strings.Contains(string(b), "| `"+s.Name+"` |") {
			missing = append(missing, s.Name)
		}
	}
	require.Empty(t, missing, "docs/configuration.md's tables lack these settings")
}

// TestReadmeScreenshot: the console screenshot the README shows exists
// (`make screenshot` writes it from the browser test).
func TestReadmeScreenshot(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(b), "](docs/console.png)")
	png, err := os.ReadFile(filepath.Join(repoRoot, "docs", "console.png"))
	require.NoError(t, err, "make screenshot writes docs/console.png")
	require.True(t, strings.HasPrefix(string(png), "\x89PNG"), "docs/console.png is a PNG")
}
