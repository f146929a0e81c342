package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// putProfile stores a new version of profile name in product and returns
// its version number.
func putProfile(t *testing.T, s *Stack, product, name, doc string) int {
	t.Helper()
	r := s.Op(http.MethodPut, "/profiles/"+name, product, doc)
	require.Equal(t, http.StatusCreated, r.Status, "put profile: %s", r.Body)
	return int(r.Map(t)["version"].(float64))
}

// personaEngine is a fake engine that checks what it was handed of the
// persona: the @persona-file argument and $FLEET_JOB_PERSONA_FILE name the
// same file, outside the worktree; it commits a copy of the instructions
// and the version so the test can read what the engine saw.
const personaEngine = `test "$1" = "$FLEET_JOB_PERSONA_FILE"
test -f "$1"
case "$(realpath "$1")" in "$(realpath "$PWD")"/*) echo "persona file inside the worktree" >&2; exit 1;; esac
cp "$1" persona-seen.txt
printf '%s v%s\n' "$FLEET_JOB_PROFILE" "$FLEET_JOB_PROFILE_VERSION" > profile-seen.txt`

// TestProfileSnapshotReachesEngine: put v1, submit a job, put v2: the job
// still carries v1 and its engine receives v1's instructions; a job
// submitted after v2 gets v2's. An unknown persona is 400 naming persona.
func TestProfileSnapshotReachesEngine(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")

	r := s.Op(http.MethodPost, "/jobs", "demo", "---\nrepo: app\ntitle: x\npersona: nobody\n---\nDo it.\n")
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "persona", r.Map(t)["error"].(map[string]any)["field"])

	require.Equal(t, 1, putProfile(t, s, "demo", "backend", "---\nbudget: {wall: 10m}\n---\nPersona v1: be careful.\n"))
	first := s.Submit("demo", "---\nrepo: app\ntitle: first\ncapabilities: [engine:fake]\npersona: backend\n---\nDo the first.\n")
	require.Equal(t, 2, putProfile(t, s, "demo", "backend", "---\n---\nPersona v2: be bold.\n"))
	second := s.Submit("demo", "---\nrepo: app\ntitle: second\ncapabilities: [engine:fake]\npersona: backend\n---\nDo the second.\n")

	job := s.Job("demo", first)
	require.Equal(t, map[string]any{"name": "backend", "version": float64(1), "capabilities": []any{}, "body": "Persona v1: be careful.\n"}, job["profile"])
	require.Equal(t, "10m0s", job["budget"].(map[string]any)["wall"], "the profile's budget where the manifest is silent")

	// The factory starts only now: the engine runs after v2 exists.
	startFactory(t, s, "fa", "demo", 2, repo, facEngine(t, personaEngine)+" @persona-file")
	facWaitStage(t, s, "demo", first, "shipped", 60*time.Second)
	facWaitStage(t, s, "demo", second, "shipped", 60*time.Second)
	require.Equal(t, "Persona v1: be careful.", repo.Show(t, "aq/job/"+first, "persona-seen.txt"))
	require.Equal(t, "backend v1", repo.Show(t, "aq/job/"+first, "profile-seen.txt"))
	require.Equal(t, "Persona v2: be bold.", repo.Show(t, "aq/job/"+second, "persona-seen.txt"))
	require.Equal(t, "backend v2", repo.Show(t, "aq/job/"+second, "profile-seen.txt"))
	require.Equal(t, float64(1), s.Job("demo", first)["profile"].(map[string]any)["version"])
}

// TestProfileCapabilityRoutes: a profile requiring gpu:a100 makes its job
// unroutable with that reason, /explain naming the profile as its source,
// until a factory advertising gpu:a100 joins and runs it.
func TestProfileCapabilityRoutes(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `echo done > gpu.txt`)
	startFactory(t, s, "cpu", "demo", 1, repo, eng)
	putProfile(t, s, "demo", "trainer", "---\ncapabilities: [gpu:a100]\n---\nTrain it.\n")
	id := s.Submit("demo", "---\nrepo: app\ntitle: train\ncapabilities: [engine:fake]\npersona: trainer\n---\nTrain the model.\n")

	var explain struct {
		Profile struct {
			Name         string   `json:"name"`
			Version      int      `json:"version"`
			Capabilities []string `json:"capabilities"`
		} `json:"profile"`
		Schedule struct {
			Routable bool   `json:"routable"`
			Reason   string `json:"reason"`
		} `json:"schedule"`
	}
	// Wait for the factory's first heartbeat, so the reason is about the
	// capability and not about an empty fleet.
	Eventually(t, 30*time.Second, "the cpu factory's heartbeat advertises engine:fake", func() bool {
		r := s.Op(http.MethodGet, "/jobs/"+id+"/explain", "demo", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		r.JSON(t, &explain)
		return strings.Contains(explain.Schedule.Reason, "gpu:a100") && !strings.Contains(explain.Schedule.Reason, "engine:fake")
	})
	require.False(t, explain.Schedule.Routable)
	require.Contains(t, explain.Schedule.Reason, "unroutable")
	require.Equal(t, "trainer", explain.Profile.Name)
	require.Equal(t, 1, explain.Profile.Version)
	require.Equal(t, []string{"gpu:a100"}, explain.Profile.Capabilities)
	require.Equal(t, "queued", facStage(t, s, "demo", id))

	startFactory(t, s, "gpu", "demo", 1, repo, eng, "FLEET_CAPABILITIES=gpu:a100")
	job := facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
	runs := s.Op(http.MethodGet, "/jobs/"+id+"/runs", "demo", nil)
	require.Equal(t, http.StatusOK, runs.Status)
	require.Contains(t, string(runs.Body), `"factoryId":"gpu"`, fmt.Sprintf("job %v", job))
}
