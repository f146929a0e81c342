// Package pulls puts delivered jobs into pull requests on their product's
// forge and brings the forge's answers back (API.md "Pull requests"): a
// delivery opens or updates the job's pull request, retried with a backoff
// while the forge fails; a webhook's approval is a reviewer's vote, a
// review asking for changes or a failing check sends the job back for
// another iteration with the feedback, a close cancels it and a merge
// ships it; an operator's ship merges it. coord's façade calls it.
package pulls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/coord/review"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge"
	"github.com/gigafactory/fleet/shared/retry"
	"github.com/gigafactory/fleet/shared/store"
)

// Lifecycle is what the pull-request use cases ask of the job lifecycle.
type Lifecycle interface {
	// Move applies m in one compare-and-swap with its event.
	Move(ctx context.Context, m kernel.Move) (*fleet.Job, error)
	// Vote casts reviewer's vote on head, as an operator's vote is.
	Vote(ctx context.Context, productID, jobID string, v review.VoteRequest) (*fleet.Job, error)
	// CancelBySystem cancels the job as an operator's cancel does (at
	// once when it holds no lease, else by asking its holder to stop),
	// recorded as the system's.
	CancelBySystem(ctx context.Context, actorID, productID, jobID, reason string) (*fleet.Job, error)
}

// Products reads products through a cache: one, and all (to find the
// product of a forge repository a webhook names). A product written
// through another process may be seen late, within the cache's TTL.
type Products interface {
	CachedProduct(ctx context.Context, id string) (*fleet.Product, error)
	CachedProducts(ctx context.Context) ([]*fleet.Product, error)
}

// Config tunes the forge work. Backoff is the wait after a failed sync,
// doubling up to MaxBackoff; JobURL, when set, links the job from its pull
// request's body.
type Config struct {
	Backoff, MaxBackoff time.Duration
	JobURL              func(productID, jobID string) string
}

// Defaults.
const (
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 10 * time.Minute
	// FailingAfter is how many failed syncs in a row make the job's
	// pull request an alert.
	FailingAfter = 3
)

// Service is the pull-request use cases. It is safe for concurrent use.
type Service struct {
	k        *kernel.Kernel
	cfg      Config
	forge    forge.Forge
	products Products
	life     Lifecycle
	kicks    sync.WaitGroup
}

// New builds the service; f may be nil (no forge configured): syncs then
// fail, visibly, and are retried.
func New(k *kernel.Kernel, cfg Config, f forge.Forge, products Products, life Lifecycle) *Service {
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	return &Service{k: k, cfg: cfg, forge: f, products: products, life: life}
}

// Branch is a job's branch, the pull request's head.
func Branch(jobID string) string { return "aq/job/" + jobID }

// Marker is the line a job's pull request body carries.
func Marker(jobID string) string { return "fleet-job: " + jobID }

// Wants reports whether a delivery of j in product p wants a pull request:
// p has a forge that maps j's repo.
func Wants(p *fleet.Product, j *fleet.Job) bool {
	return p != nil && p.Forge != nil && p.Forge.Repos[j.Repo] != ""
}

// awaitsPR says j is where a delivery leaves it, waiting on its review or
// its tests: the stages whose head a pull request shows.
func awaitsPR(j *fleet.Job) bool {
	return j.Stage == fleet.StageReview || j.Stage == fleet.StageTesting
}

// MarkDelivered is the effect of a delivery that wants a pull request: the
// sync is due now (in the same compare-and-swap as the delivery).
func MarkDelivered(j *fleet.Job) {
	j.ForgeDue = true
	j.PRSync = &fleet.PRSync{}
}

// Kick syncs the job's pull request in the background, after the delivery
// that asked for it was written; the sweep catches one that is lost.
func (s *Service) Kick(productID, jobID string) {
	s.kicks.Add(1)
	go func() {
		defer s.kicks.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Sync(ctx, productID, jobID); err != nil {
			s.k.Log.WarnContext(ctx, "pull request sync", "job", jobID, "err", err)
		}
	}()
}

// Wait waits for the kicks in flight (tests, shutdown).
func (s *Service) Wait() { s.kicks.Wait() }

