package tests

import (
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

// stopEngineBody is a fake engine that writes some work, records its pid
// (it leads the engine's process group), starts a child, says it is up
// and then waits forever: only a stop ends it.
func stopEngineBody(dir string) string {
	return `echo "work in progress" > wip.txt
echo $$ > ` + filepath.Join(dir, "pid-$FLEET_JOB_ID") + `
sleep 600 &
touch ` + filepath.Join(dir, "up-$FLEET_JOB_ID") + `
wait`
}

// waitEngineUp waits until job id's engine is running and returns its
// process group.
func waitEngineUp(t *testing.T, dir, id string) int {
	t.Helper()
	Eventually(t, 60*time.Second, "engine of "+id+" up", func() bool {
		_, err := os.Stat(filepath.Join(dir, "up-"+id))
		return err == nil
	})
	b, err := os.ReadFile(filepath.Join(dir, "pid-"+id))
	require.NoError(t, err)
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	return pgid
}

// liveGroup lists the processes of group pgid that are not zombies (a
// killed child reparented to a pid 1 that does not reap stays a zombie,
// which runs nothing).
func liveGroup(t *testing.T, pgid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var live []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			live = append(live, p)
		}
	}
	return live
}

func eventTypesOf(t *testing.T, s *Stack, product, id string) []string {
	t.Helper()
	var page struct {
		Items []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"items"`
	}
	r := s.Op(http.MethodGet, "/jobs/"+id+"/events", product, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &page)
	out := make([]string, len(page.Items))
	for i, ev := range page.Items {
		out[i] = ev.Type
	}
	return out
}

// cancelRunning submits a job, waits for its engine, cancels it and
// returns the job id, the engine's process group and the time from the
// cancel request to the job being cancelled (the factory's acknowledgement).
func cancelRunning(t *testing.T, s *Stack, dir string) (id string, pgid int, ack time.Duration) {
	t.Helper()
	id = s.Submit("demo", Manifest("Cancel me", "app", "engine:fake"))
	pgid = waitEngineUp(t, dir, id)
	start := time.Now()
	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/cancel", "demo", map[string]string{"reason": "not needed"})
	require.Equal(t, http.StatusAccepted, r.Status, "cancel of a leased job is a request: %s", string(r.Body))
	require.Equal(t, true, r.Map(t)["cancelRequested"])
	for facStage(t, s, "demo", id) != "cancelled" {
		require.Less(t, time.Since(start), 60*time.Second, "job %s never cancelled", id)
		time.Sleep(10 * time.Millisecond)
	}
	return id, pgid, time.Since(start)
}

// TestFactoryCancelAcknowledged: cancel of a running job is acknowledged by
// the real factory program: its engine's process group is gone, the work so
// far is on aq/wip/<id> and the job ends cancelled with the event saying it
// was acknowledged. On NATS the command arrives as a control message and
// the acknowledgement comes within 2 s; a poll factory hears of it at its
// next renewal. Both times are logged.
func TestFactoryCancelAcknowledged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		bus    bool
		env    []string
		within time.Duration
	}{
		// A renewal cadence far longer than the bound: only the control
		// message can make it.
		{"nats", true, []string{"FLEET_TRANSPORT=nats", "FLEET_RENEW_INTERVAL=1m"}, 2 * time.Second},
		{"poll", false, []string{"FLEET_RENEW_INTERVAL=1s"}, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s *Stack
			env := tc.env
			if tc.bus {
				s = busStack(t)
				env = append(env, "FLEET_NATS_URL="+s.NATS)
			} else {
				s = startStack(t)
			}
			repo := newFacRepo(t, "app")
			s.Product("demo", "app")
			dir := t.TempDir()
			startFactory(t, s, "fa", "demo", 1, repo, facEngine(t, stopEngineBody(dir)), env...)

			id, pgid, ack := cancelRunning(t, s, dir)
			t.Logf("cancel -> acknowledged (%s transport): %s", tc.name, ack.Round(time.Millisecond))
			require.Less(t, ack, tc.within, "cancel acknowledged on %s", tc.name)

			require.Empty(t, liveGroup(t, pgid), "the engine's process group is gone")
			require.Equal(t, "work in progress", repo.Show(t, "aq/wip/"+id, "wip.txt"), "the WIP was pushed")
			job := s.Job("demo", id)
			require.Equal(t, "aq/wip/"+id, job["checkpoint"])
			require.Contains(t, eventTypesOf(t, s, "demo", id), "cancel_acknowledged")
			require.NotContains(t, eventTypesOf(t, s, "demo", id), "cancel_forced")
		})
	}
}

// TestFactoryCancelForced: a factory that cannot answer (SIGSTOPped) has its
// cancel forced once the grace is over: the lease is revoked (epoch+1),
// the job is cancelled and the event says it was forced.
func TestFactoryCancelForced(t *testing.T) {
	t.Parallel()
	s := busStack(t, "FLEET_CANCEL_GRACE=2s", "FLEET_REAPER_SCHEDULE=* * * * * *")
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	dir := t.TempDir()
	f := startFactory(t, s, "fa", "demo", 1, repo, facEngine(t, stopEngineBody(dir)),
		"FLEET_TRANSPORT=nats", "FLEET_NATS_URL="+s.NATS)

	id := s.Submit("demo", Manifest("Cancel me", "app", "engine:fake"))
	waitEngineUp(t, dir, id)
	epoch := s.Job("demo", id)["leaseEpoch"].(float64)
	f.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = f.cmd.Process.Signal(syscall.SIGCONT) })

	start := time.Now()
	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/cancel", "demo", nil)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	job := facWaitStage(t, s, "demo", id, "cancelled", 30*time.Second)
	t.Logf("cancel -> forced: %s", time.Since(start).Round(time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "not before the grace")
	require.Equal(t, epoch+1, job["leaseEpoch"], "the lease was revoked")
	types := eventTypesOf(t, s, "demo", id)
	require.Contains(t, types, "cancel_forced")
	require.NotContains(t, types, "cancel_acknowledged")

	// Woken up, the factory finds itself fenced and ships nothing.
	f.Signal(syscall.SIGCONT)
	Eventually(t, 30*time.Second, "the woken factory to give up the run", func() bool {
		return strings.Contains(f.Output(), "lease lost") || strings.Contains(f.Output(), "fenced")
	})
	require.Equal(t, "cancelled", facStage(t, s, "demo", id))
	require.Empty(t, repo.Ref(t, "aq/job/"+id), "nothing was delivered")
}
