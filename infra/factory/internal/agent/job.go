package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// outputTail is how much of the engine's output a failure report quotes.
const outputTail = 1500

// shipHookTimeout bounds the ship hook (e.g. opening a pull request).
const shipHookTimeout = 5 * time.Minute

// jobRun is one run of a job on this factory: the job under one lease
// epoch.
type jobRun struct {
	id, repo      string
	epoch         int64 // lease epoch
	dispatchEpoch int64
	cancel        context.CancelCauseFunc
	// ended is closed once the run has ended (delivered, failed, released
	// or quarantined), before the local GC after it; done once that GC is
	// over too.
	ended, done chan struct{}
	outcome     Outcome
	// lease is the run's lease: its keeper renews it, and so does a
	// control message, to have the coordinator confirm it.
	lease *lease
}

// start runs cl's job in the background under a seat. There is at most
// one live run per job here: a claim under a newer epoch of a job that is
// still running (requeued or reaped, then claimed again by this factory)
// supersedes the old run, which is fenced by definition. The old run is
// stopped and the new one waits until it has quarantined its work, so the
// two never work side by side; their files and branches are keyed by
// epoch besides. A claim no newer than the running one is ignored.
func (a *Agent) start(ctx context.Context, cl *protocol.Claimed, received time.Time) *jobRun {
	j := cl.Job
	// The job's life is its own: a shutdown cancels it explicitly (with
	// errShutdown), so it can checkpoint and release on the way out.
	jctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r := &jobRun{id: j.ID, repo: j.Repo, epoch: cl.LeaseEpoch, dispatchEpoch: j.DispatchEpoch, cancel: cancel,
		ended: make(chan struct{}), done: make(chan struct{}), lease: newLease(a.api, a.clock, cl, received)}
	a.mu.Lock()
	prev := a.running[j.ID]
	if prev != nil && prev.epoch >= r.epoch {
		a.mu.Unlock()
		cancel(nil)
		a.log.WarnContext(ctx, "claim no newer than the run in flight ignored", "job", j.ID,
			"leaseEpoch", r.epoch, "runningEpoch", prev.epoch)
		return nil
	}
	a.running[j.ID] = r
	a.mu.Unlock()
	if prev != nil {
		a.log.WarnContext(ctx, "job claimed again under a newer lease: stopping the old run first", "job", j.ID,
			"leaseEpoch", r.epoch, "oldEpoch", prev.epoch)
		prev.cancel(errFenced)
	}
	signal(a.changed)
	a.jobs.Go(func() {
		defer close(r.done)
		defer cancel(nil)
		if prev != nil {
			// Not prev.done: the GC after it may wait long for gcMu, and
			// nothing renews this run's lease before runJob.
			<-prev.ended
		}
		r.outcome = a.runJob(jctx, cancel, cl, r.lease)
		a.mu.Lock()
		if a.running[j.ID] == r {
			delete(a.running, j.ID)
		}
		a.mu.Unlock()
		close(r.ended)
		signal(a.freed)
		signal(a.changed)
		a.gcLocal(context.WithoutCancel(ctx), "after job "+j.ID)
	})
	return r
}

// job is the state of one run, shared by its steps.
type job struct {
	a     *Agent
	cl    *protocol.Claimed
	j     *fleet.Job
	lease *lease
	log   *slog.Logger
	ctx   context.Context // ends on fence, lease loss or shutdown

	dir     string // jobs/<id>-e<epoch>: prompt and log
	logPath string
	// logw writes to engine.log, within its cap: the engine's output and
	// the ship hook's go through it. eventsw writes a structured engine's
	// events file, within the same cap, once it has one.
	logw, eventsw *cappedFile
	wt            *gitwt.Worktree

	// uploaded names the run's artifacts the coordinator stored, so a
	// step that fails after the upload does not upload them again, and
	// the next one uploads those that failed.
	uploaded map[string]bool

	// lastWIP is the commit last pushed to aq/wip/<id>. Only the job's
	// goroutine and, while the engine runs, its checkpoint ticker touch
	// the worktree, never both at once (runEngine waits for the ticker).
	lastWIP string

	engine string // the engine running the job, once picked
	// user is the account the engine runs as: the run's seat uid, the one
	// FLEET_ENGINE_USER, or nil for the factory's own.
	user  *engine.User
	usage usageMeter
	// overUSD is set when the engine was stopped for passing budget.usd.
	overUSD bool
	// out is a structured engine's output as parsed so far (nil for a
	// template engine); activity is when the engine last wrote anything.
	out      *stream.Reader
	activity *stream.Activity
	// resumed is the engine session the run resumed, "" for a new one;
	// noResume is set once a resume failed, so the run starts afresh.
	resumed string
	// threadBefore is what a resumed Codex thread had used before this
	// run (its rollout's last total); zero otherwise.
	threadBefore stream.Usage
	noResume     bool
	// stopCause is why the engine was stopped, nil when it ended by
	// itself; exit is how its process ended.
	stopCause error
	exit      *fleet.RunExit
}