// Sync opens or updates the job's pull request when it is due. A forge
// failure is recorded on the job (attempts, the error, the next try), not
// returned: the job is never blocked by it.
func (s *Service) Sync(ctx context.Context, productID, jobID string) error {
	j, err := s.k.GetJob(ctx, productID, jobID)
	if errors.Is(err, fleet.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now := s.k.Now()
	if !j.ForgeDue || (j.PRSync != nil && j.PRSync.NextAttemptAt.After(now)) {
		return nil
	}
	p, err := s.products.CachedProduct(ctx, productID)
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		return err
	}
	wanted := func(j *fleet.Job) bool { return Wants(p, j) && awaitsPR(j) }
	if !wanted(j) {
		// The forge was removed since the delivery, or the job moved on
		// before its pull request was opened (an operator cancelled,
		// shipped or rejected it): nothing to open, and a pull request
		// opened for a job that is over would be nobody's.
		_, err := s.k.MutateJob(ctx, productID, jobID, func(j *fleet.Job) error {
			if !j.ForgeDue || wanted(j) {
				return kernel.ErrNoChange
			}
			j.ForgeDue, j.PRSync = false, nil
			return nil
		})
		return err
	}
	fr := p.Forge.Repos[j.Repo]
	pr, created, ferr := s.ensure(ctx, p, j, fr)
	ctx = context.WithoutCancel(ctx)
	if ferr != nil {
		return s.failed(ctx, j, ferr)
	}
	recorded, over := false, false
	after, err := s.k.MutateJob(ctx, productID, jobID, func(j *fleet.Job) error {
		recorded, over = false, false
		if !j.ForgeDue {
			return kernel.ErrNoChange
		}
		// Ended while the forge opened it (an operator's cancel during
		// the call): recorded all the same, so the job links the pull
		// request the forge now holds, and said.
		recorded, over = true, !awaitsPR(j)
		j.ForgeDue, j.PRSync = false, nil
		j.PullRequest = &fleet.PullRequest{Repo: fr, Number: pr.Number, URL: pr.URL, HeadSHA: pr.HeadSHA, State: fleet.PROpen}
		j.UpdatedAt = s.k.Now()
		ev := fleet.Event{Type: fleet.EventPRUpdated, Actor: fleet.ActorSystem, ActorID: "forge",
			Message: fmt.Sprintf("pull request #%d updated (iteration %d): %s", pr.Number, j.CurrentIteration(), pr.URL)}
		if created {
			ev.Type, ev.Message = fleet.EventPROpened, fmt.Sprintf("pull request #%d opened: %s", pr.Number, pr.URL)
		}
		return s.k.RecordEvent(ctx, j, ev)
	})
	if err != nil || !recorded {
		return err
	}
	if over {
		s.k.Log.WarnContext(ctx, "a pull request was opened or updated for a job that ended meanwhile: close it on the forge if it is not wanted",
			"job", jobID, "stage", after.Stage, "pr", pr.URL)
		return nil
	}
	s.catchUp(ctx, p, after)
	return nil
}

// catchUp acts on what the forge already reports of the head a sync just
// recorded. While the sync was due, every check result was ignored (the
// head the job held was the previous delivery's), and GitHub does not
// deliver a webhook again: a check that failed on the new head while the
// sync backed off (the forge down, a rate limit) would otherwise never
// send the job back. So the head's check runs and commit statuses are
// read: the first failing one is the next iteration's feedback, as its
// webhook would have been; with none failing, autoMerge may merge. A
// failure to read them is logged: the checks' own webhooks still come for
// anything that finishes later.
func (s *Service) catchUp(ctx context.Context, p *fleet.Product, j *fleet.Job) {
	if !awaitsPR(j) || j.PullRequest == nil || s.forge == nil {
		return
	}
	repo, err := forge.ParseRepo("forge.repos", j.PullRequest.Repo)
	if err != nil {
		return
	}
	checks, statuses, err := s.headChecks(ctx, repo, j.PullRequest.HeadSHA)
	if err != nil {
		s.k.Log.WarnContext(ctx, "the checks of a synced head not read; their webhooks still count", "job", j.ID, "err", err)
		return
	}
	if ev, ok := firstFailing(repo, j, checks, statuses); ok {
		// No delivery of its own: iterate keys it by the check and head.
		out, why, err := s.iterate(ctx, p, j, ev, Delivery{})
		if err == nil {
			s.k.Log.InfoContext(ctx, "a check that failed while the pull request was brought up to date", "job", j.ID, "outcome", out, "why", why)
		}
		return
	}
	if autoMerges(p, j) {
		merged, why := s.mergeIfGreen(ctx, p, j, checks, statuses)
		s.k.Log.InfoContext(ctx, "autoMerge after the pull request was brought up to date", "job", j.ID, "merged", merged, "why", why)
	}
}

