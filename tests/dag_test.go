package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// postChildren posts children to parent as the operator and returns the
// status and the children's ids.
func postChildren(t *testing.T, s *Stack, product, parent string, manifests ...string) (int, []string) {
	t.Helper()
	r := s.Op(http.MethodPost, "/jobs/"+parent+"/children", product, map[string]any{"children": manifests})
	require.Less(t, r.Status, 300, "post children: %s", r.Body)
	var out struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	r.JSON(t, &out)
	ids := make([]string, len(out.Items))
	for i, it := range out.Items {
		ids[i] = it.ID
	}
	return r.Status, ids
}

type dagView struct {
	RootID string         `json:"rootId"`
	Nodes  []dagNodeView  `json:"nodes"`
	Counts map[string]int `json:"counts"`
}

type dagNodeView struct {
	ID, Title, Stage string
}

func dagOf(t *testing.T, s *Stack, product, id string) dagView {
	t.Helper()
	r := s.Op(http.MethodGet, "/jobs/"+id+"/dag", product, nil)
	require.Equal(t, http.StatusOK, r.Status, "dag: %s", r.Body)
	var d dagView
	r.JSON(t, &d)
	return d
}

// childManifest is a child for repo app run by the fake engine.
func childManifest(title string, extra ...string) string {
	return "---\ntitle: " + title + "\nrepo: app\ncapabilities: [engine:fake]\n" + strings.Join(extra, "\n") + "\n---\nDo " + title + ".\n"
}