// runJob takes one claimed job from building to delivered or failed.
func (a *Agent) runJob(ctx context.Context, cancel context.CancelCauseFunc, cl *protocol.Claimed, l *lease) Outcome {
	j := cl.Job
	log := a.log.With("job", j.ID, "product", j.ProductID, "repo", j.Repo, "leaseEpoch", cl.LeaseEpoch)
	jb := &job{a: a, cl: cl, j: j, log: log, ctx: ctx, lease: l}
	log.InfoContext(ctx, "job claimed", "title", j.Title, "checkpoint", j.Checkpoint)

	keepCtx, stopKeep := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() {
		jb.lease.keep(keepCtx, jb.lease.renewEvery(a.cfg.Renew), log, func(cause error) { cancel(cause) })
	})
	defer func() {
		stopKeep()
		bg.Wait()
	}()

	if err := fleet.ValidateName("jobId", j.ID); err != nil {
		return jb.fail(fleet.FailInvalidJob, err.Error(), false)
	}
	if err := fleet.ValidateName("repo", j.Repo); err != nil {
		return jb.fail(fleet.FailInvalidJob, err.Error(), false)
	}
	if err := a.api.Patch(ctx, j.ProductID, j.ID, api.PatchRequest{Stage: api.Ptr(fleet.StageBuilding), LeaseEpoch: api.Ptr(cl.LeaseEpoch)}); err != nil {
		if !jb.reached(fleet.StageBuilding, err) {
			return jb.stopped(err, "start building")
		}
	}
	jb.dir = filepath.Join(a.jobsDir(), gitwt.RunName(j.ID, cl.LeaseEpoch))
	if err := os.MkdirAll(jb.dir, a.dirMode()); err != nil {
		return jb.fail(fleet.FailGit, fmt.Sprintf("create job dir: %v", err), true)
	}
	defer os.RemoveAll(jb.dir)
	jb.logPath = filepath.Join(jb.dir, "engine.log")
	logw, err := jb.openCapped(jb.logPath, artifactLog)
	if err != nil {
		return jb.fail(fleet.FailGit, fmt.Sprintf("open the run's log: %v", err), true)
	}
	jb.logw = logw
	defer jb.closeOutput()
	u, releaseUser, err := jb.runUser()
	if err != nil {
		return jb.fail(fleet.FailNoEngine, fmt.Sprintf("no account for the engine: %v", err), true)
	}
	defer releaseUser()
	jb.user = u

	name, tmpl, err := a.engineFor(j)
	if err != nil {
		return jb.fail(fleet.FailNoEngine, err.Error(), true)
	}
	jb.engine = name
	if err := jb.createUsageFile(); err != nil {
		return jb.fail(fleet.FailGit, fmt.Sprintf("create usage file: %v", err), true)
	}
	wt, err := a.git.Prepare(ctx, gitwt.Run{Repo: j.Repo, Job: j.ID, Epoch: cl.LeaseEpoch, Checkpoint: checkpointBranch(j.Checkpoint)})
	if err != nil {
		return jb.stopped(err, "prepare worktree")
	}
	jb.wt = wt
	if jb.user != nil {
		// The engine's user gets the worktree's files, and only it may
		// enter the worktree; the git directory (in the mirror) stays the
		// factory's, read-only to it. Closed first: no other process of
		// the user enters the tree while it is handed over.
		err := os.Chmod(wt.Path, 0o700)
		if err == nil {
			err = jb.user.Give(wt.Path)
		}
		if a.seats != nil {
			// Seats pass through the repo's worktree directory to their
			// own, and list nobody's.
			err = errors.Join(err, os.Chmod(filepath.Dir(wt.Path), 0o711))
		}
		if err != nil {
			return jb.fail(fleet.FailGit, fmt.Sprintf("hand the worktree to %s: %v", jb.user.Name, err), true)
		}
	}
	jb.lastWIP = ""
	if wt.Resumed {
		jb.lastWIP = wt.Base
	}
	log.InfoContext(ctx, "worktree ready", "path", wt.Path, "base", wt.Base, "resumed", wt.Resumed, "engine", name)

	res, runErr := jb.runEngine(name, tmpl)
	if runErr == nil && jb.resumeFailed(res) {
		// The session could not be resumed after all: the work is in the
		// worktree, so a fresh session goes on from there.
		log.WarnContext(ctx, "the resumed engine session ended at once; running the engine afresh", "session", jb.resumed)
		jb.noResume, jb.resumed, jb.threadBefore = true, "", stream.Usage{}
		res, runErr = jb.runEngine(name, tmpl)
	}
	if runErr != nil {
		// The engine never ran: a factory problem, so another may do better.
		if cause := context.Cause(ctx); cause != nil {
			return jb.stopped(cause, "start engine")
		}
		return jb.fail(fleet.FailNoEngine, runErr.Error(), true)
	}
	log.InfoContext(ctx, "engine finished", "engine", name, "result", res.String(), "exit", jb.exit.Reason)
	if jb.out != nil {
		f := jb.out.Facts()
		log.InfoContext(ctx, "engine output", "outcome", f.Outcome, "session", f.Session, "turns", f.Turns, "usd", f.Usage.USD,
			"events", f.Events, "overlongLines", f.Overlong, "malformedLines", f.Malformed, "rateLimited", f.Limited())
	}
	if errors.Is(jb.stopCause, errEngineIdle) {
		jb.checkpoint(ctx, "engine idle")
		return jb.fail(fleet.FailEngineIdle, fmt.Sprintf("engine %s wrote nothing for %s; it and its process group were stopped",
			name, a.cfg.EngineIdle), true)
	}
	graced := errors.Is(jb.stopCause, errExitGrace)
	if res.Stopped && !graced {
		cause := context.Cause(ctx)
		if cause == nil && jb.overUSD {
			jb.checkpoint(ctx, "budget exceeded")
			u, _ := jb.finalUsage()
			spent := ""
			if earlier := j.Budget.USD - jb.usdLeft(); earlier > 0 {
				spent = fmt.Sprintf(", after %.4f spent by the earlier iterations", earlier)
			}
			return jb.fail(fleet.FailBudget, fmt.Sprintf("usd budget %.2f exceeded (the engine reported %.4f%s); engine %s and its process group killed",
				j.Budget.USD, u.USD, spent, name), false)
		}
		if cause == nil {
			cause = errBudget
		}
		if errors.Is(cause, errBudget) {
			jb.checkpoint(ctx, "budget exceeded")
			capped := ""
			if asked := time.Duration(j.Budget.Wall); asked > jb.wall() {
				capped = fmt.Sprintf(" (the factory's %s; the job asked for %s)", config.EnvMaxWall, asked)
			}
			return jb.fail(fleet.FailBudget, fmt.Sprintf("wall budget %s%s exhausted; engine %s and its process group killed", jb.wall(), capped, name), false)
		}
		return jb.stopped(cause, "engine")
	}
	if out, failed := jb.judge(name, res, graced); failed {
		return out
	}
	children, err := jb.proposedChildren()
	if err != nil {
		return jb.fail(fleet.FailInvalidChildren, err.Error(), false)
	}
	if len(children) > 0 {
		return jb.postChildren(children)
	}
	return jb.deliver()
}

