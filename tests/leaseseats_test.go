package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLeasesFillSeatsWithoutHeartbeat (issue 29), driven over HTTP as a
// factory would: the one-seat factory fp claims a low job and moves it to
// building, and sends no heartbeat after the claim (it last reported load
// 0). A critical job needing the same capability is not dispatched to fp:
// /explain shows fp not eligible, "no free seat (leases 1, reported 0 of
// 1)", and fp's next renewal, well within the renewal interval (a third of
// the 5 min lease), tells it to stop for the preemption.
func TestLeasesFillSeatsWithoutHeartbeat(t *testing.T) {
	t.Parallel()
	s := busStack(t)
	s.Product("demo", "app")
	caps := []string{"os:linux"}
	fp := s.Factory("fp", "demo", 1, caps, []string{"app"})

	low := s.Submit("demo", "---\ntitle: Low\nrepo: app\ncapabilities: [os:linux]\npriority: low\n---\nslow")
	claimed, epoch := s.Claim(fp)
	require.Equal(t, low, claimed)
	r := s.As(fp, http.MethodPatch, "/jobs/"+low, "", map[string]any{"stage": "building", "leaseEpoch": epoch})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	crit := s.Submit("demo", "---\ntitle: Hotfix\nrepo: app\ncapabilities: [os:linux]\npriority: critical\n---\nnow")
	var fpEntry map[string]any
	Eventually(t, 10*time.Second, "/explain to show the critical job's dispatch decision", func() bool {
		r := s.Op(http.MethodGet, "/jobs/"+crit+"/explain", "demo", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		ex := r.Map(t)
		require.Empty(t, ex["targetFactoryId"], "the critical job was dispatched to fp, which has no free seat: %s", r.Body)
		fpEntry = ex["schedule"].(map[string]any)["candidates"].([]any)[0].(map[string]any)
		d, _ := ex["dispatch"].(map[string]any)
		return d["unroutable"] != nil
	})
	require.Equal(t, "fp", fpEntry["factoryId"])
	require.Equal(t, false, fpEntry["eligible"])
	require.Equal(t, "no free seat (leases 1, reported 0 of 1)", fpEntry["reason"])
	require.EqualValues(t, 1, fpEntry["leases"])
	require.EqualValues(t, 0, fpEntry["reported"])

	Eventually(t, 10*time.Second, "fp's renewal to ask for the preemption", func() bool {
		r := s.As(fp, http.MethodPost, "/jobs/"+low+"/lease/renew", "", map[string]any{"leaseEpoch": epoch})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		return r.Map(t)["preemptRequested"] == true
	})
	require.Equal(t, true, s.Job("demo", low)["preemptRequested"])
}
