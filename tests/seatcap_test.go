package tests

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seatEngine marks itself running in a shared directory, records how many
// jobs run at that moment, and holds its seat until the gate opens.
const seatEngine = `mkdir -p "$SEAT_DIR/running"
touch "$SEAT_DIR/running/$FLEET_JOB_ID"
ls "$SEAT_DIR/running" | wc -l >> "$SEAT_DIR/counts"
while [ ! -e "$SEAT_DIR/gate" ]; do sleep 0.1; done
echo "$FLEET_JOB_ID" > "out-$FLEET_JOB_ID.txt"
rm -f "$SEAT_DIR/running/$FLEET_JOB_ID"`

// TestSeatCapLimitsRunning: a product with maxRunning 2 and 4 free seats
// (a poll factory and a push factory, 2 seats each) runs at most 2 jobs at
// once: the rest stay queued with seat_cap in /explain over many poll
// intervals, and they run as seats free until every job ships.
func TestSeatCapLimitsRunning(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	r := s.Op(http.MethodPut, "/products/demo", "", map[string]any{"repos": []string{"app"}, "maxRunning": 2})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = s.Op(http.MethodGet, "/products/demo", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.EqualValues(t, 2, r.Map(t)["maxRunning"])

	dir := t.TempDir()
	eng := facEngine(t, "SEAT_DIR="+dir+"\n"+seatEngine)
	var ids []string
	for i := range 5 {
		ids = append(ids, s.Submit("demo", Manifest(fmt.Sprintf("seat-%d", i), "app", "engine:fake")))
	}
	startFactory(t, s, "fpoll", "demo", 2, repo, eng)
	startFactory(t, s, "fpush", "demo", 2, repo, eng, "FLEET_TRANSPORT=nats", "FLEET_NATS_URL="+s.NATS)

	Eventually(t, 30*time.Second, "two engines running", func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, "running"))
		return len(entries) == 2
	})
	// Held, not lost: over many poll intervals still two leased, three
	// queued, and /explain names the seat cap.
	for range 10 {
		stages := map[string]int{}
		for _, id := range ids {
			stages[facStage(t, s, "demo", id)]++
		}
		require.Equal(t, 3, stages["queued"], "%v", stages)
		require.Equal(t, 2, stages["assigned"]+stages["building"], "%v", stages)
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range ids {
		if facStage(t, s, "demo", id) != "queued" {
			continue
		}
		r := s.Op(http.MethodGet, "/jobs/"+id+"/explain", "demo", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var ex struct {
			SeatCap *struct {
				Kind       string `json:"kind"`
				Running    int    `json:"running"`
				MaxRunning int    `json:"maxRunning"`
			} `json:"seatCap"`
		}
		r.JSON(t, &ex)
		require.NotNil(t, ex.SeatCap, "%s", r.Body)
		require.Equal(t, "seat_cap", ex.SeatCap.Kind)
		require.Equal(t, 2, ex.SeatCap.Running)
		require.Equal(t, 2, ex.SeatCap.MaxRunning)
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "gate"), nil, 0o644))
	for _, id := range ids {
		facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
	}
	counts, err := os.ReadFile(filepath.Join(dir, "counts"))
	require.NoError(t, err)
	lines := strings.Fields(string(counts))
	require.Len(t, lines, 5, "every job ran once")
	for _, l := range lines {
		n, err := strconv.Atoi(l)
		require.NoError(t, err)
		require.LessOrEqual(t, n, 2, "never more than maxRunning at once: %s", counts)
	}
	r = s.Op(http.MethodGet, "/products/demo", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Empty(t, r.Map(t)["seats"], "every seat freed")
}

// TestSeatCapRacingClaims: 32 factories claim at once against a product
// with maxRunning 3: exactly 3 are assigned.
func TestSeatCapRacingClaims(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	r := s.Op(http.MethodPut, "/products/demo", "", map[string]any{"repos": []string{"app"}, "maxRunning": 3})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for i := range 8 {
		s.Submit("demo", Manifest(fmt.Sprintf("j%d", i), "app"))
	}
	won := raceClaims(t, s, "demo", 32)
	require.Len(t, won, 3)
	r = s.Op(http.MethodGet, "/products/demo", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Len(t, r.Map(t)["seats"], 3)
}

// raceClaims enrolls claimers one-seat factories for product's repo app
// and has them all POST /claim at once (a lost CAS retried, as a factory
// does); it returns the ids of the jobs won.
func raceClaims(t *testing.T, s *Stack, product string, claimers int) map[string]bool {
	t.Helper()
	tokens := make([]string, claimers)
	for i := range claimers {
		tokens[i] = s.Factory(fmt.Sprintf("f%02d", i), product, 1, []string{"os:linux"}, []string{"app"})
	}
	var mu sync.Mutex
	won := map[string]bool{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, tok := range tokens {
		wg.Go(func() {
			<-start
			for {
				r := s.As(tok, http.MethodPost, "/claim", "", nil)
				switch r.Status {
				case http.StatusConflict:
					continue // lost CAS races too often: retry, as a factory does
				case http.StatusOK:
					var cl struct {
						Job struct {
							ID string `json:"id"`
						} `json:"job"`
					}
					r.JSON(t, &cl)
					mu.Lock()
					won[cl.Job.ID] = true
					mu.Unlock()
				default:
					require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
				}
				return
			}
		})
	}
	close(start)
	wg.Wait()
	return won
}