// checkpointBranch is the branch of a checkpoint: a delivery for review
// records branch@sha, the head its reviewers vote on.
func checkpointBranch(cp string) string {
	branch, _, _ := strings.Cut(cp, "@")
	return branch
}

// engineFor picks the engine a job asks for (engine:<name> among its
// capabilities), else the default one.
func (a *Agent) engineFor(j *fleet.Job) (string, string, error) {
	for _, c := range j.Capabilities {
		if name, ok := strings.CutPrefix(c, "engine:"); ok {
			if t, ok := a.cfg.Engines[name]; ok {
				return name, t, nil
			}
			return "", "", fmt.Errorf("job needs engine %s; this factory has %s", name, strings.Join(slices.Sorted(maps.Keys(a.cfg.Engines)), ", "))
		}
	}
	t, ok := a.cfg.Engines[a.cfg.DefaultEngine]
	if !ok {
		return "", "", errors.New("no default engine configured")
	}
	return a.cfg.DefaultEngine, t, nil
}

// wall is the run's wall budget: the job's budget.wall, else the
// factory's default, never past the factory's cap (the manifest bounds
// budget.wall by nothing, and a run holds a seat as long as it lasts).
func (jb *job) wall() time.Duration {
	w := time.Duration(jb.j.Budget.Wall)
	if w <= 0 {
		w = jb.a.cfg.DefaultWall
	}
	return min(w, jb.maxWall())
}

// maxWall is the factory's cap on a run's wall budget.
func (jb *job) maxWall() time.Duration {
	if m := jb.a.cfg.MaxWall; m > 0 {
		return m
	}
	return config.DefaultMaxWall
}

