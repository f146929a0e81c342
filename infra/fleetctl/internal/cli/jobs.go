package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/fleet"
)

func (a *app) jobsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Aliases: []string{"job"}, Short: "List, submit and act on jobs"}
	cmd.AddCommand(a.jobsLs(), a.jobsSubmit())
	for _, c := range []*cobra.Command{a.jobsShow(), a.jobsExplain(), a.jobsEvents(), a.jobsRuns(), a.jobsWatch(), a.jobsDAG(), a.jobsEcho(), a.jobsLogs()} {
		cmd.AddCommand(a.takesJob(c))
	}
	for _, act := range []struct{ name, short string }{
		{"ship", "Ship a job in testing"},
		{"requeue", "Put a job back in the queue"},
		{"reject", "Reject a job (failed)"},
		{"cancel", "Cancel a job"},
	} {
		cmd.AddCommand(a.takesJob(a.jobsAction(act.name, act.short)))
	}
	return cmd
}

// completeJobs offers the product's job ids (most recent page) to the shell.
func (a *app) completeJobs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if err := a.setup(cmd, args); err != nil || a.product == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var page api.Page[fleet.Job]
	if _, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs", Query: url.Values{"limit": {"100"}}}, &page); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, j := range page.Items {
		out = append(out, j.ID+"\t"+string(j.Stage)+" "+j.Title)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func stageNames() []string {
	out := make([]string, len(fleet.Stages))
	for i, s := range fleet.Stages {
		out[i] = string(s)
	}
	return out
}

func (a *app) jobsLs() *cobra.Command {
	var stage, cursor string
	var limit int
	var all bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the product's jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := a.needProduct(); err != nil {
				return err
			}
			q := url.Values{}
			if stage != "" {
				q.Set("stage", stage)
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var items []fleet.Job
			var raws [][]byte
			next := cursor
			for {
				if next != "" {
					q.Set("cursor", next)
				}
				var page api.Page[fleet.Job]
				raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs", Query: q}, &page)
				if err != nil {
					return err
				}
				raws = append(raws, raw)
				items = append(items, page.Items...)
				next = page.Cursor
				if !all || next == "" {
					break
				}
			}
			if a.json() {
				if len(raws) == 1 {
					return a.printJSON(raws[0])
				}
				return a.printValue(api.List[fleet.Job]{Items: items})
			}
			rows := make([][]string, 0, len(items))
			for _, j := range items {
				rows = append(rows, []string{j.ID, string(j.Stage), string(j.Priority), j.Repo, orDash(j.HolderFactoryID),
					strconv.Itoa(j.Attempts), a.ago(j.UpdatedAt), truncate(j.Title, 48)})
			}
			if err := a.table([]string{"ID", "STAGE", "PRIORITY", "REPO", "HOLDER", "ATTEMPTS", "UPDATED", "TITLE"}, rows); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(a.env.Stderr, "more: fleetctl jobs ls --cursor %s (or --all)\n", next)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&stage, "stage", "", "only jobs in this stage")
	cmd.Flags().IntVar(&limit, "limit", 0, "page size (server default when 0)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue a listing from its cursor")
	cmd.Flags().BoolVar(&all, "all", false, "follow the cursor to the end")
	_ = cmd.RegisterFlagCompletionFunc("stage", cobra.FixedCompletions(stageNames(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) getJob(cmd *cobra.Command, id string) (*fleet.Job, []byte, error) {
	var j fleet.Job
	raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(id)}, &j)
	if err != nil {
		return nil, nil, err
	}
	return &j, raw, nil
}

func (a *app) jobsShow() *cobra.Command {
	return &cobra.Command{
		Use:               "show ID",
		Short:             "Show one job",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			j, raw, err := a.getJob(cmd, args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			return a.printJob(j)
		},
	}
}

