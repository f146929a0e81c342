package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// errJobEnded stops a watch at the job's terminal event.
var errJobEnded = errors.New("job ended")

func (a *app) jobsWatch() *cobra.Command {
	var after string
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a job's events live (SSE) until it ends; resumes by Last-Event-ID if the stream drops",
		Long: `Follow a job's events live over GET /fleet/jobs/{id}/events/stream, from the
start (or --after SEQ), until the job reaches a terminal stage. A dropped stream
is resumed with Last-Event-ID, so no event is missed. -o json prints one event
per line (NDJSON).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.token == "" {
				return &api.Error{Code: fleet.CodeUnauthenticated, Message: "no operator token: set FLEET_TOKEN or --token-file"}
			}
			path := "/jobs/" + url.PathEscape(args[0]) + "/events/stream"
			if !a.json() {
				a.printf("%-4s  %-8s  %-17s  %-22s  %-18s  %s\n", "SEQ", "AT", "TYPE", "STAGE", "ACTOR", "MESSAGE")
			}
			last := after
			backoff := 500 * time.Millisecond
			for {
				var err error
				last, err = a.client.Stream(cmd.Context(), api.StreamRequest{Path: path, After: last}, func(ev api.Event) error {
					var e fleet.Event
					if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
						return &api.Error{Code: fleet.CodeUnavailable, Message: "undecodable event: " + err.Error()}
					}
					if a.json() {
						if _, err := fmt.Fprintln(a.env.Stdout, ev.Data); err != nil {
							return err
						}
					} else {
						r := eventRow(e)
						a.printf("%-4s  %-8s  %-17s  %-22s  %-18s  %s\n", r[0], r[1], r[2], r[3], r[4], r[5])
					}
					if e.To != "" && e.To.Terminal() {
						return errJobEnded
					}
					return nil
				})
				switch {
				case errors.Is(err, errJobEnded):
					return nil
				case cmd.Context().Err() != nil:
					return nil
				case err != nil && !retryableStreamError(err):
					return err
				}
				// The server ended the stream (its time limit) or it broke:
				// resume from the last id.
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 10*time.Second)
			}
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "start after this event seq")
	return cmd
}

func retryableStreamError(err error) bool {
	switch api.CodeOf(err) {
	case fleet.CodeUnavailable, fleet.CodeThrottled, "internal":
		return true
	}
	return false
}

func (a *app) jobsDAG() *cobra.Command {
	return &cobra.Command{
		Use:               "dag ID",
		Short:             "The job's tree: its root, every job below it, and what they depend on",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var d api.DAG
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(args[0]) + "/dag"}, &d)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			children := map[string][]api.DAGNode{}
			byID := map[string]bool{}
			for _, n := range d.Nodes {
				byID[n.ID] = true
			}
			var roots []api.DAGNode
			for _, n := range d.Nodes {
				if n.ParentID != "" && byID[n.ParentID] {
					children[n.ParentID] = append(children[n.ParentID], n)
				} else {
					roots = append(roots, n)
				}
			}
			// The tree's root first, then jobs outside it that something
			// depends on.
			slices.SortStableFunc(roots, func(x, y api.DAGNode) int {
				return boolRank(x.ID != d.RootID) - boolRank(y.ID != d.RootID)
			})
			var rows [][]string
			var walk func(n api.DAGNode, prefix string, last, top bool)
			walk = func(n api.DAGNode, prefix string, last, top bool) {
				branch, next := "", prefix
				if !top {
					branch = prefix + "├─ "
					next = prefix + "│  "
					if last {
						branch, next = prefix+"└─ ", prefix+"   "
					}
				}
				deps := list(n.Deps)
				if len(n.Deps) > 1 {
					deps += " (" + string(n.DepsMode) + ")"
				}
				kind := string(n.Kind)
				if kind == "" {
					kind = "task"
				}
				rows = append(rows, []string{branch + n.ID, string(n.Stage), kind, deps, truncate(n.Title, 40)})
				kids := children[n.ID]
				for i, k := range kids {
					walk(k, next, i == len(kids)-1, false)
				}
			}
			for _, r := range roots {
				walk(r, "", true, true)
			}
			if err := a.table([]string{"JOB", "STAGE", "KIND", "DEPS", "TITLE"}, rows); err != nil {
				return err
			}
			var counts []string
			for _, st := range fleet.Stages {
				if n := d.Counts[st]; n > 0 {
					counts = append(counts, fmt.Sprintf("%s=%d", st, n))
				}
			}
			a.printf("\n%d jobs: %s\n", len(d.Nodes), strings.Join(counts, " "))
			return nil
		},
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (a *app) reviewCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "review", Short: "Vote on a job held at the review gate"}
	for _, v := range []struct {
		name    string
		approve bool
		short   string
	}{
		{"approve", true, "Approve the job's current head (quorum approvals move it to testing)"},
		{"reject", false, "Reject the job's current head (back to the queue with the comment, or failed)"},
	} {
		var comment, head string
		c := &cobra.Command{
			Use:               v.name + " ID",
			Short:             v.short,
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: a.completeJobs,
			RunE: func(cmd *cobra.Command, args []string) error {
				h := head
				if h == "" {
					// Vote on what the job holds now; the server refuses
					// (409) if it moves on before the vote lands.
					j, _, err := a.getJob(cmd, args[0])
					if err != nil {
						return err
					}
					if j.Review == nil || j.Review.Head == "" {
						return &api.Error{Code: fleet.CodeConflict, Message: fmt.Sprintf("job %s has no head under review (stage %s)", j.ID, j.Stage)}
					}
					h = j.Review.Head
				}
				body, err := jsonBody(map[string]any{"approve": v.approve, "comment": comment, "head": h})
				if err != nil {
					return err
				}
				var j fleet.Job
				raw, err := a.call(cmd, api.Request{Method: http.MethodPost, Path: "/jobs/" + url.PathEscape(args[0]) + "/review", Body: body}, &j)
				if err != nil {
					return err
				}
				if a.json() {
					return a.printJSON(raw)
				}
				line := fmt.Sprintf("job %s: %s %s; stage %s", j.ID, pastTense(v.name), h, j.Stage)
				if j.Review != nil && j.Review.Quorum > 0 {
					line += fmt.Sprintf(" (%d of %d approvals)", j.Review.Approvals, j.Review.Quorum)
				}
				a.printf("%s\n", line)
				return nil
			},
		}
		a.takesJob(c)
		c.Flags().StringVar(&comment, "comment", "", "why (kept as the job's review feedback on a rejection)")
		c.Flags().StringVar(&head, "head", "", "the head to vote on (default: the job's current review head)")
		cmd.AddCommand(c)
	}
	return cmd
}

func pastTense(verb string) string {
	if strings.HasSuffix(verb, "e") {
		return verb + "d"
	}
	return verb + "ed"
}
