package tests

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDrainFactory: an operator drains a factory on the real stack. It
// claims nothing new (/explain says "factory is draining"), keeps renewing
// and moving the job it holds, shows draining in GET /fleet/factories and
// in `fleetctl factories ls`; another factory takes the new job; undrained,
// it claims again. A factory token may not drain.
func TestDrainFactory(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "app")
	caps := []string{"os:linux"}
	fa := s.Factory("fa", "demo", 2, caps, []string{"app"})
	held := s.Submit("demo", Manifest("Held", "app", "os:linux"))
	r := s.As(fa, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var cl struct {
		Job        map[string]any `json:"job"`
		LeaseEpoch int64          `json:"leaseEpoch"`
	}
	r.JSON(t, &cl)
	require.Equal(t, held, cl.Job["id"])

	require.Equal(t, http.StatusForbidden, s.As(fa, http.MethodPost, "/factories/fa/drain", "", nil).Status, "a factory cannot drain")
	r = s.Op(http.MethodPost, "/factories/fa/drain", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, true, r.Map(t)["draining"])
	require.Equal(t, http.StatusNotFound, s.Op(http.MethodPost, "/factories/nope/drain", "", nil).Status)

	waiting := s.Submit("demo", Manifest("Waiting", "app", "os:linux"))
	require.Equal(t, http.StatusNoContent, s.As(fa, http.MethodPost, "/claim", "", nil).Status, "a draining factory claims nothing new")
	r = s.Op(http.MethodGet, "/jobs/"+waiting+"/explain", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	sched := r.Map(t)["schedule"].(map[string]any)
	require.Equal(t, "no eligible factory: 1 is draining", sched["reason"])
	require.Equal(t, "factory is draining", sched["candidates"].([]any)[0].(map[string]any)["reason"])

	// What it holds, it keeps.
	lease := map[string]any{"leaseEpoch": cl.LeaseEpoch}
	require.Equal(t, http.StatusOK, s.As(fa, http.MethodPost, "/jobs/"+held+"/lease/renew", "", lease).Status)
	r = s.As(fa, http.MethodPatch, "/jobs/"+held, "", map[string]any{"stage": "building", "leaseEpoch": cl.LeaseEpoch})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	r = s.Op(http.MethodGet, "/factories", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"draining":true`)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(s.Token+"\n"), 0o600))
	out, err := exec.Command(fleetctlBinary(t), "--url", s.URL, "--token-file", tokenFile, "-p", "demo", "factories", "ls").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `(?m)^fa\s+static\s+ok,draining\s`, string(out))

	fb := s.Factory("fb", "demo", 1, caps, []string{"app"})
	r = s.As(fb, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), waiting)

	r = s.Op(http.MethodPost, "/factories/fa/undrain", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Nil(t, r.Map(t)["draining"])
	next := s.Submit("demo", Manifest("Next", "app", "os:linux"))
	r = s.As(fa, http.MethodPost, "/claim", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "undrained, it claims again: %s", r.Body)
	require.Contains(t, string(r.Body), next)
}
