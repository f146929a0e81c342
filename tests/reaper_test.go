package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReaperRequeuesExpiredLease: with a 2 s lease and a reaper every
// second, a claimed job nobody renews goes back to queued with leaseEpoch+1
// and its checkpoint, and the old holder's write is fenced.
func TestReaperRequeuesExpiredLease(t *testing.T) {
	t.Parallel()
	s := startStack(t, "FLEET_LEASE_TTL=2s", "FLEET_REAPER_SCHEDULE=* * * * * *")
	s.Product("demo", "r1")
	ft := s.Factory("f1", "demo", 1, []string{"os:linux"}, []string{"r1"})
	id := s.Submit("demo", Manifest("Crash me", "r1", "os:linux"))

	r := s.As(ft, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	epoch := int64(r.Map(t)["leaseEpoch"].(float64))
	r = s.As(ft, http.MethodPatch, "/jobs/"+id, "demo", map[string]any{"stage": "building", "leaseEpoch": epoch, "checkpoint": "aq/wip/" + id})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	var job map[string]any
	Eventually(t, 15*time.Second, "job reaped back to queued", func() bool {
		job = s.Job("demo", id)
		return job["stage"] == "queued"
	})
	require.EqualValues(t, epoch+1, job["leaseEpoch"])
	require.Equal(t, "aq/wip/"+id, job["checkpoint"])
	require.Empty(t, job["holderFactoryId"])

	r = s.As(ft, http.MethodPatch, "/jobs/"+id, "demo", map[string]any{"stage": "testing", "leaseEpoch": epoch})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Equal(t, "fenced", r.Map(t)["error"].(map[string]any)["code"])
	require.Equal(t, "queued", s.Job("demo", id)["stage"])
}

// TestFailFreesJobAtOnce: /fail releases the lease immediately; no waiting
// for the lease to expire.
func TestFailFreesJobAtOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, "FLEET_LEASE_TTL=10m")
	s.Product("demo", "r1")
	ft := s.Factory("f1", "demo", 2, []string{"os:linux"}, []string{"r1"})

	terminal := s.Submit("demo", Manifest("Fail hard", "r1", "os:linux"))
	r := s.As(ft, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	epoch := r.Map(t)["leaseEpoch"]
	r = s.As(ft, http.MethodPost, "/fail", "demo", map[string]any{"jobId": terminal, "leaseEpoch": epoch, "reason": "engine exited 1", "retryable": false})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	job := s.Job("demo", terminal)
	require.Equal(t, "failed", job["stage"])
	require.Empty(t, job["holderFactoryId"])
	require.Empty(t, job["leaseExpiresAt"])

	retry := s.Submit("demo", Manifest("Fail soft", "r1", "os:linux"))
	r = s.As(ft, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	epoch = r.Map(t)["leaseEpoch"]
	r = s.As(ft, http.MethodPost, "/fail", "demo", map[string]any{"jobId": retry, "leaseEpoch": epoch, "reason": "network blip", "retryable": true})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	job = s.Job("demo", retry)
	require.Equal(t, "queued", job["stage"])
	require.Empty(t, job["holderFactoryId"])
	require.EqualValues(t, 1, job["attempts"])
	require.NotEmpty(t, job["notBefore"], "a retryable failure backs off")
}
