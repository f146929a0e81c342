package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// echoState is GET /fleet/jobs/{id}/echo.
type echoState struct {
	JobID         string     `json:"jobId"`
	DeliveredSeq  int64      `json:"deliveredSeq"`
	PendingSeq    *int64     `json:"pendingSeq"`
	LatestSeq     int64      `json:"latestSeq"`
	Attempts      int        `json:"attempts"`
	LastError     *string    `json:"lastError"`
	NextAttemptAt *time.Time `json:"nextAttemptAt"`
}

func (a *app) trackerCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tracker", Short: "The tracker bridge: ingest tracker items as jobs, re-send their echo"}
	var source, item string
	var revision int64
	ingest := &cobra.Command{
		Use:   "ingest FILE|- --source S --item I --revision N",
		Short: "Ingest a tracker item: its Markdown manifest becomes the item's job (the same item again: the same job)",
		Long: `Ingest a tracker item. The item's job is the one of key tracker:<source>:<item>:
the same item again returns it; a higher --revision replaces the manifest of a job
that has not started yet (never assigned); a higher one after that is refused.`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"md"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.needProduct(); err != nil {
				return err
			}
			f := cmd.Flags()
			for _, name := range []string{"source", "item", "revision"} {
				if !f.Changed(name) {
					return usagef("--%s is required", name)
				}
			}
			manifest, err := a.readInput(args[0])
			if err != nil {
				return err
			}
			body, err := jsonBody(map[string]any{"source": source, "itemId": item, "revision": revision, "manifest": string(manifest)})
			if err != nil {
				return err
			}
			if a.token == "" {
				return &api.Error{Code: fleet.CodeUnauthenticated, Message: "no operator token: set FLEET_TOKEN or --token-file"}
			}
			res, err := a.client.Do(cmd.Context(), api.Request{Method: http.MethodPost, Path: "/tracker/ingest", Body: body})
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(res.Body)
			}
			var j fleet.Job
			if err := json.Unmarshal(res.Body, &j); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(a.env.Stdout, "%s %s (%s:%s revision %d)\n", res.Header.Get("X-Fleet-Ingest"), j.ID,
				j.Tracker.Source, j.Tracker.ItemID, j.Tracker.Revision); err != nil {
				return err
			}
			return nil
		},
	}
	ingest.Flags().StringVar(&source, "source", "", "the tracker (jira, github, ...)")
	ingest.Flags().StringVar(&item, "item", "", "the item's id in the tracker")
	ingest.Flags().Int64Var(&revision, "revision", 0, "the item's revision (a higher one updates a job not started yet)")

	resend := &cobra.Command{
		Use:               "resend JOB",
		Short:             "Send every event of a tracked job to the tracker webhook again, from seq 1",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := jsonBody(map[string]any{"jobId": args[0]})
			if err != nil {
				return err
			}
			var st echoState
			raw, err := a.call(cmd, api.Request{Method: http.MethodPost, Path: "/tracker/echo", Body: body}, &st)
			if err != nil {
				return err
			}
			return a.printEcho(raw, &st)
		},
	}
	cmd.AddCommand(ingest, a.takesJob(resend))
	return cmd
}

// jobsEcho is 'jobs echo ID': a tracked job's echo delivery state.
func (a *app) jobsEcho() *cobra.Command {
	return &cobra.Command{
		Use:               "echo ID",
		Short:             "How far a tracked job's events got to the tracker webhook",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var st echoState
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(args[0]) + "/echo"}, &st)
			if err != nil {
				return err
			}
			return a.printEcho(raw, &st)
		},
	}
}

func (a *app) printEcho(raw []byte, st *echoState) error {
	if a.json() {
		return a.printJSON(raw)
	}
	pending, lastErr, next := "-", "-", "-"
	if st.PendingSeq != nil {
		pending = strconv.FormatInt(*st.PendingSeq, 10)
	}
	if st.LastError != nil {
		lastErr = *st.LastError
	}
	if st.NextAttemptAt != nil {
		next = st.NextAttemptAt.Format("2006-01-02 15:04:05Z07:00")
	}
	return a.fields([][2]string{{"job", st.JobID},
		{"delivered", fmt.Sprintf("%d of %d", st.DeliveredSeq, st.LatestSeq)}, {"pending", pending},
		{"attempts", strconv.Itoa(st.Attempts)}, {"last error", lastErr}, {"next attempt", next}})
}
