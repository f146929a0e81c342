package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// fakeAPI answers renew and accept from settable errors.
type fakeAPI struct {
	mu        sync.Mutex
	renewErr  error
	renews    int
	acceptErr error
	accepts   int
	job       *fleet.Job
}

func (f *fakeAPI) Renew(context.Context, string, string, int64) (protocol.Renewal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renews++
	return protocol.Renewal{LeaseExpiresAt: time.Now().Add(time.Minute)}, f.renewErr
}
func (f *fakeAPI) Heartbeat(context.Context, api.HeartbeatRequest) (*fleet.Factory, error) {
	return &fleet.Factory{}, nil
}
func (f *fakeAPI) Accept(context.Context, api.AcceptRequest) (*protocol.Claimed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accepts++
	return nil, f.acceptErr
}
func (f *fakeAPI) GetJob(context.Context, string, string) (*fleet.Job, error) {
	if f.job == nil {
		return nil, &api.Error{Status: 404, Code: "not_found"}
	}
	return f.job, nil
}
func (f *fakeAPI) Patch(context.Context, string, string, api.PatchRequest) error {
	return errors.New("unused")
}
func (f *fakeAPI) Release(context.Context, string, string, api.ReleaseRequest) (*fleet.Job, error) {
	return &fleet.Job{}, nil
}
func (f *fakeAPI) UploadArtifact(context.Context, string, string, api.ArtifactUpload) (*fleet.Artifact, error) {
	return nil, errors.New("unused")
}
func (f *fakeAPI) ReportUsage(context.Context, string, string, api.UsageRequest) (*fleet.Job, error) {
	return &fleet.Job{}, nil
}

func (f *fakeAPI) Fail(context.Context, api.FailRequest) (*fleet.Job, error) {
	return nil, errors.New("unused")
}

func (f *fakeAPI) PostChildren(context.Context, string, string, api.ChildrenRequest) ([]*fleet.Job, error) {
	return nil, errors.New("unused")
}

var fenced = &api.Error{Status: 409, Code: "fenced", Message: "stale"}

func claim(ttl time.Duration) *protocol.Claimed {
	now := time.Now()
	return &protocol.Claimed{Job: &fleet.Job{ID: "j1", ProductID: "p", LeaseAcquiredAt: now}, LeaseEpoch: 3, LeaseExpiresAt: now.Add(ttl)}
}

func TestLeaseTTLFromCoordinatorClock(t *testing.T) {
	t.Parallel()
	// The coordinator's clock is an hour off ours: only the difference of
	// its two timestamps counts.
	cl := claim(90 * time.Second)
	cl.Job.LeaseAcquiredAt = cl.Job.LeaseAcquiredAt.Add(time.Hour)
	cl.LeaseExpiresAt = cl.LeaseExpiresAt.Add(time.Hour)
	l := newLease(&fakeAPI{}, clock.System{}, cl, time.Now())
	require.Equal(t, 90*time.Second, l.ttl)
	require.Equal(t, 30*time.Second, l.renewEvery(0))
	require.Equal(t, 5*time.Second, l.renewEvery(5*time.Second))

	unknown := &protocol.Claimed{Job: &fleet.Job{ID: "j1"}}
	require.Equal(t, defaultTTL, newLease(&fakeAPI{}, clock.System{}, unknown, time.Now()).ttl)
}

// TestLeaseGuard: the guard's context ends half a lease after the renewal
// that confirmed it began, on the lease's clock; a fenced renewal gives
// no guard.
func TestLeaseGuard(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		api := &fakeAPI{}
		clk := clocktest.New(time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC))
		l := newLease(api, clk, claim(10*time.Second), clk.Now())
		ctx, cancel, err := l.guard(context.Background())
		require.NoError(t, err)
		defer cancel()
		clk.Advance(5*time.Second - time.Millisecond)
		synctest.Wait()
		require.NoError(t, ctx.Err(), "the guard holds until half a lease has passed")
		clk.Advance(time.Millisecond)
		synctest.Wait()
		require.ErrorIs(t, context.Cause(ctx), context.DeadlineExceeded, "half a lease")

		api.renewErr = fenced
		_, _, err = l.guard(context.Background())
		require.ErrorIs(t, err, errFenced)
	})
}

func TestLeaseKeep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		ttl  time.Duration
		want error
	}{
		{name: "fenced stops at once", err: fenced, ttl: time.Minute, want: errFenced},
		{name: "failing for a whole lease is a loss", err: errors.New("network down"), ttl: 200 * time.Millisecond, want: errLeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := &fakeAPI{renewErr: tt.err}
			l := newLease(api, clock.System{}, claim(tt.ttl), time.Now())
			require.ErrorIs(t, keepUntilLost(t, l), tt.want)
		})
	}
}

// hungRenewals is a coordinator that never answers a renewal: each one
// hangs until its context ends, as a partitioned network does (the API
// client's timeouts and retries stretch one renewal over minutes).
type hungRenewals struct{ fakeAPI }

