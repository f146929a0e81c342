package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

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

// readmeMaxLines keeps README.md a front page; the manual is in docs/.
const readmeMaxLines = 250

// TestReadmeIsAFrontPage: README.md stays under readmeMaxLines lines.
func TestReadmeIsAFrontPage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	lines := strings.Count(string(b), "\n")
	require.Less(t, lines, readmeMaxLines, "README.md has %d lines: move detail into docs/", lines)
}

// TestDocsLinksResolve: every relative link in the repository's Markdown
// (README.md, docs/*.md, the component READMEs) names a file that exists
// and, with a #fragment into Markdown, a heading that file has.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	files := markdownFiles(t)
	require.Contains(t, files, "README.md")
	require.Contains(t, files, filepath.Join("docs", "configuration.md"))
	var broken []string
	for _, file := range files {
		text := readRepoFile(t, file)
		for _, target := range markdownLinks(text) {
			if problem := checkLink(t, file, target); problem != "" {
				broken = append(broken, fmt.Sprintf("%s: (%s) %s", file, target, problem))
			}
		}
	}
	require.Empty(t, broken, "broken relative links")
}

// markdownFiles lists the repository's Markdown files, relative to its
// root, leaving out hidden directories (.git, .fleet, .fleet-demo) and
// what tests or builds leave behind.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	require.NoError(t, err)
	return string(b)
}

var (
	mdFence    = regexp.MustCompile("(?ms)^ *```.*?^ *```")
	mdCodeSpan = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdHeading  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	mdScheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownProse is text without its code blocks and code spans, where a
// "](" or a "# " means nothing.
func markdownProse(text string) string {
	return mdCodeSpan.ReplaceAllString(mdFence.ReplaceAllString(text, ""), "")
}

// markdownLinks returns the targets of the inline links and images in text
// that name no scheme (http:, mailto:...): the ones this repository must
// resolve.
func markdownLinks(text string) []string {
	var targets []string
	for _, m := range mdLink.FindAllStringSubmatch(markdownProse(text), -1) {
		if !mdScheme.MatchString(m[1]) {
			targets = append(targets, m[1])
		}
	}
	return targets
}

// checkLink says what is wrong with target, a link in the Markdown file
// from (relative to the root), or "" when it resolves.
func checkLink(t *testing.T, from, target string) string {
	t.Helper()
	path, fragment, _ := strings.Cut(target, "#")
	file := from
	if path != "" {
		file = filepath.Join(filepath.Dir(from), filepath.FromSlash(path))
		if _, err := os.Stat(filepath.Join(repoRoot, file)); err != nil {
			return "no such file"
		}
	}
	if fragment == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	if !slices.Contains(markdownAnchors(readRepoFile(t, file)), fragment) {
		return "no heading with anchor #" + fragment + " in " + file
	}
	return ""
}

// markdownAnchors returns the anchors GitHub gives text's headings: lower
// case, punctuation dropped, spaces as hyphens, and -1, -2... on repeats.
func markdownAnchors(text string) []string {
	seen := map[string]int{}
	var anchors []string
	for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(text, ""), -1) {
		var slug strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		anchor := slug.String()
		if n := seen[anchor]; n > 0 {
			anchor = fmt.Sprintf("%s-%d", anchor, n)
		}
		seen[slug.String()]++
		anchors = append(anchors, anchor)
	}
	return anchors
}