// headChecks reads every check run and commit status on a head.
func (s *Service) headChecks(ctx context.Context, repo forge.Repo, head string) ([]forge.Check, []forge.Status, error) {
	checks, err := s.forge.Checks(ctx, repo, head)
	if err != nil {
		return nil, nil, fmt.Errorf("checks not read: %w", err)
	}
	statuses, err := s.forge.Statuses(ctx, repo, head)
	if err != nil {
		return nil, nil, fmt.Errorf("commit statuses not read: %w", err)
	}
	return checks, statuses, nil
}

// firstFailing is the event a failing check run, else a failing commit
// status, on j's head would have been delivered as.
func firstFailing(repo forge.Repo, j *fleet.Job, checks []forge.Check, statuses []forge.Status) (forge.Event, bool) {
	ev := forge.Event{Kind: forge.EventCheckFailed, Repo: repo, Number: j.PullRequest.Number, HeadRef: Branch(j.ID), HeadSHA: j.PullRequest.HeadSHA}
	for _, c := range checks {
		if c.Failing() {
			ev.Name, ev.Title, ev.Summary, ev.Text, ev.URL = c.Name, c.Title, c.Summary, c.Text, c.URL
			return ev, true
		}
	}
	for _, st := range statuses {
		if st.Failing() {
			ev.Name, ev.Title, ev.Summary, ev.URL = st.Context, "status "+string(st.State), st.Description, st.URL
			return ev, true
		}
	}
	return forge.Event{}, false
}

func (s *Service) ensure(ctx context.Context, p *fleet.Product, j *fleet.Job, fr string) (forge.PullRequest, bool, error) {
	if s.forge == nil {
		return forge.PullRequest{}, false, &forge.Error{Kind: forge.KindAuth,
			Message: "no forge client is configured (FLEET_GITHUB_TOKEN_FILE)"}
	}
	repo, err := forge.ParseRepo("forge.repos", fr)
	if err != nil {
		return forge.PullRequest{}, false, err
	}
	return s.forge.EnsurePullRequest(ctx, forge.PullRequestSpec{Repo: repo, Head: Branch(j.ID), Base: p.Forge.BaseBranch,
		Title: j.Title, Body: s.body(j)})
}

// body is the pull request's text: the task, the iteration, a link to the
// job and the marker.
func (s *Service) body(j *fleet.Job) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(j.Body))
	b.WriteString("\n\n---\n")
	if it := j.CurrentIteration(); it > 1 {
		fmt.Fprintf(&b, "Iteration %d, after the feedback on the previous one.\n\n", it)
	}
	if s.cfg.JobURL != nil {
		fmt.Fprintf(&b, "Job: %s\n\n", s.cfg.JobURL(j.ProductID, j.ID))
	}
	b.WriteString(Marker(j.ID))
	b.WriteString("\n")
	return b.String()
}

// failed records a failed sync and when to try again: the forge's
// retry-after when it named one, else the backoff.
func (s *Service) failed(ctx context.Context, j *fleet.Job, ferr error) error {
	var fe *forge.Error
	wait := time.Duration(0)
	if errors.As(ferr, &fe) {
		wait = fe.RetryAfter
	}
	_, err := s.k.MutateJob(ctx, j.ProductID, j.ID, func(j *fleet.Job) error {
		if !j.ForgeDue {
			return kernel.ErrNoChange
		}
		st := fleet.PRSync{}
		if j.PRSync != nil {
			st = *j.PRSync
		}
		st.Attempts++
		st.LastError = fleet.SanitizeText(ferr.Error(), 500)
		st.NextAttemptAt = s.k.Now().Add(max(wait, retry.Policy{Initial: s.cfg.Backoff, Max: s.cfg.MaxBackoff}.Delay(st.Attempts)))
		j.PRSync = &st
		return nil
	})
	s.k.Log.WarnContext(ctx, "the forge failed; the pull request sync backs off", "job", j.ID, "err", ferr)
	return err
}