func (h *hungRenewals) Renew(ctx context.Context, _, _ string, _ int64) (protocol.Renewal, error) {
	<-ctx.Done()
	return protocol.Renewal{}, ctx.Err()
}

// TestLeaseKeepLostWhileARenewalHangs: the lease is lost a whole length
// after the last renewal that succeeded even when the renewal in flight
// never answers; the keeper must not wait for it to return first, or the
// engine outlives its lease by as long as the renewal takes.
func TestLeaseKeepLostWhileARenewalHangs(t *testing.T) {
	t.Parallel()
	l := newLease(&hungRenewals{}, clock.System{}, claim(200*time.Millisecond), time.Now())
	lost := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var keeping sync.WaitGroup
	keeping.Go(func() {
		l.keep(ctx, 20*time.Millisecond, slog.New(slog.DiscardHandler), func(err error) { lost <- err })
	})
	defer func() {
		cancel()
		keeping.Wait()
	}()
	select {
	case err := <-lost:
		require.ErrorIs(t, err, errLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("a renewal that never answers kept a 200 ms lease for 10 s")
	}
}

// fencedRenewals answers every renewal fenced, as the coordinator does
// once the job has another holder; like the real client, not once the
// renewal's context has ended.
type fencedRenewals struct{ fakeAPI }

func (f *fencedRenewals) Renew(ctx context.Context, _, _ string, _ int64) (protocol.Renewal, error) {
	if err := ctx.Err(); err != nil {
		return protocol.Renewal{}, err
	}
	return protocol.Renewal{}, fenced
}

// TestLeaseKeepAsksPastTheLeasesEnd: a factory that wakes past its
// lease's end (frozen, suspended) still asks the coordinator, and learns it
// was fenced, rather than failing the renewal unasked on a deadline that
// has passed (TestFactoryZombieFenced looks for "fenced").
func TestLeaseKeepAsksPastTheLeasesEnd(t *testing.T) {
	t.Parallel()
	l := newLease(&fencedRenewals{}, clock.System{}, claim(200*time.Millisecond), time.Now().Add(-time.Second))
	require.ErrorIs(t, keepUntilLost(t, l), errFenced)
}

// keepUntilLost runs l's keeper (renewing every 20 ms) until it reports a
// loss, and returns it.
func keepUntilLost(t *testing.T, l *lease) error {
	t.Helper()
	lost := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.keep(ctx, 20*time.Millisecond, slog.New(slog.DiscardHandler), func(err error) { lost <- err })
	select {
	case err := <-lost:
		return err
	default:
		t.Fatal("keep returned without reporting a loss")
		return nil
	}
}

// fakeRecv records settlements.
type fakeRecv struct {
	completed, abandoned []string
}

func (f *fakeRecv) Receive(context.Context, int, time.Duration) ([]transport.Delivery, error) {
	return nil, nil
}
func (f *fakeRecv) Complete(_ context.Context, d transport.Delivery) error {
	f.completed = append(f.completed, d.ID)
	return nil
}
func (f *fakeRecv) Abandon(_ context.Context, d transport.Delivery) error {
	f.abandoned = append(f.abandoned, d.ID)
	return nil
}
func (f *fakeRecv) Close(context.Context) error { return nil }

// TestAcceptSettlement: complete-on-claim. A stale dispatch (409, 404) is
// completed and nothing runs; a transient failure abandons the message so
// it is delivered again; a job this factory already runs is not started
// twice.
func TestAcceptSettlement(t *testing.T) {
	t.Parallel()
	msg := protocol.DispatchMessage{JobID: "j1", ProductID: "p", TargetFactoryID: "f1", DispatchEpoch: 4}
	tests := []struct {
		name                 string
		acceptErr            error
		running              int64 // dispatch epoch of a run in flight, 0 for none
		completed, abandoned int
		accepts              int
	}{
		{name: "taken", acceptErr: &api.Error{Status: 409, Code: "conflict"}, completed: 1, accepts: 1},
		{name: "gone", acceptErr: &api.Error{Status: 404, Code: "not_found"}, completed: 1, accepts: 1},
		{name: "refused", acceptErr: &api.Error{Status: 403, Code: "forbidden"}, completed: 1, accepts: 1},
		{name: "coordinator down", acceptErr: &api.Error{Status: 503, Code: "unavailable"}, abandoned: 1, accepts: 1},
		{name: "network", acceptErr: errors.New("connection refused"), abandoned: 1, accepts: 1},
		{name: "duplicate of a running job", running: 4, completed: 1},
		// Requeued and dispatched again while the old run lives: the
		// accept decides (here someone else won it).
		{name: "newer dispatch of a running job", running: 3, acceptErr: &api.Error{Status: 409, Code: "conflict"}, completed: 1, accepts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			recv := &fakeRecv{}
			api := &fakeAPI{acceptErr: tt.acceptErr}
			a := New(Deps{Config: config.Config{FactoryID: "f1", Seats: 1},
				API: api, Receiver: recv, Log: slog.New(slog.DiscardHandler)})
			if tt.running > 0 {
				a.running["j1"] = &jobRun{id: "j1", epoch: 1, dispatchEpoch: tt.running}
			}
			r := a.handle(context.Background(), transport.Delivery{ID: msg.MessageID(), Dispatch: &msg})
			require.Nil(t, r, "no job started")
			require.Equal(t, tt.accepts, api.accepts)
			require.Len(t, recv.completed, tt.completed)
			require.Len(t, recv.abandoned, tt.abandoned)
		})
	}
}

