package tests

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// poolEvent is one of the stack's pool launcher log lines.
type poolEvent struct {
	Msg       string `json:"msg"`
	Pool      string `json:"pool"`
	Execution int    `json:"execution"`
	ExitCode  int    `json:"exitCode"`
	Running   int    `json:"running"`
	PID       int    `json:"pid"`
}

// poolEvents are the launcher's lines for pool, in order.
func (s *Stack) poolEvents(pool string) []poolEvent {
	var out []poolEvent
	for _, line := range strings.Split(s.out.String(), "\n") {
		var e poolEvent
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Pool != pool {
			continue
		}
		if strings.HasPrefix(e.Msg, "pool execution ") {
			out = append(out, e)
		}
	}
	return out
}

// poolSpec is the "linux" elastic pool a test runs: real `factory --once`
// executions started by the local launcher, with env added to theirs.
type poolSpec struct {
	repo          *facRepo
	env           map[string]string
	capabilities  []string // enrolled, besides os:linux and repo:app
	maxExecutions int      // 0: the launcher's default
	stackEnv      []string // added to the stack's
}

// startPool writes the pool's file, starts a bus stack that launches it,
// declares product demo with repo app and enrolls the pool with its token
// where the launcher reads it.
func startPool(t *testing.T, p poolSpec) *Stack {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "linux.token")
	env := map[string]string{"FLEET_REPO_URLS": "app=" + p.repo.Origin, "FLEET_GC_INTERVAL": "0", "FLEET_KILL_GRACE": "1s"}
	maps.Copy(env, p.env)
	pool := map[string]any{"command": []string{factoryBinary(t), "--once"}, "tokenFile": tokenFile, "pollingInterval": "300ms", "env": env}
	if p.maxExecutions > 0 {
		pool["maxExecutions"] = p.maxExecutions
	}
	b, err := json.Marshal(map[string]any{"linux": pool})
	require.NoError(t, err)
	poolsFile := filepath.Join(dir, "pools.json")
	require.NoError(t, os.WriteFile(poolsFile, b, 0o644))

	s := busStack(t, append([]string{"FLEET_LOCAL_POOLS=" + poolsFile, "FLEET_LOG_LEVEL=info"}, p.stackEnv...)...)
	s.Product("demo", "app")
	r := s.Op(http.MethodPost, "/factories/enroll", "", map[string]any{
		"factoryId": "linux", "kind": "elastic", "products": []string{"demo"}, "seatLimit": 10,
		"capabilities": append([]string{"os:linux", "repo:app"}, p.capabilities...),
	})
	require.Equal(t, http.StatusCreated, r.Status, "enroll: %s", r.Body)
	require.NoError(t, os.WriteFile(tokenFile, []byte(r.Map(t)["token"].(string)), 0o600))
	return s
}

// TestElasticPoolStartsOneExecutionPerDispatch: the local stack runs an
// elastic pool as KEDA runs the Container Apps Job (real `factory --once`
// processes started from the pool subscription's depth by KEDA's default
// strategy, the only one Container Apps runs: min(depth, max) − running).
// Two long runs hold their executions, and their dispatch messages locked;
// two more dispatches then start two more executions at once (with
// complete-on-claim the depth would be 2 against 2 running: nothing would
// start until a run ends), and when all four jobs have shipped the pool is
// back at zero executions, having started exactly four.
func TestElasticPoolStartsOneExecutionPerDispatch(t *testing.T) {
	t.Parallel()
	repo := newFacRepo(t, "app")
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	eng := facEngine(t, `while [ ! -e `+gate+` ]; do sleep 0.1; done
printf 'pool %s\n' "$FLEET_JOB_ID" > result.txt`)
	s := startPool(t, poolSpec{repo: repo, capabilities: []string{"engine:fake"}, maxExecutions: 10, env: map[string]string{
		"FLEET_ENGINE_FAKE": eng, "FLEET_ONCE_WAIT": "5s", "FLEET_CHECKPOINT_INTERVAL": "1h"}})
	require.Empty(t, s.poolEvents("linux"), "an idle pool runs nothing")

	held := func(ids []string) func() bool {
		return func() bool {
			for _, id := range ids {
				j := s.Job("demo", id)
				if j["holderFactoryId"] != "linux" || j["stage"] != "building" {
					return false
				}
			}
			return true
		}
	}
	first := []string{
		s.Submit("demo", Manifest("Long one", "app", "engine:fake")),
		s.Submit("demo", Manifest("Long two", "app", "engine:fake")),
	}
	Eventually(t, 90*time.Second, "the first two jobs run in the pool", held(first))
	second := []string{
		s.Submit("demo", Manifest("Third", "app", "engine:fake")),
		s.Submit("demo", Manifest("Fourth", "app", "engine:fake")),
	}
	Eventually(t, 90*time.Second, "two more dispatches run while the first two still do", held(second))
	_, err := os.Stat(gate)
	require.ErrorIs(t, err, os.ErrNotExist, "the first runs were still going")

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	for _, id := range append(first, second...) {
		facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
		require.Equal(t, "pool "+id, repo.Show(t, "aq/job/"+id, "result.txt"))
	}
	Eventually(t, 60*time.Second, "the pool is back at zero executions", func() bool {
		ev := s.poolEvents("linux")
		return len(ev) > 0 && ev[len(ev)-1].Msg == "pool execution exited" && ev[len(ev)-1].Running == 0
	})
	var started, exited []int
	for _, e := range s.poolEvents("linux") {
		switch e.Msg {
		case "pool execution started":
			started = append(started, e.Execution)
		case "pool execution exited":
			exited = append(exited, e.Execution)
			require.Zero(t, e.ExitCode, "execution %d", e.Execution)
		}
	}
	require.Equal(t, []int{1, 2, 3, 4}, started, "one execution per dispatch, no more")
	require.ElementsMatch(t, started, exited)
}