func (a *app) printJob(j *fleet.Job) error {
	kv := [][2]string{
		{"id", j.ID}, {"title", j.Title}, {"product", j.ProductID}, {"repo", j.Repo},
		{"stage", string(j.Stage)}, {"priority", string(j.Priority)},
		{"capabilities", list(j.Capabilities)},
		{"holder", orDash(j.HolderFactoryID)}, {"leaseEpoch", strconv.FormatInt(j.LeaseEpoch, 10)},
		{"target", orDash(j.TargetFactoryID)},
		{"attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts)},
		{"checkpoint", orDash(j.Checkpoint)},
	}
	if j.Persona != "" {
		p := j.Persona
		if j.Profile != nil {
			p += " v" + strconv.FormatInt(j.Profile.Version, 10)
		}
		kv = append(kv, [2]string{"persona", p})
	}
	if j.ParentID != "" {
		kv = append(kv, [2]string{"parent", j.ParentID})
	}
	if len(j.Deps) > 0 {
		kv = append(kv, [2]string{"deps", list(j.Deps) + " (" + string(j.DepsMode) + ")"})
	}
	if j.LastFailure != nil {
		kv = append(kv, [2]string{"lastFailure", j.LastFailure.Reason})
	}
	if t := j.Tracker; t != nil {
		kv = append(kv, [2]string{"tracker", fmt.Sprintf("%s:%s revision %d", t.Source, t.ItemID, t.Revision)})
	}
	if j.Dispatch.Unroutable != "" {
		kv = append(kv, [2]string{"unroutable", j.Dispatch.Unroutable})
	}
	kv = append(kv, pullRequestFields(j)...)
	kv = append(kv, [2]string{"created", j.CreatedAt.Format("2006-01-02 15:04:05Z07:00") + " (" + a.ago(j.CreatedAt) + " ago)"},
		[2]string{"updated", j.UpdatedAt.Format("2006-01-02 15:04:05Z07:00") + " (" + a.ago(j.UpdatedAt) + " ago)"})
	return a.fields(kv)
}

// pullRequestFields are a job's pull request, its iteration and the
// forge's feedback, one line per item (its first line), when it has them.
func pullRequestFields(j *fleet.Job) [][2]string {
	var kv [][2]string
	if pr := j.PullRequest; pr != nil {
		kv = append(kv, [2]string{"pullRequest", fmt.Sprintf("%s#%d %s %s", pr.Repo, pr.Number, pr.State, pr.URL)})
	}
	if s := j.PRSync; s != nil && s.Attempts > 0 {
		kv = append(kv, [2]string{"pullRequestSync", fmt.Sprintf("failed %d times: %s", s.Attempts, firstLine(s.LastError))})
	}
	if j.Iteration > 1 || j.PullRequest != nil {
		kv = append(kv, [2]string{"iteration", strconv.Itoa(j.CurrentIteration())})
	}
	for _, f := range j.Feedback {
		who := string(f.Source)
		if f.Name != "" {
			who += " " + f.Name
		} else if f.Author != "" {
			who += " by " + f.Author
		}
		kv = append(kv, [2]string{fmt.Sprintf("feedback (iteration %d)", f.Iteration), who + ": " + firstLine(f.Body)})
	}
	return kv
}

// firstLine is s's first line, "…" marking the rest.
func firstLine(s string) string {
	line, rest, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if strings.TrimSpace(rest) != "" {
		line += " …"
	}
	return line
}

func (a *app) jobsSubmit() *cobra.Command {
	return &cobra.Command{
		Use:   "submit FILE|-",
		Short: "Submit a Markdown manifest (front matter + body) from a file or stdin",
		Args:  cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"md"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.needProduct(); err != nil {
				return err
			}
			body, err := a.readInput(args[0])
			if err != nil {
				return err
			}
			resp, err := a.doRaw(cmd, api.Request{Method: http.MethodPost, Path: "/jobs", Body: body, ContentType: "text/markdown"})
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(resp.Body)
			}
			var j api.Submitted
			if err := decode(resp, &j); err != nil {
				return err
			}
			verb := "submitted"
			if resp.Status == http.StatusOK {
				verb = "already submitted (same idempotencyKey)"
			}
			a.printf("%s job %s: %s (%s)\n", verb, j.ID, j.Stage, display(j.Title))
			for _, w := range j.Warnings {
				fmt.Fprintf(a.env.Stderr, "warning: %s: the job waits until the fleet changes\n", w)
			}
			return nil
		},
	}
}

