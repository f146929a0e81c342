package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// budgetEngine writes the usage an engine would report, changes a file so
// the delivery has a diff, and (for the job titled "overrun") keeps
// running past its budget.usd until the factory stops it.
const budgetEngine = `if [ "$FLEET_JOB_TITLE" = overrun ]; then
  printf '{"usd": 0.9, "inputTokens": 5000, "outputTokens": 700}' > "$FLEET_JOB_USAGE_FILE"
  sleep 60
fi
echo "$FLEET_JOB_ID" > "out-$FLEET_JOB_ID.txt"
printf '{"usd": 0.6, "inputTokens": 1000, "outputTokens": 100, "model": "fake"}' > "$FLEET_JOB_USAGE_FILE"`

type budgetView struct {
	SpentUSD     float64 `json:"spentUsd"`
	ReservedUSD  float64 `json:"reservedUsd"`
	Paused       bool    `json:"paused"`
	PausedReason *string `json:"pausedReason"`
}

func getBudget(t *testing.T, s *Stack, product string) budgetView {
	t.Helper()
	r := s.Op(http.MethodGet, "/budgets/"+product, "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var b budgetView
	r.JSON(t, &b)
	return b
}

type runView struct {
	Result string `json:"result"`
	Reason string `json:"reason"`
	Engine string `json:"engine"`
	Head   string `json:"head"`
	Usage  struct {
		USD              float64 `json:"usd"`
		InputTokens      int64   `json:"inputTokens"`
		OutputTokens     int64   `json:"outputTokens"`
		CacheReadTokens  int64   `json:"cacheReadTokens"`
		CacheWriteTokens int64   `json:"cacheWriteTokens"`
	} `json:"usage"`
	// What a structured engine said of the run.
	EngineSession  string    `json:"engineSession"`
	Turns          int       `json:"turns"`
	Model          string    `json:"model"`
	LastActivityAt time.Time `json:"lastActivityAt"`
	EndedAt        time.Time `json:"endedAt"`
	Exit           *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"exit"`
	Diff *struct {
		Files      int `json:"files"`
		Insertions int `json:"insertions"`
		Deletions  int `json:"deletions"`
	} `json:"diff"`
}

func jobRuns(t *testing.T, s *Stack, product, id string) []runView {
	t.Helper()
	r := s.Op(http.MethodGet, "/jobs/"+id+"/runs", product, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct {
		Items []runView `json:"items"`
	}
	r.JSON(t, &out)
	return out.Items
}

// TestBudgetPausesAndResumes: real factories run shell engines that report
// usage through $FLEET_JOB_USAGE_FILE. Their runs' usage drives the product
// over its ceiling: it pauses, the remaining jobs stay queued with the
// reason in /explain, and the burndown's last point is the runs' usage
// summed. Raising the ceiling and resuming lets them run at once (the time
// from resume to the first assignment is logged). A job whose engine
// reports more than its own budget.usd is stopped: budget_exceeded.
func TestBudgetPausesAndResumes(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	r := s.Op(http.MethodPut, "/budgets/demo", "", map[string]any{"ceilingUsd": 1, "period": "total", "defaultJobUsd": 0.3})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	var ids []string
	for i := range 4 {
		ids = append(ids, s.Submit("demo", Manifest(fmt.Sprintf("job-%d", i), "app", "engine:fake")))
	}
	startFactory(t, s, "fa", "demo", 1, repo, facEngine(t, budgetEngine), "FLEET_CHECKPOINT_INTERVAL=300ms")

	// 0.3 estimated each: the first two fit under 1 in turn (0.6 spent +
	// 0.3 reserved); their 0.6 each reach 1.2 and pause the product.
	Eventually(t, 60*time.Second, "the product pauses at its ceiling", func() bool { return getBudget(t, s, "demo").Paused })
	b := getBudget(t, s, "demo")
	require.Equal(t, "budget_exhausted", *b.PausedReason)
	require.InDelta(t, 1.2, b.SpentUSD, 1e-9)

	var shipped, held []string
	for _, id := range ids {
		switch st := facStage(t, s, "demo", id); st {
		case "shipped":
			shipped = append(shipped, id)
		case "queued":
			held = append(held, id)
		default:
			t.Fatalf("job %s is %s", id, st)
		}
	}
	require.Len(t, shipped, 2)
	require.Len(t, held, 2)
	sum := 0.0
	for _, id := range shipped {
		runs := jobRuns(t, s, "demo", id)
		require.Len(t, runs, 1)
		run := runs[0]
		require.Equal(t, "succeeded", run.Result)
		require.Equal(t, "fake", run.Engine)
		require.InDelta(t, 0.6, run.Usage.USD, 1e-9)
		require.Equal(t, int64(1000), run.Usage.InputTokens)
		require.Equal(t, int64(100), run.Usage.OutputTokens)
		require.Equal(t, repo.Ref(t, "aq/job/"+id), run.Head, "the run names the head it delivered")
		require.NotNil(t, run.Diff)
		require.Equal(t, 1, run.Diff.Files)
		require.Equal(t, 1, run.Diff.Insertions)
		sum += run.Usage.USD
	}
	var burndown struct {
		Points []struct {
			SpentUSD float64 `json:"spentUsd"`
		} `json:"points"`
		ForecastExhaustedAt *time.Time `json:"forecastExhaustedAt"`
	}
	r = s.Op(http.MethodGet, "/budgets/demo/burndown", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &burndown)
	require.Len(t, burndown.Points, 2)
	require.InDelta(t, sum, burndown.Points[1].SpentUSD, 1e-9, "the burndown's cumulative spend is the runs' usage summed")
	require.NotNil(t, burndown.ForecastExhaustedAt)

	// Held, not lost: still queued over many poll intervals, and /explain
	// names the budget.
	for range 10 {
		for _, id := range held {
			require.Equal(t, "queued", facStage(t, s, "demo", id))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range held {
		r := s.Op(http.MethodGet, "/jobs/"+id+"/explain", "demo", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var ex struct {
			Budget *struct {
				Kind    string `json:"kind"`
				Message string `json:"message"`
			} `json:"budget"`
		}
		r.JSON(t, &ex)
		require.NotNil(t, ex.Budget, "%s", r.Body)
		require.Equal(t, "paused", ex.Budget.Kind)
		require.Contains(t, ex.Budget.Message, "budget_exhausted")
	}
	r = s.Op(http.MethodGet, "/metrics", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"kind":"budget_paused"`)
	require.Contains(t, string(r.Body), `"kind":"budget_alert"`)

	// Room first (a resume at the ceiling would still hold them), then
	// resume, timed to the first assignment.
	r = s.Op(http.MethodPut, "/budgets/demo", "", map[string]any{"ceilingUsd": 10, "period": "total", "defaultJobUsd": 0.3})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.True(t, getBudget(t, s, "demo").Paused, "a PUT does not lift a pause")
	resumed := time.Now()
	r = s.Op(http.MethodPost, "/budgets/demo/resume", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for _, id := range held {
		facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
	}
	// The first assignment, by the coordinator's own clock: the earliest
	// claimed event of the held jobs.
	var first time.Time
	for _, id := range held {
		r := s.Op(http.MethodGet, "/jobs/"+id+"/events", "demo", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var evs struct {
			Items []struct {
				Type string    `json:"type"`
				At   time.Time `json:"at"`
			} `json:"items"`
		}
		r.JSON(t, &evs)
		for _, ev := range evs.Items {
			if ev.Type == "claimed" && (first.IsZero() || ev.At.Before(first)) {
				first = ev.At
			}
		}
	}
	require.False(t, first.IsZero())
	t.Logf("resume to first assignment: %v (poll transport, FLEET_POLL_INTERVAL=200ms)", first.Sub(resumed).Round(time.Millisecond))
	require.InDelta(t, 2.4, getBudget(t, s, "demo").SpentUSD, 1e-9)

	// A job past its own budget.usd is stopped by the factory.
	over := s.Submit("demo", "---\ntitle: overrun\nrepo: app\ncapabilities: [engine:fake]\nbudget: {usd: 0.5}\n---\nSpend.\n")
	job := facWaitStage(t, s, "demo", over, "failed", 30*time.Second)
	require.Contains(t, job["lastFailure"].(map[string]any)["reason"], "budget_exceeded: usd budget 0.50 exceeded")
	runs := jobRuns(t, s, "demo", over)
	require.Len(t, runs, 1)
	require.InDelta(t, 0.9, runs[0].Usage.USD, 1e-9)
	require.InDelta(t, 3.3, getBudget(t, s, "demo").SpentUSD, 1e-9, "the overrun's usage is spent too")
}

// TestBudgetRacingClaims: 32 factories claim at once against a budget with
// room for exactly 3 jobs: exactly 3 are assigned.
func TestBudgetRacingClaims(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "app")
	r := s.Op(http.MethodPut, "/budgets/demo", "", map[string]any{"ceilingUsd": 3, "period": "total"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for i := range 8 {
		s.Submit("demo", "---\ntitle: j"+fmt.Sprint(i)+"\nrepo: app\nbudget: {usd: 1}\n---\nDo it.\n")
	}
	won := raceClaims(t, s, "demo", 32)
	require.Len(t, won, 3)
	b := getBudget(t, s, "demo")
	require.InDelta(t, 3, b.ReservedUSD, 1e-9)
}
