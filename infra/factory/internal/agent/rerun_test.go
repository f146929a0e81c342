package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// fakeCoord is a one-job coordinator with the fencing rules of the real
// one: every holder call carries the lease epoch, and a stale one gets 409
// fenced and changes nothing.
type fakeCoord struct {
	mu      sync.Mutex
	job     fleet.Job
	ttl     time.Duration
	patches []api.PatchRequest
	fails   []string
	acks    []api.ReleaseRequest
	// children are the manifests posted as the job's children.
	children []string
	uploads  []upload
	// onRenew, if set, runs inside Renew when the lease is confirmed
	// (tests use it to act in the window between a fence check and the
	// write it guards).
	onRenew func(epoch int64)
	// renewedFor is the product of every renewal, in order.
	renewedFor []string
}

func newFakeCoord(id, repo string) *fakeCoord {
	return &fakeCoord{job: fleet.Job{ID: id, ProductID: "p", Repo: repo, Title: "t " + id, Body: "do it", Stage: fleet.StageQueued}, ttl: time.Minute}
}

// claim hands the job to factory f1 under a new epoch.
func (c *fakeCoord) claim() *protocol.Claimed {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.job.LeaseEpoch++
	c.job.Stage, c.job.HolderFactoryID, c.job.LeaseAcquiredAt = fleet.StageAssigned, "f1", now
	j := c.job
	return &protocol.Claimed{Job: &j, LeaseEpoch: j.LeaseEpoch, LeaseExpiresAt: now.Add(c.ttl)}
}

// requeue is an operator's requeue: the lease is revoked at once.
func (c *fakeCoord) requeue() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.job.LeaseEpoch++
	c.job.Stage, c.job.HolderFactoryID = fleet.StageQueued, ""
}

func (c *fakeCoord) fenced(epoch int64) error {
	if epoch != c.job.LeaseEpoch || !c.job.Stage.Leased() {
		return &api.Error{Status: 409, Code: "fenced", Message: "stale lease epoch"}
	}
	return nil
}

func (c *fakeCoord) Renew(_ context.Context, product, _ string, epoch int64) (protocol.Renewal, error) {
	c.mu.Lock()
	c.renewedFor = append(c.renewedFor, product)
	err := c.fenced(epoch)
	hook := c.onRenew
	c.mu.Unlock()
	if err == nil && hook != nil {
		hook(epoch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return protocol.Renewal{LeaseExpiresAt: time.Now().Add(c.ttl), CancelRequested: c.job.CancelRequested,
		PreemptRequested: c.job.PreemptRequested}, err
}
func (c *fakeCoord) Heartbeat(context.Context, api.HeartbeatRequest) (*fleet.Factory, error) {
	return &fleet.Factory{}, nil
}
func (c *fakeCoord) Accept(context.Context, api.AcceptRequest) (*protocol.Claimed, error) {
	return nil, errors.New("unused")
}
func (c *fakeCoord) GetJob(context.Context, string, string) (*fleet.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.job
	return &j, nil
}
func (c *fakeCoord) Patch(_ context.Context, _, _ string, p api.PatchRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fenced(*p.LeaseEpoch); err != nil {
		return err
	}
	c.patches = append(c.patches, p)
	if p.Checkpoint != nil {
		c.job.Checkpoint = *p.Checkpoint
	}
	if p.Stage != nil {
		c.job.Stage = *p.Stage
		if !p.Stage.Leased() {
			c.job.HolderFactoryID = ""
		}
	}
	return nil
}
func (c *fakeCoord) PostChildren(_ context.Context, _, _ string, r api.ChildrenRequest) ([]*fleet.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fenced(*r.LeaseEpoch); err != nil {
		return nil, err
	}
	for _, raw := range r.Children {
		var m string
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		c.children = append(c.children, m)
	}
	c.job.Stage, c.job.HolderFactoryID = fleet.StageBlocked, ""
	out := make([]*fleet.Job, len(r.Children))
	for i := range out {
		out[i] = &fleet.Job{ID: fmt.Sprintf("child%d", i), ParentID: c.job.ID}
	}
	return out, nil
}

// Release is a plain release, or with an outcome the acknowledgement of a
// cancel or a preemption. Like the real client, not once ctx has ended.
func (c *fakeCoord) Release(ctx context.Context, _, _ string, r api.ReleaseRequest) (*fleet.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fenced(*r.LeaseEpoch); err != nil {
		return nil, err
	}
	if r.Outcome == nil {
		c.job.Stage, c.job.HolderFactoryID = fleet.StageQueued, ""
		j := c.job
		return &j, nil
	}
	c.acks = append(c.acks, r)
	c.job.Stage, c.job.HolderFactoryID = fleet.StageCancelled, ""
	if *r.Outcome == fleet.ReleasePreempted {
		c.job.Stage = fleet.StageQueued
	}
	if r.Checkpoint != nil {
		c.job.Checkpoint = *r.Checkpoint
	}
	j := c.job
	return &j, nil
}
func (c *fakeCoord) ReportUsage(context.Context, string, string, api.UsageRequest) (*fleet.Job, error) {
	return &fleet.Job{}, nil
}

func (c *fakeCoord) Fail(_ context.Context, r api.FailRequest) (*fleet.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fenced(*r.LeaseEpoch); err != nil {
		return nil, err
	}
	c.fails = append(c.fails, *r.Reason)
	c.job.Stage, c.job.HolderFactoryID = fleet.StageFailed, ""
	j := c.job
	return &j, nil
}

// upload is an artifact the coordinator stored.
type upload struct {
	name  string
	kind  fleet.ArtifactKind
	epoch int64
	body  string
}

// UploadArtifact stores the file's bytes, fenced like every holder write.
func (c *fakeCoord) UploadArtifact(_ context.Context, _, _ string, a api.ArtifactUpload) (*fleet.Artifact, error) {
	rc, _, err := a.Open()
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		return nil, err
	}
	epoch := *a.LeaseEpoch
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fenced(epoch); err != nil {
		return nil, err
	}
	c.uploads = append(c.uploads, upload{name: a.Name, kind: a.Kind, epoch: epoch, body: string(body)})
	return &fleet.Artifact{ID: fmt.Sprintf("%s.a%d", c.job.ID, len(c.uploads)), Name: a.Name, Size: int64(len(body))}, nil
}

// uploaded lists what was stored.
func (c *fakeCoord) uploaded() []upload {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.uploads)
}

