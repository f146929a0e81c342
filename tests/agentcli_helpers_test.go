package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/tests/internal/messagesapi"
	"github.com/gigafactory/fleet/tests/internal/responsesapi"
)

// The real coding-agent CLIs, installed by `make agent-clis` (pinned, from
// npm) into $AGENT_CLIS_DIR or ~/.cache/fleet-agent-clis. Without them the
// tests that need them skip, except under CI=true, where they fail.

// agentCLI returns the path of the real CLI name ("claude", "codex").
func agentCLI(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("AGENT_CLIS_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		require.NoError(t, err)
		dir = filepath.Join(home, ".cache", "fleet-agent-clis")
	}
	bin := filepath.Join(dir, "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the real %s CLI is not installed at %s (make agent-clis): %v", name, bin, err)
		}
		t.Skipf("the real %s CLI is not installed (make agent-clis)", name)
	}
	return bin
}

// claudeEnv is the environment that keeps the real Claude Code CLI on
// loopback: the scripted API, no updater, no other traffic, a home of its
// own (its sessions live under $HOME/.claude), and one retry of a failed
// API call instead of ten with growing waits.
func claudeEnv(api *messagesapi.Server, home string) []string {
	return append(os.Environ(), "ANTHROPIC_BASE_URL="+api.URL, "ANTHROPIC_API_KEY=sk-ant-test-0000",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_MAX_RETRIES=1", "HOME="+home)
}

// startMessagesAPI serves script until the test ends.
func startMessagesAPI(t *testing.T, script messagesapi.Script) *messagesapi.Server {
	t.Helper()
	api, err := messagesapi.Start(script)
	require.NoError(t, err)
	t.Cleanup(func() { _ = api.Close() })
	return api
}

// streamLines decodes stream-json output, one object per line.
func streamLines(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "a stream-json line: %s", sc.Bytes())
		lines = append(lines, m)
	}
	require.NoError(t, sc.Err())
	return lines
}

// lineOf returns the first line of type typ (and subtype, when given).
func lineOf(lines []map[string]any, typ, subtype string) map[string]any {
	for _, l := range lines {
		if l["type"] == typ && (subtype == "" || l["subtype"] == subtype) {
			return l
		}
	}
	return nil
}

// runClaude runs the real CLI in dir with args after the headless flags
// the claude preset uses, and returns its stdout and exit code.
func runClaude(t *testing.T, bin, dir string, env []string, args ...string) ([]byte, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	return runCLI(t, cmd)
}

// runCLI runs a real CLI and returns its stdout (recorded) and exit code;
// a CLI that could not be run at all fails the test with its stderr.
func runCLI(t *testing.T, cmd *exec.Cmd) ([]byte, int) {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, "stderr: %s", stderr.String())
	}
	record(t, out)
	return out, code
}

// record keeps a real CLI's output under $FLEET_RECORD_AGENT_STREAMS, one
// file per test, to refresh the engine parsers' recorded fixtures.
func record(t *testing.T, out []byte) {
	dir := os.Getenv("FLEET_RECORD_AGENT_STREAMS")
	if dir == "" {
		return
	}
	name := strings.NewReplacer("/", "--", " ", "-").Replace(t.Name())
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".jsonl"), out, 0o644))
}

// startResponsesAPI serves script until the test ends.
func startResponsesAPI(t *testing.T, script responsesapi.Script) *responsesapi.Server {
	t.Helper()
	api, err := responsesapi.Start(script)
	require.NoError(t, err)
	t.Cleanup(func() { _ = api.Close() })
	return api
}