// Sweep re-drives every sync that is due and returns how many ran. Idle, a
// tick is one point read of the ledger: a scan that found nothing due marks
// the sweep quiet until the earliest retry it saw.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	skip, view := s.k.Quiet(ctx, kernel.SweepForge)
	if skip {
		return 0, nil
	}
	// A job document that does not decode is skipped (kernel.JobPage),
	// not allowed to stop every sync after it.
	due, skipped, err := s.k.ScanJobs(ctx, store.Query{Where: []store.Cond{store.Eq("forgeDue", true)}})
	if err != nil {
		return 0, err
	}
	now := s.k.Now()
	var next time.Time
	n := 0
	var errs []error
	for _, j := range due {
		if j.PRSync != nil && j.PRSync.NextAttemptAt.After(now) {
			if next.IsZero() || j.PRSync.NextAttemptAt.Before(next) {
				next = j.PRSync.NextAttemptAt
			}
			continue
		}
		n++
		if err := s.Sync(ctx, j.ProductID, j.ID); err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", j.ID, err))
		}
	}
	if n == 0 && skipped == 0 { // a skipped job's next retry is unknown
		s.k.MarkQuietUntil(ctx, view, next)
	}
	return n, errors.Join(errs...)
}

// Delivery names one webhook delivery: its id and the digest of its body.
// Either seen before makes it a no-op (a redelivery keeps the id; a
// replay keeps the body).
type Delivery struct {
	ID, Digest string
	// check names a failing check on a head (iterate sets it): reported
	// again, by another delivery or the read after a sync, it is a no-op.
	check string
}

// forgeReadBound bounds what a webhook reads from the forge beyond its
// payload (a review's comments, a suite's runs).
const forgeReadBound = 5 * time.Second

func (d Delivery) keys() []string {
	var ks []string
	if d.check != "" {
		ks = append(ks, d.check)
	}
	if d.ID != "" {
		ks = append(ks, "id:"+d.ID)
	}
	if d.Digest != "" {
		ks = append(ks, "sha256:"+d.Digest)
	}
	return ks
}

// Outcome says what a webhook delivery did.
type Outcome string

const (
	Applied Outcome = "applied"
	// Ignored: nothing of the fleet's (another repository, a branch that
	// is no job's, an event for another head) or nothing to do.
	Ignored   Outcome = "ignored"
	Duplicate Outcome = "duplicate"
)

// errDuplicate refuses a move for a delivery already applied.
var errDuplicate = errors.New("delivery already applied")