// gitRepo is an origin (bare, README on main) and a clone of it under a
// repo base, as a factory host has them.
type gitRepo struct {
	origin, base string
	seed         string // a clone to push as someone else
}

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

func newGitRepo(t *testing.T, root string) gitRepo {
	t.Helper()
	r := gitRepo{origin: filepath.Join(root, "app.git"), base: filepath.Join(root, "base"), seed: filepath.Join(root, "seed")}
	seed := r.seed
	gitT(t, root, "init", "--quiet", "--bare", "--initial-branch=main", r.origin)
	gitT(t, root, "clone", "--quiet", r.origin, seed)
	gitT(t, seed, "checkout", "--quiet", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(seed, "README.md"), []byte("# app\n"), 0o644))
	gitT(t, seed, "add", ".")
	gitT(t, seed, "commit", "--quiet", "-m", "initial")
	gitT(t, seed, "push", "--quiet", "origin", "main")
	require.NoError(t, os.MkdirAll(r.base, 0o755))
	gitT(t, r.base, "clone", "--quiet", r.origin, "app")
	return r
}

// show is a file on origin's branch, "" when either is missing.
func (r gitRepo) show(branch, file string) string {
	out, err := exec.Command("git", "-C", r.origin, "show", "refs/heads/"+branch+":"+file).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// ref is origin's branch, "" when missing.
func (r gitRepo) ref(branch string) string {
	out, err := exec.Command("git", "-C", r.origin, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// newGitAgent is an agent over a real worktree manager with one engine,
// the shell script engine.
func newGitAgent(t *testing.T, root string, repo gitRepo, api API, engine string) *Agent {
	t.Helper()
	work := filepath.Join(root, "work")
	g, err := gitwt.New(gitwt.Options{WorkDir: work, RepoBase: repo.base, GitName: "factory", GitEmail: "f@example.invalid"})
	require.NoError(t, err)
	cfg := config.Config{FactoryID: "f1", Seats: 2, RepoBase: repo.base, WorkDir: work,
		Engines: map[string]string{"sh": engine}, DefaultEngine: "sh", ShipStage: config.ShipShipped,
		KillGrace: 2 * time.Second, Checkpoint: time.Hour, DefaultWall: time.Minute, Renew: 50 * time.Millisecond}
	return New(Deps{Config: cfg, API: api, Receiver: &fakeRecv{}, Git: g, Log: slog.New(slog.DiscardHandler)})
}

// fifo makes a named pipe: opening one end blocks until the other end is
// opened, which lets a test and an engine meet without polling.
func fifo(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	return p
}

// openGate lets an engine blocked reading fifo p go on. If nobody ever
// reads it, the cleanup unblocks the writer.
func openGate(t *testing.T, p string) {
	t.Helper()
	go func() {
		if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
	}()
	t.Cleanup(func() {
		if f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

func waitRun(t *testing.T, r *jobRun, what string) Outcome {
	t.Helper()
	require.NotNil(t, r, what)
	select {
	case <-r.done:
		return r.outcome
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not end", what)
		return 0
	}
}

// TestRequeuedJobClaimedAgainRunsOnce: on the poll path, a job requeued
// while its run is alive and claimed again by the same factory must not
// run twice side by side. The old run is fenced and quarantines its own
// work only; the new run, under the newer epoch, delivers.
func TestRequeuedJobClaimedAgainRunsOnce(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	gates := t.TempDir()
	started1, gate2 := fifo(t, gates, "started1"), fifo(t, gates, "gate2")
	// Run 1 says it started, then hangs until it is stopped. Run 2 waits
	// for its gate, then writes the result.
	engine := `sh -c 'if [ "$FLEET_JOB_LEASE_EPOCH" = 1 ]; then echo first > first.txt; echo up > ` + started1 + `; exec sleep 600; fi
cat ` + gate2 + ` > /dev/null; echo second > result.txt'`
	coord := newFakeCoord("j1", "app")
	a := newGitAgent(t, root, repo, coord, engine)
	ctx := context.Background()

	r1 := a.handle(ctx, transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.NotNil(t, r1)
	up, err := os.Open(started1)
	require.NoError(t, err)
	_, _ = io.ReadAll(up)
	up.Close()

	// The operator requeues (epoch 2); this factory claims it again (3).
	coord.requeue()
	r2 := a.handle(ctx, transport.Delivery{ID: "claim:j1:3", Claimed: coord.claim()})
	require.Equal(t, OutcomeFenced, waitRun(t, r1, "the old run"))
	mirror := a.git.MirrorPath("app")
	require.Equal(t, "first", gitT(t, mirror, "show", "aq/quarantine/j1-e1:first.txt"), "the old run's work is quarantined")
	openGate(t, gate2)
	require.Equal(t, OutcomeDone, waitRun(t, r2, "the new run"), "fails: %q", coord.fails)
	a.jobs.Wait()

	coord.mu.Lock()
	defer coord.mu.Unlock()
	require.Empty(t, coord.fails, "the valid run never fails")
	require.Equal(t, fleet.StageShipped, coord.job.Stage)
	require.Equal(t, "second", repo.show("aq/job/j1", "result.txt"))
	require.Empty(t, repo.show("aq/job/j1", "first.txt"), "the old run's work is not in the result")
	require.Zero(t, a.load())
	// Only the valid run's artifacts: the fenced one uploads nothing.
	require.Len(t, coord.uploads, 2)
	for _, u := range coord.uploads {
		require.EqualValues(t, 3, u.epoch, "%s", u.name)
		require.NotContains(t, u.body, "first", "%s", u.name)
	}
}

// TestNewRunDoesNotWaitForTheOldRunsGC: the new run of a job claimed again
// waits for the old run to end (the two never work side by side), not for
// the local GC after it, which waits for any GC in progress (a GC
// request's origin pushes hold gcMu for minutes): meanwhile nothing
// renewed the new lease, which could run out before its run began.
func TestNewRunDoesNotWaitForTheOldRunsGC(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	started1 := fifo(t, t.TempDir(), "started1")
	engine := `sh -c 'if [ "$FLEET_JOB_LEASE_EPOCH" = 1 ]; then echo up > ` + started1 + `; exec sleep 600; fi
echo second > result.txt'`
	coord := newFakeCoord("j1", "app")
	renewed := make(chan struct{}, 1)
	coord.onRenew = func(epoch int64) {
		if epoch == 3 {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}
	a := newGitAgent(t, root, repo, coord, engine)
	ctx := context.Background()
	r1 := a.handle(ctx, transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.NotNil(t, r1)
	waitUp(t, started1)

	a.gcMu.Lock() // a GC request is at work
	gcHeld := true
	defer func() {
		if gcHeld {
			a.gcMu.Unlock()
		}
	}()
	coord.requeue()
	r2 := a.handle(ctx, transport.Delivery{ID: "claim:j1:3", Claimed: coord.claim()})
	require.NotNil(t, r2)
	select {
	case <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("the new run's lease was not renewed while the old run's GC waited")
	}
	gcHeld = false
	a.gcMu.Unlock()
	require.Equal(t, OutcomeFenced, waitRun(t, r1, "the old run"))
	require.Equal(t, OutcomeDone, waitRun(t, r2, "the new run"), "fails: %q", coord.fails)
	a.jobs.Wait()
	require.Equal(t, "second", repo.show("aq/job/j1", "result.txt"))
}
