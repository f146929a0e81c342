package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	claimerEnv     = "FLEET_TEST_CLAIMER"
	raceJobs       = 500
	raceGoroutines = 32
)

// TestClaimRaceAcrossProcesses: two client processes × 32 goroutines race
// POST /api/fleet/claim over 500 jobs; every job is handed out exactly once.
func TestClaimRaceAcrossProcesses(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "r1")
	tokens := []string{
		s.Factory("racer-a", "demo", 1000, []string{"os:linux"}, []string{"r1"}),
		s.Factory("racer-b", "demo", 1000, []string{"os:linux"}, []string{"r1"}),
	}
	for i := range raceJobs {
		s.Submit("demo", Manifest(fmt.Sprintf("job %d", i), "r1", "os:linux"))
	}

	outs := make([]bytes.Buffer, len(tokens))
	var wg sync.WaitGroup
	for i, tok := range tokens {
		cmd := exec.Command(os.Args[0], "-test.run=^TestClaimerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), claimerEnv+"=1", "FLEET_TEST_API="+s.API, "FLEET_TEST_TOKEN="+tok)
		cmd.Stdout = &outs[i]
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		wg.Go(func() { require.NoError(t, cmd.Wait()) })
	}
	wg.Wait()

	holders := map[string][]string{}
	for i := range outs {
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "CLAIMED "); ok {
				holders[id] = append(holders[id], strconv.Itoa(i))
			}
		}
	}
	require.Len(t, holders, raceJobs, "every job claimed")
	for id, by := range holders {
		require.Len(t, by, 1, "job %s claimed by processes %v", id, by)
	}
	// The store agrees: every job assigned once, at epoch 1.
	for id := range holders {
		job := s.Job("demo", id)
		require.Equal(t, "assigned", job["stage"])
		require.EqualValues(t, 1, job["leaseEpoch"])
	}
}

// TestClaimerProcess is the client process of TestClaimRaceAcrossProcesses:
// 32 goroutines claim until the queue is empty and print what they got.
func TestClaimerProcess(t *testing.T) {
	if os.Getenv(claimerEnv) == "" {
		t.Skip("runs only as a child of TestClaimRaceAcrossProcesses")
	}
	api, token := os.Getenv("FLEET_TEST_API"), os.Getenv("FLEET_TEST_TOKEN")
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range raceGoroutines {
		wg.Go(func() {
			for {
				r := Call(t, http.MethodPost, api+"/claim", token, nil)
				if r.Status == http.StatusNoContent {
					return
				}
				require.Equal(t, http.StatusOK, r.Status, "claim: %s", r.Body)
				var c struct {
					Job struct {
						ID string `json:"id"`
					} `json:"job"`
				}
				require.NoError(t, json.Unmarshal(r.Body, &c))
				mu.Lock()
				fmt.Println("CLAIMED " + c.Job.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