// Apply acts on a verified webhook event. It says what it did and why.
func (s *Service) Apply(ctx context.Context, ev forge.Event, d Delivery) (Outcome, string, error) {
	// Cached: every delivery of every repository the forge's app sees
	// lands here, most naming nothing of the fleet's.
	all, err := s.products.CachedProducts(ctx)
	if err != nil {
		return "", "", err
	}
	candidates := fleet.ProductsFor(all, ev.Repo.String())
	if len(candidates) == 0 {
		return Ignored, fmt.Sprintf("no product's forge maps %s", ev.Repo), nil
	}
	jobID, ok := strings.CutPrefix(ev.HeadRef, "aq/job/")
	if !ok || fleet.ValidateName("jobId", jobID) != nil {
		return Ignored, fmt.Sprintf("branch %q is no job's", ev.HeadRef), nil
	}
	// The job is in one of the products that map the repository.
	var p *fleet.Product
	var j *fleet.Job
	for _, c := range candidates {
		found, err := s.k.GetJob(ctx, c.ID, jobID)
		if errors.Is(err, fleet.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", "", err
		}
		p, j = c, found
		break
	}
	if j == nil {
		return Ignored, fmt.Sprintf("no job %s in the products that map %s", jobID, ev.Repo), nil
	}
	pr := j.PullRequest
	// The repository too: a product may map several, pull request numbers
	// are small, and anyone who can push a branch named after a job to one
	// of them (a fork's pull request) must not close, merge or review the
	// job's pull request in another.
	if pr == nil || (ev.Number != 0 && ev.Number != pr.Number) || !strings.EqualFold(pr.Repo, ev.Repo.String()) {
		return Ignored, "job " + jobID + " has no such pull request in " + ev.Repo.String(), nil
	}
	if slices.ContainsFunc(d.keys(), func(k string) bool { return slices.Contains(j.ForgeDeliveries, k) }) {
		return Duplicate, "delivery already applied", nil
	}
	if (ev.Kind == forge.EventApproved || ev.Kind == forge.EventChangesRequested) && !ev.Member && !p.Forge.Names(ev.Author) {
		// A stranger's review is neither a vote nor the next iteration's
		// task for the engine.
		return Ignored, fmt.Sprintf("%s is not an owner, member or collaborator of %s, nor one of the product's forge reviewers: their review is not acted on", ev.Author, ev.Repo), nil
	}
	if (ev.Kind == forge.EventMerged || ev.Kind == forge.EventClosed) && !j.Stage.Terminal() &&
		j.Stage != fleet.StageReview && j.Stage != fleet.StageTesting {
		return s.endIteration(ctx, p, j, ev)
	}
	switch ev.Kind {
	case forge.EventMerged:
		return s.move(ctx, p, j, d, fleet.StageShipped, fleet.EventShip, "pull request #%d merged on the forge", func(j *fleet.Job) {
			j.PullRequest.State = fleet.PRMerged
		})
	case forge.EventClosed:
		return s.move(ctx, p, j, d, fleet.StageCancelled, fleet.EventCancel, "pull request #%d closed without a merge", func(j *fleet.Job) {
			j.PullRequest.State = fleet.PRClosed
		})
	}
	if j.ForgeDue {
		// Delivered again, its pull request not yet brought up to date:
		// the head recorded is the previous delivery's, so an event about
		// it is about code the job has moved on from (a late review, a
		// run cancelled by the push), and the gate's head is the new one.
		return Ignored, fmt.Sprintf("job %s was delivered again and its pull request is not brought up to date yet: %s not matched to a head", jobID, ev.Kind), nil
	}
	if ev.HeadSHA != "" && ev.HeadSHA != pr.HeadSHA {
		return Ignored, fmt.Sprintf("%s is about %.12s, not the pull request's head %.12s", ev.Kind, ev.HeadSHA, pr.HeadSHA), nil
	}
	switch ev.Kind {
	case forge.EventApproved:
		if j.Stage != fleet.StageReview || j.Review == nil {
			return Ignored, "job " + jobID + " awaits no review vote (" + string(j.Stage) + ")", nil
		}
		reviewer, ok := p.Forge.ReviewerOf(ev.Author)
		if !ok {
			return Ignored, fmt.Sprintf("%s is not in the product's forge reviewers, and its login is a name they map another login to: its approval is not that reviewer's vote", ev.Author), nil
		}
		after, err := s.life.Vote(ctx, p.ID, j.ID, review.VoteRequest{Reviewer: reviewer, Approve: true, Head: j.Review.Head,
			Comment: fleet.SanitizeText(ev.Body, fleet.MaxReviewCommentLen)})
		if err != nil {
			if c := fleet.CodeOf(err); c == fleet.CodeForbidden || c == fleet.CodeConflict {
				return Ignored, err.Error(), nil
			}
			return "", "", err
		}
		msg := reviewer + " approved"
		if merged, why := s.autoMerge(ctx, p, after); merged || why != "" {
			msg += "; " + why
		}
		return Applied, msg, nil
	case forge.EventChecksPassed:
		if merged, why := s.autoMerge(ctx, p, j); merged {
			return Applied, why, nil
		} else if why != "" {
			return Ignored, why, nil
		}
		return Ignored, "checks passed; nothing to merge", nil
	case forge.EventChangesRequested, forge.EventCheckFailed:
		return s.iterate(ctx, p, j, ev, d)
	}
	return Ignored, "nothing to do for " + string(ev.Kind), nil
}

// endIteration ends a job whose pull request was merged or closed on the
// forge while it was between deliveries (an iteration queued or running):
// the pull request it would update is gone, and delivering again would
// open a new one nobody asked for. It is cancelled as an operator's cancel
// is: at once when it holds no lease, else its holder is asked to stop.
func (s *Service) endIteration(ctx context.Context, p *fleet.Product, j *fleet.Job, ev forge.Event) (Outcome, string, error) {
	what := "closed without a merge"
	if ev.Kind == forge.EventMerged {
		what = "merged"
	}
	msg := fmt.Sprintf("pull request #%d %s on the forge during iteration %d: the iteration is cancelled",
		j.PullRequest.Number, what, j.CurrentIteration())
	_, err := s.life.CancelBySystem(ctx, "forge", p.ID, j.ID, msg)
	return s.outcome(err, msg)
}

// move is a stage move a webhook asks for, recorded with its delivery.
func (s *Service) move(ctx context.Context, p *fleet.Product, j *fleet.Job, d Delivery, to fleet.Stage, event fleet.EventType,
	format string, effect func(j *fleet.Job)) (Outcome, string, error) {
	if j.Stage.Terminal() {
		return Ignored, "job " + j.ID + " is " + string(j.Stage) + " already", nil
	}
	msg := fmt.Sprintf(format, j.PullRequest.Number)
	_, err := s.life.Move(ctx, kernel.Move{ProductID: p.ID, JobID: j.ID, To: to, Actor: fleet.ActorSystem, ActorID: "forge",
		Event: event, Message: msg, Guard: s.guard(d), Effect: func(j *fleet.Job) {
			j.SeenDelivery(d.keys()...)
			j.ForgeDue, j.PRSync = false, nil
			effect(j)
		}})
	return s.outcome(err, msg)
}