// runEngine runs the engine in the worktree under the wall budget, with a
// checkpoint on the configured cadence while it runs.
func (jb *job) runEngine(name, tmpl string) (engine.Result, error) {
	a, j := jb.a, jb.j
	promptPath := filepath.Join(jb.dir, "prompt.md")
	// An iteration the forge asked for carries its feedback in the prompt
	// too, so an engine that reads only the prompt still sees it.
	prompt := j.Body
	feedback := strings.Join(forgeFeedback(j), "\n\n")
	if feedback != "" {
		prompt += fmt.Sprintf("\n\n---\n\n## Feedback on your pull request (iteration %d)\n\n%s\n", j.CurrentIteration(), feedback)
	}
	if err := os.WriteFile(promptPath, []byte(prompt), 0o600); err != nil {
		return engine.Result{}, err
	}
	if err := jb.writeOwned(jb.feedbackPath(), feedback); err != nil {
		return engine.Result{}, err
	}
	if jb.user != nil {
		if err := os.Chown(promptPath, int(jb.user.UID), int(jb.user.GID)); err != nil {
			return engine.Result{}, err
		}
	}
	personaPath, err := jb.writePersona()
	if err != nil {
		return engine.Result{}, err
	}
	if err := jb.writeReviewFeedback(); err != nil {
		return engine.Result{}, err
	}
	if err := os.Mkdir(jb.childrenDir(), a.dirMode()); err != nil && !errors.Is(err, os.ErrExist) {
		return engine.Result{}, err
	}
	if jb.user != nil {
		if err := errors.Join(os.Chown(jb.childrenDir(), int(jb.user.UID), int(jb.user.GID)), os.Chmod(jb.childrenDir(), 0o700)); err != nil {
			return engine.Result{}, err
		}
	}
	env := jb.env(name, promptPath)
	if jb.user != nil {
		env = jb.user.Env(env)
		if a.seats != nil {
			// Not the shared /tmp, where other seats could read its files.
			env = append(env, "TMPDIR="+jb.user.Home)
		}
	}
	var spec engine.Spec
	var stdinPath string
	if preset, ok := a.cfg.Presets[name]; ok {
		spec, stdinPath, err = jb.presetSpec(name, preset, prompt, personaPath, env)
		if err != nil {
			return engine.Result{}, fmt.Errorf("engine %s: %w", name, err)
		}
	} else {
		vars := engine.Vars{Prompt: prompt, PromptFile: promptPath, PersonaFile: personaPath, FeedbackFile: jb.feedbackPath(), JobID: j.ID, Repo: j.Repo, Title: j.Title,
			Branch: gitwt.JobBranch(j.ID), Worktree: jb.wt.Path}
		exp, err := engine.Expand(tmpl, vars)
		if err != nil {
			return engine.Result{}, fmt.Errorf("engine %s: %w", name, err)
		}
		spec = engine.Spec{Argv: exp.Argv, Env: append(env, exp.Env...)}
		if !exp.UsesPrompt {
			stdinPath = promptPath
		}
	}
	spec.Dir, spec.LogPath, spec.Grace, spec.Contain, spec.Run = jb.wt.Path, jb.logPath, a.cfg.KillGrace, a.contain, filepath.Base(jb.dir)
	spec.User = jb.user
	if stdinPath != "" {
		f, err := os.Open(stdinPath)
		if err != nil {
			return engine.Result{}, err
		}
		defer f.Close()
		spec.Stdin = f
	}
	out, err := jb.watchOutput(&spec)
	if err != nil {
		return engine.Result{}, err
	}
	defer out.Close()
	// The wall budget is on the agent's clock, as the watchdog is.
	wctx, cancel := withinCause(a.clock, jb.ctx, jb.wall(), errBudget)
	defer cancel()
	ectx, stopEngine := context.WithCancelCause(wctx)
	defer stopEngine(nil)
	// The run's engine is known from the start, whether or not it reports
	// usage.
	if err := jb.reportUsage(jb.ctx, name, fleet.Usage{}, fleet.EngineFacts{}); err != nil {
		jb.log.WarnContext(jb.ctx, "report the engine", "err", err)
	}
	cpCtx, stopCP := context.WithCancel(jb.ctx)
	var cp sync.WaitGroup
	// The checkpoint cadence is on the agent's clock, its ticker made
	// before the engine starts: the first interval counts from here.
	t := a.clock.NewTicker(a.cfg.Checkpoint)
	cp.Go(func() {
		defer t.Stop()
		for {
			select {
			case <-cpCtx.Done():
				return
			case <-t.C():
				// Usage first: an engine past its budget.usd is stopped
				// like one past its wall budget.
				if jb.meterUsage(jb.ctx) && !jb.overUSD {
					jb.overUSD = true
					jb.log.WarnContext(jb.ctx, "usd budget exceeded: stopping the engine", "budgetUsd", j.Budget.USD)
					stopEngine(errUSDBudget)
				}
				jb.checkpoint(jb.ctx, "periodic")
			}
		}
	})
	cp.Go(func() {
		switch v := out.watchdog(a).Watch(cpCtx); v {
		case stream.VerdictIdle:
			jb.log.WarnContext(jb.ctx, "the engine wrote nothing for the idle timeout: stopping it", "idleTimeout", a.cfg.EngineIdle.String())
			stopEngine(errEngineIdle)
		case stream.VerdictExitGrace:
			jb.log.WarnContext(jb.ctx, "the engine gave its result and did not exit: ending it", "exitGrace", a.cfg.EngineExitGrace.String())
			stopEngine(errExitGrace)
		}
	})
	spec.Started = func(pgid int) {
		jb.log.InfoContext(jb.ctx, "engine started", "engine", name, "pgid", pgid, "argv0", spec.Argv[0], "resume", jb.resumed)
	}
	stopShip := jb.shipLog()
	res, err := engine.Run(ectx, spec)
	// The output has ended (Run returns once it has all been read): the
	// transcript's unterminated last line goes to the log now, before the
	// shipper sends the rest, or only the artifact would have it.
	if eerr := out.end(); eerr != nil {
		jb.log.WarnContext(jb.ctx, "end the engine's output", "err", eerr)
	}
	jb.endOutput("engine")
	stopShip()
	if res.Leftover != nil {
		jb.log.ErrorContext(jb.ctx, "processes of the run outlived it", "err", res.Leftover)
	}
	stopCP()
	cp.Wait()
	jb.stopCause = context.Cause(ectx)
	if err == nil {
		jb.exit = runExit(res, jb.stopCause)
	}
	if !jb.overUSD && jb.meterUsage(jb.ctx) && res.Stopped {
		jb.overUSD = true
	}
	return res, err
}

// personaPath is where the job's persona instructions are written: the
// job directory, outside the worktree, so they are never committed.
func (jb *job) personaPath() string { return filepath.Join(jb.dir, "persona.md") }

// writePersona writes the instructions of the profile version the job was
// submitted with (an empty file when it names none, so a template using
// @persona-file works for every job) and returns the file's path.
func (jb *job) writePersona() (string, error) {
	var body string
	if p := jb.j.Profile; p != nil {
		body = p.Body
	}
	path := jb.personaPath()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return "", err
	}
	if jb.user != nil {
		if err := os.Chown(path, int(jb.user.UID), int(jb.user.GID)); err != nil {
			return "", err
		}
	}
	return path, nil
}

// reviewFeedbackPath is where the feedback of the rejection that sent the
// job back is written for the engine: the job directory, never committed.
func (jb *job) reviewFeedbackPath() string { return filepath.Join(jb.dir, "review-feedback.md") }

// writeReviewFeedback writes review.feedback (an empty file when there is
// none, so an engine may read it unconditionally).
func (jb *job) writeReviewFeedback() error {
	var body string
	if r := jb.j.Review; r != nil {
		body = r.Feedback
	}
	path := jb.reviewFeedbackPath()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return err
	}
	if jb.user != nil {
		return os.Chown(path, int(jb.user.UID), int(jb.user.GID))
	}
	return nil
}

// feedbackPath is where the forge's feedback that asked for this
// iteration is written for the engine (empty on the first): the job
// directory, never committed.
func (jb *job) feedbackPath() string { return filepath.Join(jb.dir, "feedback.md") }

// writeOwned writes a file of the job directory the engine reads, owned
// by the engine's account when it has one.
func (jb *job) writeOwned(path, body string) error {
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return err
	}
	if jb.user != nil {
		return os.Chown(path, int(jb.user.UID), int(jb.user.GID))
	}
	return nil
}

// childrenDir is where the engine may write child manifests (*.md): the
// job directory, outside the worktree.
func (jb *job) childrenDir() string { return filepath.Join(jb.dir, "children") }

