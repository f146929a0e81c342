package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// role is what a demo job is there to show; the driver acts on it as an
// operator would.
type role string

const (
	rolePlain    role = "plain"
	rolePlan     role = "plan"     // proposes two children (a DAG)
	roleReviewed role = "reviewed" // review-gated: approved, then shipped
	roleFlaky    role = "flaky"    // fails its first run, requeued once
	// rolePR is reviewed on its pull request: the forge double's reviewer
	// asks for changes once, then approves the second iteration; shipped,
	// it is merged.
	rolePR role = "pull request"
)

// demoJob is one job the demo submits.
type demoJob struct {
	Role     role
	Title    string
	Priority fleet.Priority
	Front    string // extra front matter
	Body     string
	// Engine is the engine the job asks for: the demo engine unless set
	// (claude: the claude preset, with the demo's stand-in CLI).
	Engine string
}

// demoJobs are submitted in this order.
var demoJobs = []demoJob{
	{Role: rolePlan, Title: "Plan the 1.0 release", Priority: fleet.PriorityHigh,
		Body: "demo: plan\n\nSplit the release into its steps (the engine proposes two children), then close it."},
	{Role: roleReviewed, Title: "Rename the --verbose flag", Priority: fleet.PriorityNormal,
		Front: "review: {quorum: 1}",
		Body:  "Rename the flag. A reviewer approves the delivered head before it ships."},
	{Role: rolePR, Title: "Add a --version flag", Priority: fleet.PriorityNormal,
		Front: "review: {reviewers: [" + forgeReviewer + "], quorum: 1}",
		Body:  "Add the flag. Its pull request is reviewed on the forge: changes are asked for once, then it is approved and merged."},
	{Role: roleFlaky, Title: "Fix the flaky date test", Priority: fleet.PriorityNormal,
		Body: "demo: fail once\n\nThe first run fails; the operator requeues it and the retry succeeds."},
	{Role: rolePlain, Title: "Add a greeting to the README", Priority: fleet.PriorityLow, Body: "Say hello."},
	{Role: rolePlain, Title: "Document the configuration", Priority: fleet.PriorityNormal, Body: "List every setting.", Engine: "claude"},
	{Role: rolePlain, Title: "Tidy the changelog", Priority: fleet.PriorityLow, Body: "Keep it short.", Engine: "claude"},
}

// expectedJobs is how many jobs the demo ends with: its own and the two
// children the plan proposes.
var expectedJobs = len(demoJobs) + 2

// manifest is j's Markdown manifest.
func (j demoJob) manifest() string {
	engine := j.Engine
	if engine == "" {
		engine = "demo"
	}
	front := fmt.Sprintf("title: %s\nrepo: %s\ncapabilities: [engine:%s]\npriority: %s\n", j.Title, demoRepo, engine, j.Priority)
	if j.Front != "" {
		front += j.Front + "\n"
	}
	return "---\n" + front + "---\n" + j.Body + "\n"
}

// submit submits the demo jobs and returns their roles by id.
func (d *demo) submit(ctx context.Context) (map[string]role, error) {
	roles := map[string]role{}
	for _, j := range demoJobs {
		job, _, err := d.api.Submit(ctx, demoProduct, j.manifest())
		if err != nil {
			return nil, fmt.Errorf("submit %q: %w", j.Title, err)
		}
		roles[job.ID] = j.Role
	}
	return roles, nil
}

// action is what the driver does to a job, as an operator would.
type action int

const (
	actNone       action = iota
	actApprove           // vote approve on the review head
	actShip              // ship a reviewed job from testing
	actRequeue           // requeue the flaky job after its planned failure
	actAskChanges        // the forge's reviewer asks for changes on the pull request
	actApprovePR         // the forge's reviewer approves the pull request
)

// tracked is what the driver remembers of a job.
type tracked struct {
	role     role
	stage    fleet.Stage
	approved string // the head approved
	requeued bool
	asked    bool // changes asked for on the pull request
}

// decide is the operator's next move on j: approve a gated job's head in
// review, ship it once in testing, requeue the flaky job once after its
// planned failure.
func decide(t *tracked, j fleet.Job) action {
	switch {
	case t.role == roleReviewed && j.Stage == fleet.StageReview && j.Review != nil && j.Review.Head != "" && t.approved != j.Review.Head:
		return actApprove
	case (t.role == roleReviewed || t.role == rolePR) && j.Stage == fleet.StageTesting:
		return actShip
	case t.role == rolePR && j.Stage == fleet.StageReview && j.PullRequest != nil && !j.ForgeDue && !t.asked:
		return actAskChanges
	case t.role == rolePR && j.Stage == fleet.StageReview && j.PullRequest != nil && !j.ForgeDue && j.Iteration >= 2 &&
		t.approved != j.PullRequest.HeadSHA:
		return actApprovePR
	case t.role == roleFlaky && j.Stage == fleet.StageFailed && !t.requeued:
		return actRequeue
	}
	return actNone
}

// settled reports whether the demo's work is over: every job it expects
// exists and is terminal, with no operator move left to make.
func settled(jobs map[string]*tracked) bool {
	if len(jobs) < expectedJobs {
		return false
	}
	for _, t := range jobs {
		if !t.stage.Terminal() || (t.role == roleFlaky && !t.requeued) {
			return false
		}
	}
	return true
}