func (s *Service) guard(d Delivery) func(j *fleet.Job) error {
	return func(j *fleet.Job) error {
		if slices.ContainsFunc(d.keys(), func(k string) bool { return slices.Contains(j.ForgeDeliveries, k) }) {
			return errDuplicate
		}
		if j.PullRequest == nil {
			return fleet.Errorf(fleet.CodeConflict, "job %s has no pull request", j.ID)
		}
		return nil
	}
}

func (s *Service) outcome(err error, msg string) (Outcome, string, error) {
	switch {
	case errors.Is(err, errDuplicate):
		return Duplicate, "delivery already applied", nil
	case errors.Is(err, fleet.ErrConflict):
		// The job moved on meanwhile (an illegal move now): nothing to do.
		return Ignored, err.Error(), nil
	case err != nil:
		return "", "", err
	}
	return Applied, msg, nil
}

// iterate sends a delivered job back for another iteration with the
// feedback, or, past the product's cap, keeps it where it is and says so.
func (s *Service) iterate(ctx context.Context, p *fleet.Product, j *fleet.Job, ev forge.Event, d Delivery) (Outcome, string, error) {
	if j.Stage != fleet.StageReview && j.Stage != fleet.StageTesting {
		return Ignored, "job " + j.ID + " is " + string(j.Stage) + ", not delivered", nil
	}
	next := j.CurrentIteration() + 1
	if ev.At.IsZero() {
		ev.At = s.k.Now()
	}
	// What the webhook does not carry is read from the forge, within a
	// bound: GitHub gives up on a delivery after 10 s and never sends it
	// again, so neither a slow read nor GitHub's hang-up may cost the
	// iteration (the move below is not cancelled with the request).
	ctx = context.WithoutCancel(ctx)
	readCtx, cancel := context.WithTimeout(ctx, forgeReadBound)
	defer cancel()
	switch {
	case ev.Kind == forge.EventChangesRequested:
		ev.Body = s.withDiffComments(readCtx, j, ev)
	case ev.Kind == forge.EventCheckFailed && ev.Suite:
		ev.Text = s.failingRunsOutput(readCtx, j, ev)
	}
	if ev.Kind == forge.EventCheckFailed {
		// The same check failing on the same head, reported twice (its
		// webhook, and the read after a sync), is one piece of feedback.
		d.check = "check:" + cmp.Or(ev.HeadSHA, j.PullRequest.HeadSHA) + ":" + ev.Name
	}
	fb := feedbackOf(ev, next)
	if next > p.Forge.MaxIterations {
		msg := fmt.Sprintf("iteration %d would pass the product's cap of %d: the job waits for a person", next, p.Forge.MaxIterations)
		_, err := s.life.Move(ctx, kernel.Move{ProductID: p.ID, JobID: j.ID, To: j.Stage, MayStay: true, Actor: fleet.ActorSystem,
			ActorID: "forge", Event: fleet.EventIterationCap, Message: msg, Guard: s.guard(d), Effect: func(j *fleet.Job) {
				j.SeenDelivery(d.keys()...)
				j.AddFeedback(fleet.Feedback(fb))
			}})
		return s.outcome(err, msg)
	}
	msg := fmt.Sprintf("iteration %d: %s", next, fb.summary())
	_, err := s.life.Move(ctx, kernel.Move{ProductID: p.ID, JobID: j.ID, To: fleet.StageQueued, Actor: fleet.ActorSystem, ActorID: "forge",
		Event: fleet.EventIteration, Message: msg, Guard: s.guard(d), Effect: func(j *fleet.Job) {
			j.SeenDelivery(d.keys()...)
			j.AddFeedback(fleet.Feedback(fb))
			// No attempt spent: the work was delivered; a person or a
			// check asked for more.
			j.Iteration = next
			j.NotBefore = time.Time{}
			j.ForgeDue, j.PRSync = false, nil
			if j.Review != nil {
				// The votes were on the code sent back: the next delivery
				// is new code, for everyone to see again (as the gate's own
				// rejection clears them).
				j.Review.Head, j.Review.Votes = "", nil
				j.Review.Tally()
			}
		}})
	return s.outcome(err, msg)
}

type feedback fleet.Feedback

func (f feedback) summary() string {
	if f.Source == fleet.FeedbackCheck {
		return "check " + f.Name + " failed"
	}
	return f.Author + " asked for changes"
}