// proposedChildren reads the manifests the engine wrote to its children
// directory, in name order. Only the count and size are checked here; the
// coordinator checks the manifests.
func (jb *job) proposedChildren() ([]string, error) {
	entries, err := os.ReadDir(jb.childrenDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		if len(out) == fleet.MaxChildrenPerRequest {
			return nil, fmt.Errorf("the engine proposed more than %d children", fleet.MaxChildrenPerRequest)
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		if !info.Mode().IsRegular() || info.Size() > fleet.MaxManifestBytes {
			return nil, fmt.Errorf("child manifest %s is not a regular file of at most %d bytes", e.Name(), fleet.MaxManifestBytes)
		}
		b, err := os.ReadFile(filepath.Join(jb.childrenDir(), e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, nil
}

// postChildren hands the job's children to the coordinator: the work so
// far is checkpointed (the job's next step resumes from it), then the
// children are posted under the lease, which releases it: the job waits
// for them in blocked, holding no seat here.
func (jb *job) postChildren(manifests []string) Outcome {
	ctx := jb.ctx
	jb.checkpoint(ctx, "children proposed")
	if err := jb.uploadArtifacts(ctx); err != nil {
		// Not marked as uploaded: if posting the children fails too, the
		// step that ends the run uploads them.
		jb.log.WarnContext(ctx, "artifacts not uploaded before posting the children", "err", err)
	}
	// Posting children ends the run: its usage is reported first.
	jb.meterUsage(ctx)
	kids, err := jb.a.api.PostChildren(ctx, jb.j.ProductID, jb.j.ID, api.ChildrenRequest{LeaseEpoch: &jb.cl.LeaseEpoch, Children: api.ChildManifests(manifests)})
	if err != nil {
		if api.IsPermanent(err) && !errors.Is(err, api.ErrFenced) && !errors.Is(err, api.ErrConflict) {
			return jb.fail(fleet.FailInvalidChildren, err.Error(), false)
		}
		return jb.stopped(err, "post children")
	}
	ids := make([]string, len(kids))
	for i, k := range kids {
		ids[i] = k.ID
	}
	jb.log.InfoContext(ctx, "children posted; the job waits for them without a seat", "children", ids)
	lctx, cancel := jb.localCtx()
	defer cancel()
	if err := jb.wt.Remove(lctx); err != nil {
		jb.log.WarnContext(lctx, "remove worktree", "err", err)
	}
	return OutcomeDone
}

// factorySecrets are the variables that let a process act as the factory:
// its coordinator token, its broker (a NATS URL may carry credentials), and
// its managed identity (Container Apps and App Service hand a process the
// endpoint and the secret header that get tokens for it; the pool's
// identity may read and send every factory's dispatch messages).
var factorySecrets = []string{
	config.EnvToken, config.EnvTokenFile, config.EnvNATSURL,
	config.EnvServiceBusNS, config.EnvServiceBusClientID,
	"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "IDENTITY_SERVER_THUMBPRINT", "MSI_ENDPOINT", "MSI_SECRET",
}

// scrubEnv is env without the factory's secrets: the engine runs
// arbitrary code and must not act as the factory.
func scrubEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(factorySecrets, k)
	})
}

// env is the engine's environment: the factory's, without its token, plus
// the job's facts.
func (jb *job) env(engineName, promptPath string) []string {
	j := jb.j
	env := scrubEnv(os.Environ())
	var profile, profileVersion string
	if p := j.Profile; p != nil {
		profile, profileVersion = p.Name, strconv.FormatInt(p.Version, 10)
	}
	return append(env,
		"FLEET_JOB_PERSONA_FILE="+jb.personaPath(),
		"FLEET_JOB_REVIEW_FEEDBACK_FILE="+jb.reviewFeedbackPath(),
		"FLEET_JOB_FEEDBACK_FILE="+jb.feedbackPath(),
		"FLEET_JOB_ITERATION="+strconv.Itoa(j.CurrentIteration()),
		"FLEET_JOB_CHILDREN_DIR="+jb.childrenDir(),
		"FLEET_JOB_CHILDREN="+strings.Join(j.Children, ","),
		"FLEET_JOB_USAGE_FILE="+jb.usagePath(),
		"FLEET_JOB_PROFILE="+profile,
		"FLEET_JOB_PROFILE_VERSION="+profileVersion,
		"FLEET_FACTORY_ID="+jb.a.cfg.FactoryID,
		"FLEET_ENGINE="+engineName,
		"FLEET_JOB_ID="+j.ID,
		"FLEET_JOB_PRODUCT_ID="+j.ProductID,
		"FLEET_JOB_REPO="+j.Repo,
		"FLEET_JOB_TITLE="+j.Title,
		"FLEET_JOB_PRIORITY="+string(j.Priority),
		"FLEET_JOB_PERSONA="+j.Persona,
		"FLEET_JOB_PROMPT_FILE="+promptPath,
		"FLEET_JOB_BRANCH="+gitwt.JobBranch(j.ID),
		"FLEET_JOB_BASE_BRANCH="+jb.wt.DefaultBranch,
		"FLEET_JOB_WORKTREE="+jb.wt.Path,
		"FLEET_JOB_LEASE_EPOCH="+strconv.FormatInt(jb.cl.LeaseEpoch, 10),
		"FLEET_JOB_ATTEMPT="+strconv.Itoa(j.Attempts+1),
		"FLEET_JOB_RESUMED="+strconv.FormatBool(jb.wt.Resumed),
		"FLEET_JOB_WALL="+jb.wall().String(),
	)
}

// localTimeout bounds a step of a run that must finish even when the
// job's context ended (committing, quarantining, reporting).
const localTimeout = 2 * time.Minute

// localCtx is for local work that must finish even when the job's context
// ended (committing, quarantining, reporting): localTimeout on the
// factory's clock.
func (jb *job) localCtx() (context.Context, context.CancelFunc) {
	return jb.a.within(context.WithoutCancel(jb.ctx), localTimeout)
}

// checkpoint commits the worktree and pushes it to aq/wip/<id> under a
// fresh fence, then records it on the job. Best effort: a failed
// checkpoint only means a crash would lose more.
func (jb *job) checkpoint(ctx context.Context, why string) {
	if jb.wt == nil || ctx.Err() != nil {
		return
	}
	// The commit is local and must not be cut short by a fence arriving
	// meanwhile: a half-done commit would leave the worktree locked for
	// the quarantine that follows.
	lctx, cancel := jb.localCtx()
	defer cancel()
	if _, err := jb.wt.Commit(lctx, fmt.Sprintf("fleet: checkpoint of job %s (%s)", jb.j.ID, why)); err != nil {
		jb.log.WarnContext(ctx, "checkpoint commit", "err", err)
		return
	}
	head, err := jb.wt.Head(lctx)
	if err != nil || head == jb.lastWIP || (jb.lastWIP == "" && head == jb.wt.Base) {
		return
	}
	wip := gitwt.WIPBranch(jb.j.ID)
	if err := jb.push(ctx, wip); err != nil {
		jb.log.WarnContext(ctx, "checkpoint not pushed", "err", err)
		return
	}
	jb.lastWIP = head
	if err := jb.a.api.Patch(ctx, jb.j.ProductID, jb.j.ID, api.PatchRequest{LeaseEpoch: &jb.cl.LeaseEpoch, Checkpoint: &wip}); err != nil {
		jb.log.WarnContext(ctx, "checkpoint record", "err", err)
		return
	}
	jb.log.InfoContext(ctx, "checkpoint", "why", why, "branch", wip, "commit", head)
}

// deliver commits the result, pushes aq/job/<id>, runs the ship hook and
// hands the job to its next stage. Every remote write is fenced first; a
// fence after the push takes the pushed branch back.
//
// Each local step has its own time (localCtx): the push and the ship hook
// may take minutes, and must not use up the uploads' or the worktree's.
func (jb *job) deliver() Outcome {
	a, j, ctx := jb.a, jb.j, jb.ctx
	changed, head, diff, diffErr, err := jb.commitResult()
	if err != nil {
		return jb.stopped(err, "commit result")
	}
	if !changed {
		jb.log.InfoContext(ctx, "the engine changed nothing; delivering the unchanged branch")
	}
	if diffErr != nil {
		jb.log.WarnContext(ctx, "diff stat", "err", diffErr)
	}
	branch := gitwt.JobBranch(j.ID)
	if err := jb.push(ctx, branch); err != nil {
		if errors.Is(err, errPushOutlived) {
			// The push may have landed after the lease could have moved
			// on: take it back.
			jb.unpush(branch, head)
		}
		return jb.stopped(err, "push result")
	}
	if a.cfg.ShipHook != "" {
		hctx, cancel, err := jb.lease.guard(ctx)
		if err != nil {
			jb.unpush(branch, head)
			return jb.stopped(err, "confirm lease before ship hook")
		}
		err = jb.shipHook(hctx, head, changed)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				jb.unpush(branch, head)
				return jb.stopped(context.Cause(ctx), "ship hook")
			}
			return jb.fail(fleet.FailShipHook, err.Error(), true)
		}
	}
	next := fleet.Stage(a.cfg.ShipStage)
	delivered := branch
	if j.Review != nil {
		// The reviewers vote on this commit: a later push to the branch
		// is another head.
		next, delivered = fleet.StageReview, branch+"@"+head
	}
	jb.local(func(ctx context.Context) { _ = jb.uploadArtifacts(ctx) }) // each failure logged
	u, facts := jb.finalUsage()
	final := api.PatchRequest{Stage: &next, LeaseEpoch: &jb.cl.LeaseEpoch, Checkpoint: &delivered, Usage: u, EngineFacts: facts}
	if head != "" {
		final.Head = &head
	}
	if diffErr == nil {
		final.Diff = &diff
	}
	if err := a.api.Patch(ctx, j.ProductID, j.ID, final); err != nil {
		if !jb.reached(next, err) {
			if errors.Is(err, api.ErrFenced) || errors.Is(err, errFenced) {
				jb.unpush(branch, head)
			}
			return jb.stopped(err, "hand over to "+string(next))
		}
	}
	jb.log.InfoContext(ctx, "job delivered", "stage", next, "branch", branch, "commit", head, "changed", changed)
	jb.local(jb.removeWorktree)
	return OutcomeDone
}

