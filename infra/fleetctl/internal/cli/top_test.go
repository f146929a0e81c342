package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestTopListsReviewFailedAndDraining: the dashboard lists the jobs in
// review (with their approvals) and the latest failed ones beside the
// running ones, and marks a draining factory; a cursor selects a job (k9s
// style), Enter opens its detail with its runs, Esc goes back.
func TestTopListsReviewFailedAndDraining(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	a := &app{env: Env{Now: func() time.Time { return now }}}
	m := &topModel{a: a, ctx: t.Context(), product: "demo", interval: time.Minute, live: "live"}
	running := fleet.Job{ID: "j-running", Title: "Runs", Stage: fleet.StageBuilding, HolderFactoryID: "f1"}
	review := fleet.Job{ID: "j-review", Title: "Waits for votes", Stage: fleet.StageReview, Review: &fleet.Review{Quorum: 2, Approvals: 1}}
	failed := fleet.Job{ID: "j-failed", Title: "Broke", Stage: fleet.StageFailed, Attempts: 1, MaxAttempts: 3,
		LastFailure: &fleet.Failure{Reason: "tests do not compile\nmore output", FactoryID: "f1"}}
	m.Update(topDataMsg(topData{
		metrics:   &api.Metrics{Jobs: map[string]int{"building": 1, "review": 1}},
		factories: []fleet.Factory{{ID: "f1", Health: fleet.HealthOK, SeatLimit: 2, Load: 1}, {ID: "f2", Health: fleet.HealthOK, Draining: true}},
		running:   []fleet.Job{running}, review: []fleet.Job{review}, failed: []fleet.Job{failed}, at: now,
	}))
	view := m.View()
	for _, want := range []string{"Running jobs (1)", "In review (1)", "1 of 2 approvals", "Failed, latest (1)", "tests do not compile", "draining"} {
		require.Contains(t, view, want)
	}
	require.Contains(t, view, "› j-running", "the first job is selected")

	m.Update(tea.KeyMsg{Type: tea.KeyDown})
	m.Update(tea.KeyMsg{Type: tea.KeyDown})
	require.Contains(t, m.View(), "› j-failed")
	_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	require.NotNil(t, cmd, "Enter fetches the job's detail")
	require.Equal(t, "j-failed", m.open)
	require.Contains(t, m.View(), "loading job j-failed")
	m.Update(topDetailMsg{id: "j-failed", detail: &topDetail{job: &failed, runs: []fleet.Run{{LeaseEpoch: 1, FactoryID: "f1", Result: fleet.RunFailed,
		Reason: "tests do not compile", Usage: fleet.Usage{USD: 0.5, InputTokens: 1200, OutputTokens: 300}}}}})
	detail := m.View()
	for _, want := range []string{"Job j-failed", "attempts:     1 of 3", "last failure: tests do not compile …", "Runs (1)", "$0.50 1.2k/300 tok", "esc back"} {
		require.Contains(t, detail, want)
	}
	_, cmd = m.Update(tea.KeyMsg{Type: tea.KeyEsc})
	require.Nil(t, cmd, "Esc in a detail goes back, it does not quit")
	require.Empty(t, m.open)
	require.Contains(t, m.View(), "› j-failed", "the selection stays")
}

// TestTopSaysItNeedsATerminal: without a terminal (a pipe, a script) top
// says so and how to read the same data, instead of a TTY error.
func TestTopSaysItNeedsATerminal(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
	t.Cleanup(srv.Close)
	var out, errb bytes.Buffer
	env := map[string]string{"FLEET_URL": srv.URL, "FLEET_TOKEN": opToken, "FLEET_PRODUCT": "demo"}
	code := Run(context.Background(), []string{"top"}, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	require.Equal(t, ExitUsage, code, errb.String())
	require.Contains(t, errb.String(), "top is a full-screen dashboard and needs a terminal")
	require.Contains(t, errb.String(), "fleetctl metrics")
	require.Empty(t, out.String(), "no escape codes on a pipe")
}

// TestTopDetailShowsTheLiveLog: the detail pane ends with the last lines
// of the job's output, terminal escapes removed, and says whether the run
// still writes; a long log is read from its tail only.
func TestTopDetailShowsTheLiveLog(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	m := &topModel{a: &app{env: Env{Now: func() time.Time { return now }}}, ctx: t.Context(), product: "demo", interval: time.Minute, live: "live"}
	job := fleet.Job{ID: "j1", Title: "Runs", Stage: fleet.StageBuilding, HolderFactoryID: "f1"}
	m.Update(topDataMsg(topData{metrics: &api.Metrics{}, running: []fleet.Job{job}, at: now}))
	m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	var log strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&log, "line %d \x1b[1;31mred\x1b[0m\r\n", i)
	}
	m.Update(topDetailMsg{id: "j1", detail: &topDetail{job: &job, log: log.String(), logEpoch: "2"}})
	view := m.View()
	require.Contains(t, view, "Output (run 2, live)")
	require.Contains(t, view, "  line 20 red\n")
	require.Contains(t, view, "  line 9 red\n")
	require.NotContains(t, view, "line 8 red", "the last 12 lines")
	require.NotContains(t, view, "\x1b[1;31m")

	// The tail of a long log: the size first, then only the end.
	var offsets []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offsets = append(offsets, r.URL.Query().Get("offset"))
		w.Header().Set(api.HeaderLogSize, "100000")
		w.Header().Set(api.HeaderLogEpoch, "3")
		w.Header().Set(api.HeaderLogComplete, "true")
		if r.URL.Query().Get("offset") == "" {
			_, _ = w.Write([]byte(strings.Repeat("x", 100000)))
			return
		}
		_, _ = w.Write([]byte("the end\n"))
	}))
	defer srv.Close()
	tail, epoch, done, err := readLogTail(t.Context(), api.New(api.Config{BaseURL: srv.URL, Token: "t"}), "demo", "j1")
	require.NoError(t, err)
	require.Equal(t, "the end\n", tail)
	require.Equal(t, "3", epoch)
	require.True(t, done)
	require.Equal(t, []string{"", strconv.Itoa(100000 - logTailBytes)}, offsets)
}

// TestTopDetailEscapesStoredText: the detail's header (the job's title)
// and its runs' reasons are shown escaped, as every other cell is: a title
// stored before the API refused control and bidi characters, or an
// engine's failure output, cannot command the terminal.
func TestTopDetailEscapesStoredText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	m := &topModel{a: &app{env: Env{Now: func() time.Time { return now }}}, ctx: t.Context(), product: "demo", interval: time.Minute, live: "live"}
	job := fleet.Job{ID: "j1", Title: "Fix\rforged \u202etitle", Stage: fleet.StageBuilding, HolderFactoryID: "f1"}
	m.Update(topDataMsg(topData{metrics: &api.Metrics{}, running: []fleet.Job{job}, at: now}))
	m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	runs := []fleet.Run{{LeaseEpoch: 1, FactoryID: "f1", Result: fleet.RunFailed, Reason: "boom\x1b]0;owned\a"}}
	m.Update(topDetailMsg{id: "j1", detail: &topDetail{job: &job, runs: runs}})
	view := m.View()
	require.Contains(t, view, `Fix\x0dforged \u202etitle`)
	require.Contains(t, view, `boom\x1b]0;owned\x07`)
	require.NotContains(t, view, "\r")
	require.NotContains(t, view, "\u202e")
	require.NotContains(t, view, "\x07")
}