// withDiffComments is a review's text followed by its comments on lines of
// the diff, which the webhook does not carry: a review asking for changes
// may say everything in them and nothing in its body. They are read from
// the forge; when that fails the feedback says so and keeps the body (the
// review still sends the job back: its author asked for changes).
func (s *Service) withDiffComments(ctx context.Context, j *fleet.Job, ev forge.Event) string {
	if ev.ReviewID == 0 || s.forge == nil || j.PullRequest == nil {
		return ev.Body
	}
	comments, err := s.forge.ReviewComments(ctx, ev.Repo, j.PullRequest.Number, ev.ReviewID)
	var b strings.Builder
	b.WriteString(strings.TrimSpace(ev.Body))
	if err != nil {
		s.k.Log.WarnContext(ctx, "a review's comments on the diff not read", "job", j.ID, "review", ev.ReviewID, "err", err)
		fmt.Fprintf(&b, "\n\n(The review's comments on the diff could not be read: %v. See %s.)", err, ev.URL)
		return strings.TrimSpace(b.String())
	}
	for i, c := range comments {
		if i == 0 {
			b.WriteString("\n\nOn the diff:")
		}
		where := c.Path
		if c.Line > 0 {
			where += fmt.Sprintf(":%d", c.Line)
		}
		fmt.Fprintf(&b, "\n- %s: %s", where, strings.TrimSpace(c.Body))
	}
	return strings.TrimSpace(b.String())
}

// failingRunsOutput is what the failing check runs on the event's head
// say: a check suite's webhook carries no output of its own (only its
// conclusion), and the engine needs the runs' to know what to fix. When
// they cannot be read the feedback says so.
func (s *Service) failingRunsOutput(ctx context.Context, j *fleet.Job, ev forge.Event) string {
	head := cmp.Or(ev.HeadSHA, j.PullRequest.HeadSHA)
	if s.forge == nil || head == "" {
		return ""
	}
	checks, err := s.forge.Checks(ctx, ev.Repo, head)
	if err != nil {
		s.k.Log.WarnContext(ctx, "the failing check runs not read", "job", j.ID, "err", err)
		return fmt.Sprintf("(The check runs' output could not be read: %v. See %s.)", err, ev.URL)
	}
	var parts []string
	for _, c := range checks {
		if !c.Failing() {
			continue
		}
		parts = append(parts, joinNonBlank("\n", c.Name+": "+c.Conclusion, c.Title, c.Summary, c.Text))
	}
	return strings.Join(parts, "\n\n")
}

// joinNonBlank joins the parts that are not blank, trimmed, with sep: a
// check's output, whose title, summary and text may each be empty.
func joinNonBlank(sep string, parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, sep)
}

// feedbackOf is the feedback an event carries, for iteration it.
func feedbackOf(ev forge.Event, it int) feedback {
	fb := fleet.Feedback{Iteration: it, Author: ev.Author, URL: ev.URL, At: ev.At}
	if ev.Kind == forge.EventCheckFailed {
		fb.Source, fb.Name = fleet.FeedbackCheck, ev.Name
		fb.Body = joinNonBlank("\n\n", ev.Title, ev.Summary, ev.Text)
	} else {
		fb.Source, fb.Body = fleet.FeedbackReview, ev.Body
	}
	return feedback(fb)
}

// Merge merges the open pull request of j (an operator's ship, or
// autoMerge) at the head the fleet saw, with the product's method, and
// deletes its branch. A refusal (not mergeable, head moved, protection) is
// a conflict carrying the forge's reason, recorded on the job as
// merge_refused; the job stays where it is.
func (s *Service) Merge(ctx context.Context, p *fleet.Product, j *fleet.Job, actorID string) error {
	pr := j.PullRequest
	if s.forge == nil {
		return fleet.Errorf(fleet.CodeUnavailable, "job %s has pull request #%d, but no forge client is configured (FLEET_GITHUB_TOKEN_FILE) to merge it", j.ID, pr.Number)
	}
	repo, err := forge.ParseRepo("forge.repos", pr.Repo)
	if err != nil {
		return err
	}
	_, merr := s.forge.Merge(ctx, repo, pr.Number, p.Forge.MergeMethod, pr.HeadSHA)
	if merr == nil {
		if err := s.forge.DeleteBranch(ctx, repo, Branch(j.ID)); err != nil {
			s.k.Log.WarnContext(ctx, "delete a merged job's branch", "job", j.ID, "err", err)
		}
		return nil
	}
	reason := merr.Error()
	var fe *forge.Error
	if errors.As(merr, &fe) && fe.Message != "" {
		reason = fe.Message
	}
	msg := fmt.Sprintf("the forge refused to merge pull request #%d: %s", pr.Number, reason)
	ctx = context.WithoutCancel(ctx)
	if _, err := s.life.Move(ctx, kernel.Move{ProductID: j.ProductID, JobID: j.ID, To: j.Stage, MayStay: true, Actor: fleet.ActorSystem,
		ActorID: actorID, Event: fleet.EventMergeRefused, Message: msg}); err != nil {
		s.k.Log.WarnContext(ctx, "record a refused merge", "job", j.ID, "err", err)
	}
	if forge.Retryable(merr) {
		return fleet.Errorf(fleet.CodeUnavailable, "%s", msg)
	}
	return fleet.Errorf(fleet.CodeConflict, "%s", msg)
}