// commitResult commits the result, under a local step's time of its own:
// whether anything changed, the commit, and its diff stat (or why not).
func (jb *job) commitResult() (changed bool, head string, diff fleet.DiffStat, diffErr, err error) {
	ctx, cancel := jb.localCtx()
	defer cancel()
	j := jb.j
	changed, err = jb.wt.Commit(ctx, fmt.Sprintf("%s\n\nfleet job %s", firstLine(j.Title, "fleet job "+j.ID), j.ID))
	if err != nil {
		return false, "", diff, nil, err
	}
	if head, err = jb.wt.Head(ctx); err != nil {
		return false, "", diff, nil, err
	}
	diff, diffErr = jb.wt.DiffStat(ctx)
	return changed, head, diff, diffErr, nil
}

// local runs step under a localCtx of its own.
func (jb *job) local(step func(context.Context)) {
	ctx, cancel := jb.localCtx()
	defer cancel()
	step(ctx)
}

// removeWorktree removes the run's worktree, if it has one.
func (jb *job) removeWorktree(ctx context.Context) {
	if jb.wt == nil {
		return
	}
	if err := jb.wt.Remove(ctx); err != nil {
		jb.log.WarnContext(ctx, "remove worktree", "err", err)
	}
}

// errPushOutlived is a push cut short by its lease guard: it may have
// landed after the lease could have moved on.
var errPushOutlived = fmt.Errorf("%w: the push outlived the lease guard", errLeaseLost)

