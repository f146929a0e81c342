package gitwt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/fleet"
)

// The GC rules. Whatever a request or the coordinator says, GC
//
//   - never touches the worktree or branches of a job in flight here;
//   - deletes a local branch only when its commit is on origin (any branch)
//     or the job is over (terminal on the coordinator);
//   - deletes origin's aq/job/<id> only when the job is over and the branch
//     is merged into the default branch;
//   - deletes origin's aq/wip/<id> only when the job is over and the
//     checkpoint is contained in the default branch or in aq/job/<id>;
//   - deletes on origin with a lease on the commit it examined, so a
//     branch that moved meanwhile is kept.
//
// So unmerged work is never deleted: a failed job's checkpoint stays until
// an operator requeues the job (which resumes from it) or deletes it.

// InFlight reports whether a job is running on this factory.
type InFlight func(repo, job string) bool

// Terminal reports whether a job is over (shipped, failed, dead_letter,
// cancelled) according to the coordinator. An error keeps what it guards.
type Terminal func(ctx context.Context, job string) (bool, error)

// Report is what one GC pass did.
type Report struct {
	RemovedWorktrees []string `json:"removedWorktrees,omitempty"`
	DeletedLocal     []string `json:"deletedLocal,omitempty"`
	DeletedRemote    []string `json:"deletedRemote,omitempty"`
	// Kept lists what a rule protected, with the rule.
	Kept []string `json:"kept,omitempty"`
}

func (r *Report) merge(o Report) {
	r.RemovedWorktrees = append(r.RemovedWorktrees, o.RemovedWorktrees...)
	r.DeletedLocal = append(r.DeletedLocal, o.DeletedLocal...)
	r.DeletedRemote = append(r.DeletedRemote, o.DeletedRemote...)
	r.Kept = append(r.Kept, o.Kept...)
}

// Repos lists the repos that have a mirror here.
func (m *Manager) Repos() ([]string, error) {
	entries, err := os.ReadDir(m.mirrorsDir())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".git"); ok && e.IsDir() && fleet.ValidateName("repo", name) == nil {
			out = append(out, name)
		}
	}
	return out, nil
}

// GCLocal removes every worktree of a job not in flight and the local
// branches the rules allow, in every mirror. It needs no network except
// for terminal, which it asks only about branches whose commit is not on
// origin.
func (m *Manager) GCLocal(ctx context.Context, inFlight InFlight, terminal Terminal) (Report, error) {
	repos, err := m.Repos()
	if err != nil {
		return Report{}, err
	}
	var total Report
	var errs []error
	for _, repo := range repos {
		r, err := m.gcLocalRepo(ctx, repo, inFlight, terminal)
		total.merge(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("gc %s: %w", repo, err))
		}
	}
	return total, errors.Join(errs...)
}

func (m *Manager) gcLocalRepo(ctx context.Context, repo string, inFlight InFlight, terminal Terminal) (Report, error) {
	var rep Report
	unlock, err := m.lock(ctx, repo)
	if err != nil {
		return rep, err
	}
	defer unlock()
	dir := m.MirrorPath(repo)
	root := filepath.Join(m.worktreesDir(), repo)

	// Worktrees: registered ones and directories git does not know (a
	// crash between mkdir and registration) alike.
	checkedOut := map[string]bool{}
	out, err := git(ctx, dir, "worktree", "list", "--porcelain")
	if err != nil {
		return rep, err
	}
	var path string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "worktree "):
			path = strings.TrimPrefix(line, "worktree ")
		case strings.HasPrefix(line, "branch "):
			job, ok := jobOfPath(root, path)
			if ok && inFlight(repo, job) {
				checkedOut[strings.TrimPrefix(line, "branch refs/heads/")] = true
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil && !os.IsNotExist(err) {
		return rep, err
	}
	for _, e := range entries {
		// Every run of a job in flight is kept, older ones too: one may
		// still be quarantining its work.
		if job, _, ok := JobOfRun(e.Name()); ok && inFlight(repo, job) {
			continue
		}
		p := filepath.Join(root, e.Name())
		if err := m.removeWorktree(ctx, dir, p); err != nil {
			return rep, err
		}
		rep.RemovedWorktrees = append(rep.RemovedWorktrees, p)
	}
	if _, err := git(ctx, dir, "worktree", "prune"); err != nil {
		return rep, err
	}

	// Local branches of jobs.
	locals, err := refs(ctx, dir, "refs/heads/aq/")
	if err != nil {
		return rep, err
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range locals {
			if !yield(k) {
				return
			}
		}
	})
	for _, ref := range names {
		sha := locals[ref]
		branch := strings.TrimPrefix(ref, "refs/heads/")
		job, ok := JobOfBranch(branch)
		if !ok || inFlight(repo, job) || checkedOut[branch] {
			continue
		}
		safe, why, err := m.localDeletable(ctx, dir, job, sha, terminal)
		if err != nil {
			rep.Kept = append(rep.Kept, fmt.Sprintf("%s/%s: %v", repo, branch, err))
			continue
		}
		if !safe {
			rep.Kept = append(rep.Kept, fmt.Sprintf("%s/%s: %s", repo, branch, why))
			continue
		}
		if _, err := git(ctx, dir, "branch", "-D", "--quiet", branch); err != nil {
			return rep, err
		}
		rep.DeletedLocal = append(rep.DeletedLocal, repo+"/"+branch)
	}
	return rep, nil
}