// TestElasticPoolCrashedExecution: an execution killed mid-run leaves its
// dispatch message locked until the lock lapses. Then the message comes
// back to another execution, whose accept is refused (the job is no longer
// queued, and a redelivered dispatch is never adopted): it completes the
// message and exits cleanly. The reaper requeues the job once its lease
// expires, it is dispatched again and ships from a new execution, and the
// pool ends at zero executions with nothing left in its subscription.
func TestElasticPoolCrashedExecution(t *testing.T) {
	t.Parallel()
	repo := newFacRepo(t, "app")
	dir := t.TempDir()
	marker, enginePID := filepath.Join(dir, "first-run"), filepath.Join(dir, "engine.pid")
	// The first run records its pid and hangs (until the test kills it);
	// any later run delivers.
	eng := facEngine(t, `if [ ! -e `+marker+` ]; then touch `+marker+`; echo $$ > `+enginePID+`; exec sleep 600; fi
printf 'pool %s\n' "$FLEET_JOB_ID" > result.txt`)
	s := startPool(t, poolSpec{repo: repo, capabilities: []string{"engine:fake"},
		env:      map[string]string{"FLEET_ENGINE_FAKE": eng, "FLEET_ONCE_WAIT": "2s", "FLEET_CHECKPOINT_INTERVAL": "1h"},
		stackEnv: []string{"FLEET_LEASE_TTL=4s", "FLEET_REAPER_SCHEDULE=* * * * * *"}})

	id := s.Submit("demo", Manifest("Crashes once", "app", "engine:fake"))
	Eventually(t, 90*time.Second, "the first run's engine is up", func() bool {
		_, err := os.Stat(enginePID)
		return err == nil
	})
	first := s.Job("demo", id)
	require.Equal(t, "building", first["stage"])
	var victim poolEvent
	for _, e := range s.poolEvents("linux") {
		if e.Msg == "pool execution started" {
			victim = e
		}
	}
	require.Equal(t, 1, victim.Execution)
	require.Positive(t, victim.PID)
	// The execution dies at once (SIGKILL: no release, no completion); its
	// orphaned engine is killed too.
	require.NoError(t, syscall.Kill(victim.PID, syscall.SIGKILL))
	pidText, err := os.ReadFile(enginePID)
	require.NoError(t, err)
	enginePid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	require.NoError(t, err)
	_ = syscall.Kill(enginePid, syscall.SIGKILL)

	facWaitStage(t, s, "demo", id, "shipped", 120*time.Second)
	require.Equal(t, "pool "+id, repo.Show(t, "aq/job/"+id, "result.txt"))
	shipped := s.Job("demo", id)
	require.Greater(t, shipped["dispatchEpoch"].(float64), first["dispatchEpoch"].(float64), "dispatched again after the reaper")

	// The first dispatch's lock lapses (the stack's AckWait), the message
	// is refused by whichever execution gets it, and is completed.
	// The depth as the coordinator reports it: the broker requires the
	// coordinator's credentials to count.
	Eventually(t, 150*time.Second, "the pool is back at zero executions with an empty subscription", func() bool {
		ev := s.poolEvents("linux")
		if len(ev) == 0 || ev[len(ev)-1].Msg != "pool execution exited" || ev[len(ev)-1].Running != 0 {
			return false
		}
		n, ok := s.subscriptionDepth(t, "linux")
		return ok && n == 0
	})
	refused := 0
	for _, e := range s.poolEvents("linux") {
		if e.Msg != "pool execution exited" || e.Execution == victim.Execution {
			continue
		}
		require.Zero(t, e.ExitCode, "execution %d", e.Execution)
		log, err := os.ReadFile(filepath.Join(s.DataDir, "pools", "linux", "exec-"+strconv.Itoa(e.Execution)+".log"))
		require.NoError(t, err)
		for _, line := range strings.Split(string(log), "\n") {
			var l struct {
				Msg         string  `json:"msg"`
				Redelivered bool    `json:"redelivered"`
				Epoch       float64 `json:"dispatchEpoch"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "dispatch is stale; someone else has the job" &&
				l.Redelivered && l.Epoch == first["dispatchEpoch"].(float64) {
				refused++
			}
		}
	}
	require.Equal(t, 1, refused, "the crashed execution's dispatch came back once, to an execution that refused it")
}

// subscriptionDepth is sub's depth in /fleet/metrics (ok false while it
// is not reported).
func (s *Stack) subscriptionDepth(t *testing.T, sub string) (int64, bool) {
	t.Helper()
	var m struct {
		Adapters struct {
			Bus struct {
				SubscriptionDepth map[string]int64 `json:"subscriptionDepth"`
			} `json:"bus"`
		} `json:"adapters"`
	}
	r := s.Op(http.MethodGet, "/metrics", "", nil)
	if r.Status != http.StatusOK {
		return 0, false
	}
	r.JSON(t, &m)
	n, ok := m.Adapters.Bus.SubscriptionDepth[sub]
	return n, ok
}

// TestElasticPoolCoolsDownOnRateLimit: an elastic pool's execution sends no
// heartbeat, so the rate limit that ended its run reaches the coordinator
// with the failure itself. The pool then cools down for engine:claude: the
// job, given back with no attempt spent, is not dispatched to it again
// (which would start execution after execution against the same limit,
// none of them spending an attempt), and /explain says why.
func TestElasticPoolCoolsDownOnRateLimit(t *testing.T) {
	t.Parallel()
	repo := newFacRepo(t, "app")
	bin := filepath.Join(repoRoot, "infra/factory/internal/engine/stream/testdata/bin")
	s := startPool(t, poolSpec{repo: repo, capabilities: []string{"engine:claude"}, maxExecutions: 10, env: map[string]string{
		"FLEET_ENGINE_CLAUDE": "preset", "FLEET_DEFAULT_ENGINE": "claude",
		"PATH":              bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"CLAUDE_CONFIG_DIR": t.TempDir(), "FLEET_ONCE_WAIT": "5s"}})

	id := s.Submit("demo", "---\ntitle: limited\nrepo: app\ncapabilities: [engine:claude]\n---\nfake-scenario: rate_limit_event\n")
	Eventually(t, 90*time.Second, "the pool's execution fails the run rate_limited", func() bool {
		lf, _ := s.Job("demo", id)["lastFailure"].(map[string]any)
		return lf != nil && lf["kind"] == "rate_limited"
	})
	j := s.Job("demo", id)
	require.Equal(t, "queued", j["stage"])
	require.Equal(t, float64(0), j["attempts"], "a rate limit spends no attempt")

	cooling := factoryCooldowns(t, s, "demo")
	require.Len(t, cooling, 1)
	cd := cooling["linux"]
	require.True(t, cd["engine:claude"].After(time.Now()), "the pool cools down for engine:claude: %v", cd)
	ex := s.Op(http.MethodGet, "/jobs/"+id+"/explain", "demo", nil)
	require.Equal(t, http.StatusOK, ex.Status, "%s", ex.Body)
	require.Contains(t, string(ex.Body), "cooling down for engine:claude")

	// Without the cooldown the job is dispatched back to the pool within
	// milliseconds and a second execution starts at the next poll (300 ms).
	executions := func() (n int) {
		for _, e := range s.poolEvents("linux") {
			if e.Msg == "pool execution started" {
				n++
			}
		}
		return n
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		require.Equal(t, 1, executions(), "the job waits for the pool's cooldown; no execution after the first")
		require.Equal(t, "queued", s.Job("demo", id)["stage"])
	}
}
