package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFactoryPreemption: on a full fleet (one factory, one seat, on NATS) a
// critical job preempts the running low job: the factory stops its engine,
// pushes its work to aq/wip/<id> and releases it as preempted; the critical
// job takes the seat and ships; the low job then resumes from its
// checkpoint and ships, its attempts unspent. Events link the two.
func TestFactoryPreemption(t *testing.T) {
	t.Parallel()
	s := busStack(t, "FLEET_REDISPATCH_SCHEDULE=* * * * * *", "FLEET_REDISPATCH_AFTER=2s")
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	dir := t.TempDir()
	// The low job's first run leaves work in progress and hangs; resumed
	// (its checkpoint has wip.txt), it finishes. The critical job just
	// writes its result.
	eng := facEngine(t, `if [ "$FLEET_JOB_PRIORITY" = critical ]; then echo fixed > hotfix.txt; exit 0; fi
if [ -f wip.txt ]; then echo "resumed at attempt $FLEET_JOB_ATTEMPT" >> wip.txt; exit 0; fi
`+stopEngineBody(dir))
	startFactory(t, s, "fa", "demo", 1, repo, eng, "FLEET_TRANSPORT=nats", "FLEET_NATS_URL="+s.NATS)

	low := s.Submit("demo", "---\ntitle: Low work\nrepo: app\ncapabilities: [engine:fake]\npriority: low\n---\nslow")
	waitEngineUp(t, dir, low)
	Eventually(t, 30*time.Second, "the factory to report its seat taken", func() bool {
		var fs struct {
			Items []struct {
				ID   string `json:"id"`
				Load int    `json:"load"`
			} `json:"items"`
		}
		r := s.Op(http.MethodGet, "/factories", "demo", nil)
		r.JSON(t, &fs)
		return len(fs.Items) == 1 && fs.Items[0].Load == 1
	})

	crit := s.Submit("demo", "---\ntitle: Hotfix\nrepo: app\ncapabilities: [engine:fake]\npriority: critical\n---\nnow")
	facWaitStage(t, s, "demo", crit, "shipped", 60*time.Second)
	require.Equal(t, "fixed", repo.Show(t, "aq/job/"+crit, "hotfix.txt"))
	require.Contains(t, eventTypesOf(t, s, "demo", crit), "preempted")

	job := facWaitStage(t, s, "demo", low, "shipped", 90*time.Second)
	require.EqualValues(t, 0, job["attempts"], "the preempted run spent no attempt")
	require.Equal(t, "work in progress\nresumed at attempt 1", repo.Show(t, "aq/job/"+low, "wip.txt"),
		"resumed from its aq/wip checkpoint")
	types := eventTypesOf(t, s, "demo", low)
	require.Contains(t, types, "preempted_by")
	require.Contains(t, types, "preempt_acknowledged")
	require.NotContains(t, types, "preempt_forced")
	_, err := os.Stat(filepath.Join(dir, "up-"+crit))
	require.True(t, os.IsNotExist(err), "the critical job never ran the slow path")
}