// localDeletable applies the local-branch rule.
func (m *Manager) localDeletable(ctx context.Context, dir, job, sha string, terminal Terminal) (bool, string, error) {
	pushed, err := onOrigin(ctx, dir, sha)
	if err != nil {
		return false, "", err
	}
	if pushed {
		return true, "", nil
	}
	if terminal == nil {
		return false, "work not on origin", nil
	}
	over, err := terminal(ctx, job)
	if err != nil {
		return false, "", err
	}
	if !over {
		return false, "work not on origin and the job is not over", nil
	}
	return true, "", nil
}

// jobOfPath is the job id of a worktree path under root.
func jobOfPath(root, path string) (string, bool) {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." || strings.ContainsRune(rel, filepath.Separator) || strings.HasPrefix(rel, "..") {
		return "", false
	}
	id, _, ok := JobOfRun(rel)
	return id, ok
}

// JobOfBranch is the job id of an aq/job, aq/wip, aq/run or aq/quarantine
// branch.
func JobOfBranch(branch string) (string, bool) {
	for _, p := range []string{JobPrefix, WIPPrefix} {
		if id, ok := strings.CutPrefix(branch, p); ok {
			return id, fleet.ValidateName("job", id) == nil
		}
	}
	for _, p := range []string{RunPrefix, QuarantinePrefix} {
		if rest, ok := strings.CutPrefix(branch, p); ok {
			id, _, ok := JobOfRun(rest)
			return id, ok
		}
	}
	return "", false
}

// RemoteJobs lists the job ids that have an aq/job or aq/wip branch on
// repo's origin, after a fetch.
func (m *Manager) RemoteJobs(ctx context.Context, repo string) ([]string, error) {
	unlock, err := m.lock(ctx, repo)
	if err != nil {
		return nil, err
	}
	defer unlock()
	dir, err := m.sync(ctx, repo)
	if err != nil {
		return nil, err
	}
	rs, err := refs(ctx, dir, "refs/remotes/origin/aq/")
	if err != nil {
		return nil, err
	}
	var ids []string
	for ref := range rs {
		branch := strings.TrimPrefix(ref, "refs/remotes/origin/")
		if !strings.HasPrefix(branch, JobPrefix) && !strings.HasPrefix(branch, WIPPrefix) {
			continue
		}
		if id, ok := JobOfBranch(branch); ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// GCRemote deletes, on repo's origin, the branches of the given jobs that
// the rules allow. terminalJobs must hold only jobs the coordinator says
// are over; jobs in flight here are skipped whatever the list says.
func (m *Manager) GCRemote(ctx context.Context, repo string, terminalJobs []string, inFlight InFlight) (Report, error) {
	var rep Report
	unlock, err := m.lock(ctx, repo)
	if err != nil {
		return rep, err
	}
	defer unlock()
	dir, err := m.sync(ctx, repo)
	if err != nil {
		return rep, err
	}
	def, err := defaultBranch(ctx, dir)
	if err != nil {
		return rep, err
	}
	remote, err := refs(ctx, dir, "refs/remotes/origin/aq/")
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, job := range terminalJobs {
		if fleet.ValidateName("job", job) != nil || inFlight(repo, job) {
			continue
		}
		jobRef := "refs/remotes/origin/" + JobBranch(job)
		jobSHA, hasJob := remote[jobRef]
		if hasJob {
			merged, err := isAncestor(ctx, dir, jobSHA, def)
			switch {
			case err != nil:
				errs = append(errs, err)
			case !merged:
				rep.Kept = append(rep.Kept, fmt.Sprintf("%s/%s: not merged into %s", repo, JobBranch(job), strings.TrimPrefix(def, "refs/remotes/origin/")))
			default:
				if err := pushDelete(ctx, dir, JobBranch(job), jobSHA); err != nil {
					errs = append(errs, err)
				} else {
					rep.DeletedRemote = append(rep.DeletedRemote, repo+"/"+JobBranch(job))
				}
			}
		}
		wipSHA, hasWIP := remote["refs/remotes/origin/"+WIPBranch(job)]
		if !hasWIP {
			continue
		}
		contained, err := isAncestor(ctx, dir, wipSHA, def)
		if err == nil && !contained && hasJob {
			contained, err = isAncestor(ctx, dir, wipSHA, jobSHA)
		}
		switch {
		case err != nil:
			errs = append(errs, err)
		case !contained:
			rep.Kept = append(rep.Kept, fmt.Sprintf("%s/%s: checkpoint holds work found in no result or default branch", repo, WIPBranch(job)))
		default:
			if err := pushDelete(ctx, dir, WIPBranch(job), wipSHA); err != nil {
				errs = append(errs, err)
			} else {
				rep.DeletedRemote = append(rep.DeletedRemote, repo+"/"+WIPBranch(job))
			}
		}
	}
	if _, err := git(ctx, dir, "fetch", "--quiet", "--prune", "--no-tags", "origin"); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// Maintain runs git's own housekeeping on every mirror, under each repo's
// lock, so it never races a worktree being added or a push.
func (m *Manager) Maintain(ctx context.Context) error {
	repos, err := m.Repos()
	if err != nil {
		return err
	}
	var errs []error
	for _, repo := range repos {
		unlock, err := m.lock(ctx, repo)
		if err == nil {
			// gc.auto is 0 in mirrors (see create); give this run a threshold.
			_, err = git(ctx, m.MirrorPath(repo), "-c", "gc.auto=6700", "gc", "--auto", "--quiet")
			unlock()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