// push sets origin's branch to the worktree's HEAD under a fresh fence: a
// lease check against the coordinator right before (which fails at once
// when an operator's cancel or requeue revoked the lease), the write under
// a deadline of half a lease from that check, and a lease on the commit
// this run last saw on origin, so a newer holder's push made between the
// check and the write is never overwritten. A branch that moved while the
// lease is still ours was moved by someone without it (a stale holder's
// late push): the holder's view wins, after a second check.
func (jb *job) push(ctx context.Context, branch string) error {
	for attempt := 1; ; attempt++ {
		// Checked once the push holds the repo's lock: a wait for it must
		// neither hide a revocation nor count against the guard.
		var gctx context.Context
		err := jb.wt.PushFenced(ctx, branch, func(ctx context.Context) (context.Context, context.CancelFunc, error) {
			c, cancel, err := jb.lease.guard(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("confirm lease before pushing %s: %w", branch, err)
			}
			gctx = c
			return c, cancel, nil
		})
		outlived := gctx != nil && errors.Is(context.Cause(gctx), context.DeadlineExceeded) && ctx.Err() == nil
		switch {
		case err == nil:
			return nil
		case outlived:
			return fmt.Errorf("%w: %w", errPushOutlived, err)
		case errors.Is(err, gitwt.ErrRefMoved) && attempt == 1:
			sha, rerr := jb.wt.Refresh(ctx, branch)
			if rerr != nil {
				return errors.Join(err, rerr)
			}
			jb.log.WarnContext(ctx, "branch moved on origin by someone else; checking the lease again", "branch", branch, "now", sha)
		default:
			return err
		}
	}
}

// unpush deletes a branch this run pushed, if it still holds our commit.
func (jb *job) unpush(branch, sha string) {
	ctx, cancel := jb.localCtx()
	defer cancel()
	if err := jb.wt.DeleteRemote(ctx, branch, sha); err != nil {
		jb.log.ErrorContext(ctx, "could not take back a branch pushed before the fence", "branch", branch, "err", err)
		return
	}
	jb.log.WarnContext(ctx, "took back a branch pushed before the fence", "branch", branch)
}