func (a *app) jobsAction(action, short string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:               action + " ID",
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			body := []byte("{}")
			if reason != "" {
				var err error
				if body, err = jsonBody(map[string]string{"reason": reason}); err != nil {
					return err
				}
			}
			resp, err := a.doRaw(cmd, api.Request{Method: http.MethodPost, Path: "/jobs/" + url.PathEscape(args[0]) + "/actions/" + action, Body: body})
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(resp.Body)
			}
			var j fleet.Job
			if err := decode(resp, &j); err != nil {
				return err
			}
			if resp.Status == http.StatusAccepted {
				// A cancel of a leased job waits for the holder to
				// acknowledge (or the grace to force it).
				a.printf("job %s: %s requested; stage %s until the factory acknowledges\n", j.ID, action, j.Stage)
				return nil
			}
			a.printf("job %s: %s\n", j.ID, j.Stage)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (kept in the job's event)")
	return cmd
}

func (a *app) jobsExplain() *cobra.Command {
	return &cobra.Command{
		Use:               "explain ID",
		Short:             "Why a job went where it went, or why it waits: every factory's filter verdict and score terms",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var e api.Explanation
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(args[0]) + "/explain"}, &e)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			kv := explainFields(&e)
			// Where it runs or ran: the explanation scores where it would
			// go now, which for a job past the queue is not the answer.
			var j fleet.Job
			if _, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(e.JobID)}, &j); err != nil {
				return err
			}
			if w := whereItRuns(&j); w[0] != "" {
				kv = append(kv[:2:2], append([][2]string{w}, kv[2:]...)...)
			}
			if err := a.fields(kv); err != nil {
				return err
			}
			a.printf("\n")
			rows := make([][]string, 0, len(e.Schedule.Candidates))
			for _, c := range e.Schedule.Candidates {
				if !c.Eligible {
					rows = append(rows, []string{c.FactoryID, "no", "-", "-", "-", "-", "-", "-", "-", c.Reason})
					continue
				}
				t := c.Terms
				rows = append(rows, []string{c.FactoryID, "yes", score(c.Total), score(t.CapabilityFit), score(t.Affinity),
					score(t.Load), score(t.CostFit), score(t.Health), score(t.Starvation), "-"})
			}
			return a.table([]string{"FACTORY", "ELIGIBLE", "TOTAL", "CAPFIT", "AFFINITY", "LOAD", "COSTFIT", "HEALTH", "STARVATION", "REASON"}, rows)
		},
	}
}

// whereItRuns is the factory a leased job runs on, or the one its last
// run ran on; none for a job that never left the queue.
func whereItRuns(j *fleet.Job) [2]string {
	switch {
	case j.Stage.Leased() && j.HolderFactoryID != "":
		return [2]string{"runs on", fmt.Sprintf("%s (lease epoch %d)", j.HolderFactoryID, j.LeaseEpoch)}
	case len(j.Runs) > 0 && j.Stage != fleet.StageQueued && j.Stage != fleet.StageBlocked:
		r := j.Runs[len(j.Runs)-1]
		return [2]string{"ran on", fmt.Sprintf("%s (run %d, %s); now %s", r.FactoryID, r.LeaseEpoch, r.Result, j.Stage)}
	}
	return [2]string{}
}

// explainFields are the key: value lines of jobs explain above its table.
func explainFields(e *api.Explanation) [][2]string {
	kv := [][2]string{{"job", e.JobID}, {"stage", string(e.Stage)}, {"required", list(e.Schedule.Required)},
		{"routable", strconv.FormatBool(e.Schedule.Routable)}}
	if e.Schedule.Best != "" {
		kv = append(kv, [2]string{"best", e.Schedule.Best})
	}
	// The reason and the dispatcher's record both begin with their
	// kind ("unroutable: ..."): each is printed under that kind,
	// once, and the dispatcher's only when it says something else.
	reason := reasonField(e.Schedule.Reason)
	if reason[1] != "" {
		kv = append(kv, reason)
	}
	if e.TargetFactoryID != "" {
		kv = append(kv, [2]string{"target", e.TargetFactoryID})
	}
	if d := e.Dispatch.Unroutable; d != "" && d != e.Schedule.Reason {
		f := reasonField(d)
		kv = append(kv, [2]string{"dispatcher", f[1] + " (" + f[0] + ", when it last routed)"})
	}
	if e.Profile != nil {
		kv = append(kv, [2]string{"profile", fmt.Sprintf("%s v%d adds %s", e.Profile.Name, e.Profile.Version, list(e.Profile.Capabilities))})
	}
	for _, h := range []*fleet.Hold{e.Budget, e.SeatCap} {
		if h != nil {
			kv = append(kv, [2]string{"held", string(h.Kind) + ": " + h.Message})
		}
	}
	return kv
}