// pollEvery is the driver's cadence: it reads the job list, prints what
// moved and acts.
const pollEvery = 250 * time.Millisecond

// drive follows the demo product's jobs until ctx ends, printing every
// stage change and making the operator's moves.
func (d *demo) drive(ctx context.Context, roles map[string]role) error {
	jobs := map[string]*tracked{}
	for id, r := range roles {
		jobs[id] = &tracked{role: r, stage: fleet.StageQueued}
	}
	var firstAssigned time.Duration
	done := false
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if exited, err := d.stack.proc.exited(); exited {
			return fmt.Errorf("the stack exited (%v); see %s/logs/stack.log", err, d.opts.Dir)
		}
		list, err := d.listJobs(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(d.out, "demo: list jobs: %v\n", err)
			continue
		}
		for _, j := range list {
			t := jobs[j.ID]
			if t == nil {
				t = &tracked{role: rolePlain, stage: j.Stage}
				jobs[j.ID] = t
				fmt.Fprintf(d.out, "demo: %s  %q appeared (child of %s), %s\n", d.elapsed(), j.Title, j.ParentID, j.Stage)
			}
			if j.Stage != t.stage {
				who := ""
				if j.HolderFactoryID != "" {
					who = " on " + j.HolderFactoryID
				}
				fmt.Fprintf(d.out, "demo: %s  %q %s -> %s%s\n", d.elapsed(), j.Title, t.stage, j.Stage, who)
				t.stage = j.Stage
			}
			if firstAssigned == 0 && j.Stage != fleet.StageQueued && j.Stage != fleet.StageBlocked {
				firstAssigned = time.Since(d.start)
			}
			if err := d.act(ctx, t, j); err != nil {
				fmt.Fprintf(d.out, "demo: %q: %v\n", j.Title, err)
			}
		}
		if !done && settled(jobs) {
			done = true
			fmt.Fprintf(d.out, "demo: all %d jobs reached a terminal stage %s after start (first assigned after %s); the fleet keeps running, Ctrl-C stops it\n",
				len(jobs), d.elapsed(), firstAssigned.Round(time.Millisecond))
		}
	}
}

// act makes the operator's move on j, if any.
func (d *demo) act(ctx context.Context, t *tracked, j fleet.Job) error {
	switch decide(t, j) {
	case actApprove:
		fmt.Fprintf(d.out, "demo: %s  approving %q at %s (fleetctl review approve %s)\n", d.elapsed(), j.Title, j.Review.Head, j.ID)
		if _, err := d.api.Vote(ctx, demoProduct, j.ID, api.VoteRequest{
			Approve: api.Ptr(true), Head: &j.Review.Head, Comment: "Looks good (approved by make demo).",
		}); err != nil {
			return err
		}
		t.approved = j.Review.Head
	case actShip:
		fmt.Fprintf(d.out, "demo: %s  shipping %q (fleetctl jobs ship %s)\n", d.elapsed(), j.Title, j.ID)
		_, err := d.api.Act(ctx, demoProduct, j.ID, "ship", "")
		return err
	case actAskChanges:
		fmt.Fprintf(d.out, "demo: %s  %q: the reviewer asks for changes on pull request #%d (a signed webhook from the GitHub double)\n",
			d.elapsed(), j.Title, j.PullRequest.Number)
		if err := d.forge.review(ctx, d.stack.URL, j.PullRequest.Number, "changes_requested", "Please add a test for the flag."); err != nil {
			return err
		}
		t.asked = true
	case actApprovePR:
		fmt.Fprintf(d.out, "demo: %s  %q: the reviewer approves iteration %d of pull request #%d\n",
			d.elapsed(), j.Title, j.Iteration, j.PullRequest.Number)
		if err := d.forge.review(ctx, d.stack.URL, j.PullRequest.Number, "approved", "Thanks, looks good."); err != nil {
			return err
		}
		t.approved = j.PullRequest.HeadSHA
	case actRequeue:
		reason := ""
		if j.LastFailure != nil {
			reason = strings.Join(strings.Fields(j.LastFailure.Reason), " ")
		}
		fmt.Fprintf(d.out, "demo: %s  %q failed as planned (%s); requeueing it (fleetctl jobs requeue %s)\n", d.elapsed(), j.Title, reason, j.ID)
		if _, err := d.api.Act(ctx, demoProduct, j.ID, "requeue", ""); err != nil {
			return err
		}
		t.requeued = true
	}
	return nil
}

// listJobs reads every job of the demo product.
func (d *demo) listJobs(ctx context.Context) ([]fleet.Job, error) {
	var all []fleet.Job
	cursor := ""
	for {
		page, err := d.api.ListJobs(ctx, api.ListJobsOptions{Product: demoProduct, Limit: 100, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, j := range page.Items {
			all = append(all, *j)
		}
		if page.Cursor == "" {
			return all, nil
		}
		cursor = page.Cursor
	}
}

func (d *demo) elapsed() string {
	return fmt.Sprintf("%6.1fs", time.Since(d.start).Seconds())
}