// logEngine appends "start <title>" and "end <title>" to log around its
// work, and fails for a job titled bad.
func logEngine(t *testing.T, log string) string {
	return facEngine(t, `echo "start $FLEET_JOB_TITLE" >> `+log+`
if [ "$FLEET_JOB_TITLE" = bad ]; then echo "bad job" >&2; exit 1; fi
echo "$FLEET_JOB_TITLE" > out.txt
echo "end $FLEET_JOB_TITLE" >> `+log)
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestDAGCompositeShipsInDependencyOrder: a composite job with three
// children, c depending on its sibling b (named by b's idempotencyKey),
// runs through a real factory: c starts only after b ended, the parent
// ships with its last child, and posting the same children again answers
// the same jobs (200).
func TestDAGCompositeShipsInDependencyOrder(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	parent := s.Submit("demo", "---\ntitle: epic\nrepo: app\nkind: composite\n---\nThe whole thing.\n")
	kids := []string{
		childManifest("a", "idempotencyKey: a"),
		childManifest("b", "idempotencyKey: b"),
		childManifest("c", "idempotencyKey: c", "deps: [b]"),
	}
	status, ids := postChildren(t, s, "demo", parent, kids...)
	require.Equal(t, http.StatusCreated, status)
	require.Len(t, ids, 3)
	status, again := postChildren(t, s, "demo", parent, kids...)
	require.Equal(t, http.StatusOK, status, "idempotent re-post")
	require.Equal(t, ids, again)
	require.Equal(t, "blocked", facStage(t, s, "demo", parent))
	require.Equal(t, "blocked", facStage(t, s, "demo", ids[2]), "c waits for b")

	log := filepath.Join(t.TempDir(), "order.log")
	startFactory(t, s, "fa", "demo", 2, repo, logEngine(t, log))
	facWaitStage(t, s, "demo", parent, "shipped", 90*time.Second)
	for _, id := range ids {
		require.Equal(t, "shipped", facStage(t, s, "demo", id))
	}
	lines := readLines(t, log)
	endB, startC := slices.Index(lines, "end b"), slices.Index(lines, "start c")
	require.True(t, endB >= 0 && startC > endB, "c started after b ended: %v", lines)
	d := dagOf(t, s, "demo", ids[0])
	require.Equal(t, parent, d.RootID)
	require.Equal(t, map[string]int{"shipped": 4}, d.Counts)
}

// TestDAGFailingChildFailsDependantsAndParent: a child that fails fails
// its dependant sibling and the parent with dependency_failed; nothing is
// left blocked.
func TestDAGFailingChildFailsDependantsAndParent(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	parent := s.Submit("demo", "---\ntitle: epic\nrepo: app\nkind: composite\n---\nThe whole thing.\n")
	_, ids := postChildren(t, s, "demo", parent,
		childManifest("bad", "idempotencyKey: bad", "maxAttempts: 1"),
		childManifest("after-bad", "deps: [bad]"),
		childManifest("fine"))
	startFactory(t, s, "fa", "demo", 2, repo, logEngine(t, filepath.Join(t.TempDir(), "log")))
	for _, id := range []string{parent, ids[1]} {
		j := facWaitStage(t, s, "demo", id, "failed", 90*time.Second)
		require.Equal(t, "dependency_failed", j["lastFailure"].(map[string]any)["reason"], "%s", id)
	}
	require.Equal(t, "failed", facStage(t, s, "demo", ids[0]))
	facWaitStage(t, s, "demo", ids[2], "shipped", 60*time.Second)
	r := s.Op(http.MethodGet, "/jobs?stage=blocked", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Empty(t, r.Map(t)["items"], "nothing waits forever")
}

// TestDAGCancelParentLeavesNothingRunning: cancelling the parent while one
// child runs and the others wait leaves no descendant queued, blocked or
// running, grandchildren included; the running one through the
// acknowledged cancel (its holder stops the engine and releases).
func TestDAGCancelParentLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	parent := s.Submit("demo", "---\ntitle: epic\nrepo: app\nkind: composite\n---\nThe whole thing.\n")
	_, ids := postChildren(t, s, "demo", parent,
		childManifest("slow", "idempotencyKey: slow", "priority: high"),
		childManifest("waits", "deps: [slow]"),
		childManifest("sub", "kind: composite"))
	_, grand := postChildren(t, s, "demo", ids[2], childManifest("grandchild"))
	started := filepath.Join(t.TempDir(), "started")
	// One seat: the slow child holds it until it is stopped. The holder
	// hears the cancel in its next renewal answer and acknowledges it.
	eng := facEngine(t, `if [ "$FLEET_JOB_TITLE" = slow ]; then touch `+started+`; exec sleep 600; fi
echo ok > out.txt`)
	f := startFactory(t, s, "fa", "demo", 1, repo, eng, "FLEET_RENEW_INTERVAL=1s")
	Eventually(t, 60*time.Second, "the slow child runs", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	r := s.Op(http.MethodPost, "/jobs/"+parent+"/actions/cancel", "demo", map[string]any{"reason": "scrapped"})
	require.Less(t, r.Status, 300, "cancel: %s", r.Body)
	all := append(append([]string{parent}, ids...), grand...)
	Eventually(t, 60*time.Second, "every descendant ends", func() bool {
		d := dagOf(t, s, "demo", parent)
		for _, st := range []string{"queued", "blocked", "assigned", "building"} {
			if d.Counts[st] > 0 {
				return false
			}
		}
		return len(d.Nodes) == len(all)
	})
	for _, id := range all {
		require.Equal(t, "cancelled", facStage(t, s, "demo", id), id)
	}
	// The holder logs its acknowledgement once its release has answered,
	// which is what made the job cancelled: the line may come just after.
	Eventually(t, 60*time.Second, "the running child's holder says it stopped it", func() bool {
		return strings.Contains(f.Output(), "cancel")
	})
}

// TestDAGHolderPostsChildren: a job's engine proposes two children by
// writing manifests to $FLEET_JOB_CHILDREN_DIR; the one-seat factory posts
// them, which gives its seat back (the children run on it while the parent
// waits, holding no lease), and the parent's own step runs once they
// shipped, resumed from the plan's checkpoint.
func TestDAGHolderPostsChildren(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `if [ "$FLEET_JOB_TITLE" = planner ]; then
  if [ -z "$FLEET_JOB_CHILDREN" ]; then
    echo planned > plan.txt
    printf -- '---\ntitle: part one\nrepo: app\ncapabilities: [engine:fake]\nidempotencyKey: one\n---\nPart one.\n' > "$FLEET_JOB_CHILDREN_DIR/1.md"
    printf -- '---\ntitle: part two\nrepo: app\ncapabilities: [engine:fake]\ndeps: [one]\n---\nPart two.\n' > "$FLEET_JOB_CHILDREN_DIR/2.md"
    exit 0
  fi
  echo "$FLEET_JOB_CHILDREN" > children-seen.txt
  exit 0
fi
echo "$FLEET_JOB_TITLE" > part.txt`)
	parent := s.Submit("demo", "---\ntitle: planner\nrepo: app\ncapabilities: [engine:fake]\n---\nPlan it.\n")
	startFactory(t, s, "fa", "demo", 1, repo, eng)
	var kids []string
	Eventually(t, 60*time.Second, "the planner posts its children", func() bool {
		j := s.Job("demo", parent)
		cs, _ := j["children"].([]any)
		if len(cs) != 2 {
			return false
		}
		require.Empty(t, j["holderFactoryId"], "the parent holds no seat while its children run")
		kids = []string{cs[0].(string), cs[1].(string)}
		return true
	})
	facWaitStage(t, s, "demo", parent, "shipped", 90*time.Second)
	for _, id := range kids {
		require.Equal(t, "shipped", facStage(t, s, "demo", id))
	}
	require.Equal(t, "planned", repo.Show(t, "aq/job/"+parent, "plan.txt"), "the second step resumed from the plan")
	require.Equal(t, strings.Join(kids, ","), repo.Show(t, "aq/job/"+parent, "children-seen.txt"))
	var runs struct {
		Items []struct {
			Result string `json:"result"`
		} `json:"items"`
	}
	s.Op(http.MethodGet, "/jobs/"+parent+"/runs", "demo", nil).JSON(t, &runs)
	require.Len(t, runs.Items, 2, "planning, then its own step")
}