// reasonField splits a scheduling reason into its kind and text:
// "unroutable: no factory offers gpu:h100" is {"unroutable", "no factory
// offers gpu:h100"}; a reason of no known kind is {"reason", text}.
func reasonField(r string) [2]string {
	for _, p := range []string{view.UnroutablePrefix, view.NoEligiblePrefix} {
		if rest, ok := strings.CutPrefix(r, p); ok {
			return [2]string{strings.TrimSuffix(p, ": "), rest}
		}
	}
	return [2]string{"reason", r}
}

func score(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }

func (a *app) jobsEvents() *cobra.Command {
	var after int64
	cmd := &cobra.Command{
		Use:               "events ID",
		Short:             "A job's event history",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{}
			if after > 0 {
				q.Set("after", strconv.FormatInt(after, 10))
			}
			var page api.Page[fleet.Event]
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(args[0]) + "/events", Query: q}, &page)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			rows := make([][]string, 0, len(page.Items))
			for _, e := range page.Items {
				rows = append(rows, eventRow(e))
			}
			return a.table([]string{"SEQ", "AT", "TYPE", "STAGE", "ACTOR", "MESSAGE"}, rows)
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "only events after this seq")
	return cmd
}

func eventRow(e fleet.Event) []string {
	stage := "-"
	if e.From != "" || e.To != "" {
		stage = string(e.From) + " -> " + string(e.To)
	}
	actor := string(e.Actor)
	if e.ActorID != "" {
		actor += ":" + e.ActorID
	}
	// Escaped here, not only by table: jobs watch prints the row itself.
	return []string{strconv.FormatInt(e.Seq, 10), e.At.UTC().Format("15:04:05"), string(e.Type), display(stage), display(actor),
		display(truncate(strings.ReplaceAll(e.Message, "\n", " "), 60))}
}

func (a *app) jobsRuns() *cobra.Command {
	return &cobra.Command{
		Use:   "runs ID",
		Short: "A job's runs, one per lease epoch: factory, result, duration, usage (USD, tokens), turns and model",
		Long: `A job's runs, one line per lease epoch: the factory, the result, when it started
and how long it took, its usage (USD, input/output tokens), the engine's turns
and model when a structured engine reported them, and the reason it ended (its
first line, shortened: -o json has it whole).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var page api.Page[fleet.Run]
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(args[0]) + "/runs"}, &page)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			rows := make([][]string, 0, len(page.Items))
			for _, r := range page.Items {
				took := "-"
				if !r.EndedAt.IsZero() {
					took = r.EndedAt.Sub(r.StartedAt).Round(time.Second).String()
				}
				rows = append(rows, []string{strconv.FormatInt(r.LeaseEpoch, 10), r.FactoryID, string(r.Result),
					a.ago(r.StartedAt), took, usageCell(r.Usage), engineCell(r), oneLine(r.Reason, 40)})
			}
			return a.table([]string{"EPOCH", "FACTORY", "RESULT", "STARTED", "TOOK", "USAGE", "ENGINE", "REASON"}, rows)
		},
	}
}

// usageCell is a run's usage in a table cell: "$0.25 1.2k/340 tok", or
// "-" when nothing was reported.
func usageCell(u fleet.Usage) string {
	if u.USD == 0 && u.InputTokens == 0 && u.OutputTokens == 0 {
		return "-"
	}
	return fmt.Sprintf("$%.2f %s/%s tok", u.USD, count(u.InputTokens), count(u.OutputTokens))
}

// engineCell is what a structured engine said of a run, compactly:
// "sonnet-4 12t" (model, turns), "-" when it said nothing.
func engineCell(r fleet.Run) string {
	var parts []string
	if r.Model != "" {
		parts = append(parts, truncate(r.Model, 24))
	}
	if r.Turns > 0 {
		parts = append(parts, strconv.Itoa(r.Turns)+"t")
	}
	if len(parts) == 0 {
		return orDash(r.Engine)
	}
	return strings.Join(parts, " ")
}

// count shortens a token count: 950, 1.2k, 3.4M.
func count(n int64) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// oneLine keeps a table cell on one line: the text's first non-empty line,
// shortened to n runes ("-" when empty).
func oneLine(s string, n int) string {
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			if strings.Contains(strings.TrimSpace(s), "\n") {
				return truncate(l+" …", n)
			}
			return truncate(l, n)
		}
	}
	return "-"
}