// TestAdoptLostAccept: an accept whose answer was lost comes back as a
// conflict; if the coordinator shows the job assigned to this factory
// under the same dispatch, the factory adopts it.
func TestAdoptLostAccept(t *testing.T) {
	t.Parallel()
	msg := protocol.DispatchMessage{JobID: "j1", ProductID: "p", TargetFactoryID: "f1", DispatchEpoch: 4}
	mine := &fleet.Job{ID: "j1", ProductID: "p", Stage: fleet.StageAssigned, HolderFactoryID: "f1", DispatchEpoch: 4, LeaseEpoch: 7}
	a := New(Deps{Config: config.Config{FactoryID: "f1"},
		API: &fakeAPI{job: mine}, Receiver: &fakeRecv{}, Log: slog.New(slog.DiscardHandler)})
	cl := a.adopt(context.Background(), msg)
	require.NotNil(t, cl)
	require.EqualValues(t, 7, cl.LeaseEpoch)

	for _, other := range []*fleet.Job{
		{ID: "j1", Stage: fleet.StageAssigned, HolderFactoryID: "f2", DispatchEpoch: 4},
		{ID: "j1", Stage: fleet.StageBuilding, HolderFactoryID: "f1", DispatchEpoch: 4},
		{ID: "j1", Stage: fleet.StageAssigned, HolderFactoryID: "f1", DispatchEpoch: 5},
	} {
		a := New(Deps{Config: config.Config{FactoryID: "f1"},
			API: &fakeAPI{job: other}, Receiver: &fakeRecv{}, Log: slog.New(slog.DiscardHandler)})
		require.Nil(t, a.adopt(context.Background(), msg))
	}
}

// scopedAPI refuses, like the coordinator, any capability outside scope.
type scopedAPI struct {
	fakeAPI
	scope []string
	sent  []string
}

func (s *scopedAPI) Heartbeat(_ context.Context, hb api.HeartbeatRequest) (*fleet.Factory, error) {
	for i, c := range hb.Capabilities {
		if !slices.Contains(s.scope, c) {
			return nil, &api.Error{Status: 403, Code: "forbidden", Field: fmt.Sprintf("capabilities[%d]", i)}
		}
	}
	s.sent = hb.Capabilities
	return &fleet.Factory{}, nil
}

// TestHeartbeatWithinTokenScope: a factory whose token was enrolled with a
// capability list advertises only the detected capabilities inside it.
func TestHeartbeatWithinTokenScope(t *testing.T) {
	t.Parallel()
	api := &scopedAPI{scope: []string{"os:linux", "engine:claude"}}
	env := caps.Env{GOOS: "linux", GOARCH: "amd64", LookPath: func(f string) (string, error) { return "/bin/" + f, nil }}
	cfg := config.Config{FactoryID: "f1", Seats: 2, RepoBase: t.TempDir(), Engines: map[string]string{"claude": "claude -p"}}
	a := New(Deps{Config: cfg, API: api, Receiver: &fakeRecv{}, Env: env, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, a.heartbeat(context.Background(), fleet.HealthOK))
	require.Equal(t, []string{"os:linux", "engine:claude"}, api.sent)

	// Dropped for good: the next beat sends the narrowed list at once.
	api.sent = nil
	require.NoError(t, a.heartbeat(context.Background(), fleet.HealthOK))
	require.Equal(t, []string{"os:linux", "engine:claude"}, api.sent)
}

func TestScrubEnv(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=/bin", "FLEET_FACTORY_TOKEN=ft_x", "FLEET_FACTORY_TOKEN_FILE=/run/secrets/token", "FLEET_FACTORY_TOKENS=kept", "HOME=/root",
		"FLEET_NATS_URL=nats://user:pass@broker:4222", "IDENTITY_ENDPOINT=http://localhost:42356/msi/token", "IDENTITY_HEADER=secret",
		"ServiceBus__fullyQualifiedNamespace=ns.servicebus.windows.net", "ServiceBus__clientId=c1", "MSI_SECRET=s", "ANTHROPIC_API_KEY=kept"}
	require.Equal(t, []string{"PATH=/bin", "FLEET_FACTORY_TOKENS=kept", "HOME=/root", "ANTHROPIC_API_KEY=kept"}, scrubEnv(env),
		"the factory's own credentials go, the engine's stay")
	require.Len(t, env, 12, "the input is not modified")
}
