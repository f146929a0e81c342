package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/protocol"
)

// maxSweepJobs bounds how many jobs one origin sweep of one repo asks the
// coordinator about; the rest wait for the next sweep.
const maxSweepJobs = 500

// terminal asks the coordinator whether a job is over. A job it does not
// know (deleted, or outside this factory's products) counts as over for
// local branches only: nothing else here would ever clean those up.
func (a *Agent) terminal(ctx context.Context, id string) (bool, error) {
	// No product: the coordinator looks the job up across the products
	// this token serves (FLEET_PRODUCT_ID names only one of them).
	j, err := a.api.GetJob(ctx, "", id)
	if errors.Is(err, api.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return j.Stage.Terminal(), nil
}

// gcLocal removes worktrees of jobs not in flight and the local branches
// GC's rules allow, and job directories nobody runs. Safe at any time:
// jobs in flight are skipped under the same locks Prepare takes.
func (a *Agent) gcLocal(ctx context.Context, when string) {
	a.gcMu.Lock()
	defer a.gcMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	rep, err := a.git.GCLocal(ctx, a.inFlight, a.terminal)
	if err != nil {
		a.log.WarnContext(ctx, "local gc", "when", when, "err", err)
	}
	if entries, err := os.ReadDir(a.jobsDir()); err == nil {
		for _, e := range entries {
			job, _, ok := gitwt.JobOfRun(e.Name())
			if !ok {
				job = e.Name() // an older layout: jobs/<id>
			}
			if !a.inFlight("", job) {
				_ = os.RemoveAll(filepath.Join(a.jobsDir(), e.Name()))
			}
		}
	}
	if len(rep.RemovedWorktrees)+len(rep.DeletedLocal)+len(rep.Kept) > 0 {
		a.log.InfoContext(ctx, "local gc", "when", when, "removedWorktrees", len(rep.RemovedWorktrees),
			"deletedBranches", rep.DeletedLocal, "kept", rep.Kept)
	}
}

// gcRequest carries out the coordinator's GC request: origin branches of
// the listed (terminal) jobs, then local state.
func (a *Agent) gcRequest(ctx context.Context, req protocol.GCRequest) {
	if req.FactoryID != a.cfg.FactoryID && req.FactoryID != a.cfg.Subscription {
		a.log.WarnContext(ctx, "gc request for another factory ignored", "for", req.FactoryID)
		return
	}
	a.gcMu.Lock()
	for _, repo := range slices.Sorted(func(yield func(string) bool) {
		for r := range req.Repos {
			if !yield(r) {
				return
			}
		}
	}) {
		a.gcRemote(ctx, repo, req.Repos[repo])
	}
	a.gcMu.Unlock()
	a.gcLocal(ctx, "gc request")
	if err := a.git.Maintain(ctx); err != nil {
		a.log.WarnContext(ctx, "git maintenance", "err", err)
	}
}

func (a *Agent) gcRemote(ctx context.Context, repo string, jobs []string) {
	if !a.hasRepo(repo) {
		return
	}
	rep, err := a.git.GCRemote(ctx, repo, jobs, a.inFlight)
	if err != nil {
		a.log.WarnContext(ctx, "origin gc", "repo", repo, "err", err)
	}
	if len(rep.DeletedRemote)+len(rep.Kept) > 0 {
		a.log.InfoContext(ctx, "origin gc", "repo", repo, "deleted", rep.DeletedRemote, "kept", rep.Kept)
	}
}

// hasRepo reports whether repo is cloned under the repo base or
// configured by URL.
func (a *Agent) hasRepo(repo string) bool {
	if _, ok := a.cfg.RepoURLs[repo]; ok {
		return true
	}
	repos, err := caps.Repos(a.cfg.RepoBase)
	return err == nil && slices.Contains(repos, repo)
}

// sweepLoop is the factory's own origin sweep, for transports that carry
// no GC requests: it asks the coordinator about every job that has a
// branch on origin and cleans up after those that are over, every
// interval on the agent's clock.
func (a *Agent) sweepLoop(ctx context.Context) {
	t := a.clock.NewTicker(a.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		a.sweep(ctx)
	}
}

func (a *Agent) sweep(ctx context.Context) {
	repos, err := caps.Repos(a.cfg.RepoBase)
	if err != nil {
		a.log.WarnContext(ctx, "origin sweep", "err", err)
		return
	}
	req := protocol.GCRequest{FactoryID: a.cfg.FactoryID, Repos: map[string][]string{}}
	for _, repo := range repos {
		ids, err := a.git.RemoteJobs(ctx, repo)
		if err != nil {
			a.log.WarnContext(ctx, "origin sweep: list branches", "repo", repo, "err", err)
			continue
		}
		for _, id := range ids[:min(len(ids), maxSweepJobs)] {
			if a.inFlight(repo, id) {
				continue
			}
			j, err := a.api.GetJob(ctx, "", id)
			if err != nil {
				// Unknown or unreadable: never grounds to delete on origin.
				continue
			}
			if j.Stage.Terminal() && j.Repo == repo {
				req.Repos[repo] = append(req.Repos[repo], id)
			}
		}
	}
	if len(req.Repos) > 0 {
		a.gcRequest(ctx, req)
	}
}