// autoMerge merges and ships j when its product says autoMerge, its review
// quorum is met (it is in testing) and its head passes mergeGate: every
// check run and commit status on it green, the product's required checks
// among them. It says whether it merged, or why not when that is news.
func (s *Service) autoMerge(ctx context.Context, p *fleet.Product, j *fleet.Job) (bool, string) {
	if !autoMerges(p, j) || s.forge == nil {
		return false, ""
	}
	repo, err := forge.ParseRepo("forge.repos", j.PullRequest.Repo)
	if err != nil {
		return false, err.Error()
	}
	checks, statuses, err := s.headChecks(ctx, repo, j.PullRequest.HeadSHA)
	if err != nil {
		return false, err.Error()
	}
	return s.mergeIfGreen(ctx, p, j, checks, statuses)
}

// autoMerges says j is one autoMerge would merge, its head's checks
// allowing: the product asks for it, the quorum is met, the pull request
// open.
func autoMerges(p *fleet.Product, j *fleet.Job) bool {
	return p.Forge.AutoMerge && j.Stage == fleet.StageTesting && j.PullRequest != nil && j.PullRequest.State == fleet.PROpen
}

// mergeIfGreen merges and ships j when the checks and statuses read on its
// head pass mergeGate.
func (s *Service) mergeIfGreen(ctx context.Context, p *fleet.Product, j *fleet.Job, checks []forge.Check, statuses []forge.Status) (bool, string) {
	if ok, why := mergeGate(p.Forge.RequiredChecks, checks, statuses); !ok {
		return false, why
	}
	if err := s.Merge(ctx, p, j, "forge"); err != nil {
		return false, err.Error()
	}
	msg := fmt.Sprintf("pull request #%d merged (autoMerge)", j.PullRequest.Number)
	if _, err := s.life.Move(context.WithoutCancel(ctx), kernel.Move{ProductID: j.ProductID, JobID: j.ID, To: fleet.StageShipped,
		Actor: fleet.ActorSystem, ActorID: "forge", Event: fleet.EventShip, Message: msg,
		Effect: func(j *fleet.Job) { j.PullRequest.State = fleet.PRMerged }}); err != nil {
		return true, msg + ", but the ship was not recorded: " + err.Error()
	}
	return true, msg
}

// Alerts are the conditions of a job's pull request a person should look
// at: feedback past the iteration cap, and a sync the forge keeps failing.
func Alerts(j *fleet.Job) []fleet.Alert {
	var out []fleet.Alert
	subject := j.ProductID + "/" + j.ID
	if n := len(j.Feedback); n > 0 && (j.Stage == fleet.StageReview || j.Stage == fleet.StageTesting) {
		if last := j.Feedback[n-1]; last.Iteration > j.CurrentIteration() {
			out = append(out, fleet.Alert{Kind: fleet.AlertIterationCap, Severity: fleet.SeverityWarning, Subject: subject, Since: last.At,
				Message: fmt.Sprintf("the pull request of job %s asks for iteration %d, past its product's cap: ship, reject or requeue it", j.ID, last.Iteration)})
		}
	}
	if s := j.PRSync; j.ForgeDue && s != nil && s.Attempts >= FailingAfter {
		out = append(out, fleet.Alert{Kind: fleet.AlertForgeFailing, Severity: fleet.SeverityWarning, Subject: subject, Since: j.UpdatedAt,
			Message: fmt.Sprintf("the pull request of job %s could not be opened or updated (%d tries): %s; retried at %s",
				j.ID, s.Attempts, s.LastError, s.NextAttemptAt.UTC().Format(time.RFC3339))})
	}
	return out
}
