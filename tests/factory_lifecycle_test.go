package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFactoryHappyPath: a job runs through the real factory program and
// ships; origin's aq/job/<id> holds the engine's change, committed by the
// factory.
func TestFactoryHappyPath(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `printf '%s by %s\n' "$FLEET_JOB_ID" "$FLEET_FACTORY_ID" >> result.txt
test -f "$FLEET_JOB_PROMPT_FILE"
test -z "${FLEET_FACTORY_TOKEN:-}"
test -z "${FLEET_FACTORY_TOKEN_FILE:-}"
# Nor in the factory's own environment (the engine's parent).
! tr '\0' '\n' < /proc/$PPID/environ | grep -q '^FLEET_FACTORY_TOKEN='`)
	startFactory(t, s, "fa", "demo", 1, repo, eng)

	id := s.Submit("demo", Manifest("Say hello", "app", "engine:fake"))
	job := facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
	require.Equal(t, "aq/job/"+id, job["checkpoint"])
	require.Empty(t, job["holderFactoryId"])
	require.Equal(t, id+" by fa", repo.Show(t, "aq/job/"+id, "result.txt"))
	require.Equal(t, "# app", repo.Show(t, "aq/job/"+id, "README.md"))
}

// TestFactoryEngineFailure: an engine that exits non-zero fails the job
// at once through /fail: the lease is free long before its 1 m TTL. Its
// coloured output is quoted as plain text, never a reason to refuse the
// report.
func TestFactoryEngineFailure(t *testing.T) {
	t.Parallel()
	s := startStack(t, "FLEET_LEASE_TTL=1m")
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `echo half-done > partial.txt
printf '\033[1;31mthe model gave up\033[0m\r\n' >&2
exit 3`)
	startFactory(t, s, "fa", "demo", 1, repo, eng)

	id := s.Submit("demo", Manifest("Fail", "app", "engine:fake"))
	start := time.Now()
	job := facWaitStage(t, s, "demo", id, "failed", 30*time.Second)
	require.Less(t, time.Since(start), 30*time.Second)
	require.Empty(t, job["holderFactoryId"], "the lease is released with the failure")
	require.Empty(t, job["leaseExpiresAt"])
	failure := job["lastFailure"].(map[string]any)
	require.Contains(t, failure["reason"], "crash: engine fake exited 3")
	require.Contains(t, failure["reason"], "the model gave up")
	require.NotContains(t, failure["reason"], "\x1b")
	require.Equal(t, false, failure["retryable"])
	// The partial work is kept as a checkpoint, never as a result.
	require.Empty(t, repo.Ref(t, "aq/job/"+id))
	require.Equal(t, "half-done", repo.Show(t, "aq/wip/"+id, "partial.txt"))
}

// TestFactoryWallBudget: an engine that outlives the job's wall budget is
// killed with its whole process group (a background child included), and
// the job fails with budget_exceeded.
func TestFactoryWallBudget(t *testing.T) {
	t.Parallel()
	s := startStack(t, "FLEET_LEASE_TTL=1m")
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	pids := t.TempDir()
	eng := facEngine(t, `sleep 300 &
echo $! > "$TEST_PIDS/child"
echo $$ > "$TEST_PIDS/engine"
wait`)
	startFactory(t, s, "fa", "demo", 1, repo, eng, "TEST_PIDS="+pids)

	id := s.Submit("demo", "---\ntitle: Too slow\nrepo: app\ncapabilities: [engine:fake]\nbudget: {wall: 2s}\n---\nTake forever.\n")
	job := facWaitStage(t, s, "demo", id, "failed", 30*time.Second)
	failure := job["lastFailure"].(map[string]any)
	require.Contains(t, failure["reason"], "budget_exceeded")
	require.Equal(t, false, failure["retryable"])
	require.Empty(t, job["holderFactoryId"])
	for _, name := range []string{"engine", "child"} {
		pid := facReadPID(t, filepath.Join(pids, name))
		Eventually(t, 5*time.Second, name+" process is gone", func() bool { return !facAlive(pid) })
	}
}

func facReadPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// facAlive reports whether pid is a running process (a zombie nobody reaped
// yet counts as gone: it runs nothing).
func facAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err)
	}
	// Field 3, after the parenthesised command name, is the state.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}
