package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLifecycleOverHTTP drives one job submit -> claim -> building ->
// testing -> ship through the real binaries.
func TestLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "hello-world")
	ft := s.Factory("f1", "demo", 2, []string{"os:linux", "engine:claude"}, []string{"hello-world"})

	id := s.Submit("demo", Manifest("Say hello", "hello-world", "os:linux", "engine:claude"))
	require.Equal(t, "queued", s.Job("demo", id)["stage"])

	r := s.As(ft, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "claim: %s", r.Body)
	var claim struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
		LeaseEpoch int64 `json:"leaseEpoch"`
	}
	r.JSON(t, &claim)
	require.Equal(t, id, claim.Job.ID)
	require.EqualValues(t, 1, claim.LeaseEpoch)
	require.Equal(t, "assigned", s.Job("demo", id)["stage"])
	require.Equal(t, "f1", s.Job("demo", id)["holderFactoryId"])

	// Nothing else to claim.
	require.Equal(t, http.StatusNoContent, s.As(ft, http.MethodPost, "/claim", "", nil).Status)

	for _, stage := range []string{"building", "testing"} {
		r = s.As(ft, http.MethodPatch, "/jobs/"+id, "demo", map[string]any{"stage": stage, "leaseEpoch": claim.LeaseEpoch})
		require.Equal(t, http.StatusOK, r.Status, "patch %s: %s", stage, r.Body)
		require.Equal(t, stage, r.Map(t)["stage"])
	}
	// Testing released the lease: the factory can no longer write.
	r = s.As(ft, http.MethodPatch, "/jobs/"+id, "demo", map[string]any{"stage": "building", "leaseEpoch": claim.LeaseEpoch})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)

	r = s.Op(http.MethodPost, "/jobs/"+id+"/actions/ship", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "ship: %s", r.Body)
	job := s.Job("demo", id)
	require.Equal(t, "shipped", job["stage"])
	require.Empty(t, job["holderFactoryId"])
}

// TestStatePersistsAcrossRestart: a stopped and restarted stack on the same
// data directory still has its products and jobs.
func TestStatePersistsAcrossRestart(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "r1")
	id := s.Submit("demo", Manifest("Persist", "r1", "os:linux"))
	s.stop()

	s2 := startStack(t, "FLEET_DATA_DIR="+s.DataDir, "FLEET_OPERATOR_TOKEN="+s.Token)
	require.Equal(t, "queued", s2.Job("demo", id)["stage"])
}

// TestHostStatus: the emulator reports the handler, every function of the
// app and the dispatch feed's progress, as the Functions host's status
// endpoint does.
func TestHostStatus(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "r1")
	s.Submit("demo", Manifest("Feed me", "r1", "os:linux"))
	var st struct {
		State     string   `json:"state"`
		Functions []string `json:"functions"`
		Handler   struct {
			PID int `json:"pid"`
		} `json:"handler"`
		Feeds map[string]struct {
			Container string `json:"container"`
			Documents int64  `json:"documents"`
		} `json:"feeds"`
		Store struct {
			FeedReads int64 `json:"feedReads"`
		} `json:"store"`
	}
	Eventually(t, 10*time.Second, "the dispatch feed saw the job", func() bool {
		r := Call(t, http.MethodGet, s.URL+"/admin/host/status", "", nil)
		require.Equal(t, http.StatusOK, r.Status)
		r.JSON(t, &st)
		return st.Feeds["dispatch"].Documents >= 1
	})
	require.Equal(t, "Running", st.State)
	require.ElementsMatch(t, []string{"api", "dispatch", "echo", "echosweep", "forgesweep", "gcsweep", "prune", "reaper", "redispatch"}, st.Functions)
	require.Positive(t, st.Handler.PID)
	require.Equal(t, "fleet_jobs", st.Feeds["dispatch"].Container)
	require.Positive(t, st.Store.FeedReads)
}