// shipHook runs the configured command after the push.
func (jb *job) shipHook(ctx context.Context, head string, changed bool) error {
	exp, err := engine.Expand(jb.a.cfg.ShipHook, engine.Vars{JobID: jb.j.ID, Repo: jb.j.Repo, Title: jb.j.Title,
		Branch: gitwt.JobBranch(jb.j.ID), Worktree: jb.wt.Path, PromptFile: filepath.Join(jb.dir, "prompt.md"),
		PersonaFile: jb.personaPath()})
	if err != nil {
		return fmt.Errorf("ship hook: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, shipHookTimeout)
	defer cancel()
	env := append(jb.env(jb.a.cfg.DefaultEngine, filepath.Join(jb.dir, "prompt.md")),
		"FLEET_JOB_HEAD="+head, "FLEET_JOB_CHANGED="+strconv.FormatBool(changed),
		"FLEET_JOB_RESULT_BRANCH="+gitwt.JobBranch(jb.j.ID))
	// The hook is the operator's and runs as the factory, in a worktree
	// whose files the engine wrote: its git must not follow them.
	env = jb.wt.CommandEnv(append(env, exp.Env...))
	res, err := engine.Run(ctx, engine.Spec{Argv: exp.Argv, Dir: jb.wt.Path, Env: env, LogPath: jb.logPath, Grace: jb.a.cfg.KillGrace,
		Contain: jb.a.contain, Run: filepath.Base(jb.dir) + "-hook", Stdout: jb.logw, Stderr: jb.logw})
	jb.endOutput("ship hook")
	if err != nil {
		return fmt.Errorf("ship hook: %w", err)
	}
	if !res.Success() {
		msg := "ship hook " + res.String()
		if tail := strings.TrimSpace(engine.Tail(jb.logPath, outputTail)); tail != "" {
			msg += "; last output:\n" + tail
		}
		return errors.New(msg)
	}
	return nil
}

// reached reports whether a failed stage change did in fact happen: a
// request whose answer was lost and that the coordinator applied.
func (jb *job) reached(stage fleet.Stage, err error) bool {
	if api.IsPermanent(err) && !errors.Is(err, api.ErrFenced) && !errors.Is(err, api.ErrConflict) {
		return false
	}
	ctx, cancel := jb.localCtx()
	defer cancel()
	cur, gerr := jb.a.api.GetJob(ctx, jb.j.ProductID, jb.j.ID)
	return gerr == nil && cur.Stage == stage && cur.LeaseEpoch == jb.cl.LeaseEpoch &&
		(cur.HolderFactoryID == jb.a.cfg.FactoryID || !stage.Leased())
}

// stopped ends a job that could not go on, by what stopped it.
func (jb *job) stopped(err error, step string) Outcome {
	cause := err
	if c := context.Cause(jb.ctx); c != nil {
		cause = c
	}
	switch {
	case errors.Is(cause, errFenced), errors.Is(cause, errLeaseLost), errors.Is(cause, api.ErrFenced):
		return jb.quarantine(step, cause)
	case errors.Is(cause, errShutdown):
		return jb.release()
	case errors.Is(cause, errCancelRequested):
		return jb.acknowledge(fleet.ReleaseCancelled)
	case errors.Is(cause, errPreemptRequested):
		return jb.acknowledge(fleet.ReleasePreempted)
	}
	return jb.fail(fleet.FailGit, fmt.Sprintf("%s: %v", step, err), true)
}

// quarantine keeps the work of a job whose lease is gone on a local branch
// that is never pushed, and reports nothing: the job is someone else's.
func (jb *job) quarantine(step string, cause error) Outcome {
	ctx, cancel := jb.localCtx()
	defer cancel()
	jb.log.WarnContext(ctx, "lease lost: quarantining the work; nothing is pushed or shipped", "step", step, "cause", cause)
	if jb.wt == nil {
		return OutcomeFenced
	}
	branch, err := jb.wt.Quarantine(ctx)
	if err != nil {
		jb.log.ErrorContext(ctx, "quarantine", "err", err)
	} else {
		jb.log.InfoContext(ctx, "work quarantined", "localBranch", branch)
	}
	return OutcomeFenced
}

// release checkpoints and gives the job back to the queue at once, so
// another factory resumes it without waiting for the lease to expire.
// The job's own context ended with the shutdown: each step runs under a
// local step's time of its own, so a checkpoint whose push hangs leaves
// the release, which frees the lease, its time.
func (jb *job) release() Outcome {
	jb.closingSteps("shutdown")
	ctx, cancel := jb.localCtx()
	defer cancel()
	if _, err := jb.a.api.Release(ctx, jb.j.ProductID, jb.j.ID, api.ReleaseRequest{LeaseEpoch: &jb.cl.LeaseEpoch}); err != nil {
		jb.log.WarnContext(ctx, "release on shutdown; the reaper will requeue the job", "err", err)
	} else {
		jb.log.InfoContext(ctx, "job released on shutdown", "checkpoint", jb.lastWIP)
	}
	jb.local(jb.removeWorktree)
	return OutcomeInterrupted
}

// closingSteps are what a run stopped early does before it gives the job
// back: checkpoint the work, upload the artifacts and report what it
// spent (a release carries no usage), each under a local step's time of
// its own.
func (jb *job) closingSteps(why string) {
	jb.local(func(ctx context.Context) { jb.checkpoint(ctx, why) })
	jb.local(func(ctx context.Context) { _ = jb.uploadArtifacts(ctx) }) // each failure logged
	jb.local(func(ctx context.Context) { jb.meterUsage(ctx) })
}

// acknowledge answers a cancel or a preemption: the engine's process group
// is already stopped (the job's context ended with the request as cause);
// the work so far is checkpointed to aq/wip/<id> and the lease released
// with the outcome, naming the checkpoint. A cancelled job's WIP stays on
// the origin for a person to look at; a preempted one resumes from it.
//
// As for release, each step has a local step's time of its own.
func (jb *job) acknowledge(outcome fleet.ReleaseOutcome) Outcome {
	jb.closingSteps(string(outcome))
	ctx, cancel := jb.localCtx()
	defer cancel()
	ack := api.ReleaseRequest{LeaseEpoch: &jb.cl.LeaseEpoch, Outcome: &outcome}
	if jb.lastWIP != "" {
		wip := gitwt.WIPBranch(jb.j.ID)
		ack.Checkpoint = &wip
	}
	if _, err := jb.a.api.Release(ctx, jb.j.ProductID, jb.j.ID, ack); err != nil {
		if errors.Is(err, api.ErrFenced) {
			// The grace ran out first: the coordinator forced it.
			return jb.quarantine("acknowledge "+string(outcome), err)
		}
		jb.log.ErrorContext(ctx, "could not acknowledge; the coordinator forces it after the grace", "outcome", outcome, "err", err)
	} else {
		jb.log.InfoContext(ctx, "stop acknowledged", "outcome", outcome, "checkpoint", jb.lastWIP)
	}
	jb.local(jb.removeWorktree)
	return OutcomeStopped
}

// fail reports the failure at once (which frees the lease) and removes the
// worktree; its work is on aq/wip/<id> when a checkpoint could be pushed.
func (jb *job) fail(kind fleet.FailureKind, detail string, retryable bool) Outcome {
	ctx, cancel := jb.localCtx()
	defer cancel()
	// Sanitised and bounded: it quotes engine output, and a failure must
	// never be unreportable for its text.
	reason := SanitizeReason(string(kind) + ": " + detail)
	jb.log.ErrorContext(ctx, "job failed", "reason", reason, "retryable", retryable)
	_ = jb.uploadArtifacts(ctx) // each failure logged
	u, facts := jb.finalUsage()
	var cooldowns map[string]time.Time
	if kind == fleet.FailRateLimited {
		// With the failure, so the coordinator has them before it gives
		// the job back, heartbeats or not (an elastic execution sends
		// none).
		cooldowns = jb.a.cool.active()
	}
	if _, err := jb.a.api.Fail(ctx, api.FailRequest{JobID: jb.j.ID, ProductID: jb.j.ProductID, LeaseEpoch: &jb.cl.LeaseEpoch,
		Reason: &reason, Retryable: &retryable, Usage: u, Kind: kind, EngineFacts: facts, Cooldowns: cooldowns}); err != nil {
		if errors.Is(err, api.ErrFenced) {
			return jb.quarantine("report failure", err)
		}
		jb.log.ErrorContext(ctx, "could not report the failure; the reaper will requeue the job", "err", err)
	}
	if jb.wt != nil {
		if err := jb.wt.Remove(ctx); err != nil {
			jb.log.WarnContext(ctx, "remove worktree", "err", err)
		}
	}
	return OutcomeFailed
}

func firstLine(s, def string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if s == "" {
		return def
	}
	return s
}
