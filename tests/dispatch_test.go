package tests

import (
	"context"
	"fmt"
	"github.com/gigafactory/fleet/shared/bus/nats/natsserver"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	natsbus "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/protocol"
)

// busStack starts the stack with push dispatch on its embedded NATS server.
func busStack(t *testing.T, env ...string) *Stack {
	t.Helper()
	s := startStack(t, append([]string{"FLEET_BUS=nats"}, env...)...)
	require.NotEmpty(t, s.NATS, "the stack announced no NATS server")
	return s
}

// factoryClient is a factory's side of the bus: its subscription.
type factoryClient struct {
	t      *testing.T
	id     string
	token  string
	client *natsbus.Client
}

func newFactoryClient(t *testing.T, natsURL, id, token string) *factoryClient {
	t.Helper()
	ctx := context.Background()
	// A factory's connection: its fleet token, bound to the streams the
	// coordinator made, limited to its own subscription.
	c, err := natsbus.Open(ctx, natsURL, natsbus.Options{Name: "test-" + id, AckWait: 2 * time.Second, Bind: true,
		ConnOptions: natsbus.FactoryConnOptions(id, token)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.EnsureSubscription(ctx, id))
	return &factoryClient{t: t, id: id, token: token, client: c}
}

// receive waits for the next dispatch message of this factory.
func (f *factoryClient) receive(within time.Duration) (bus.Delivery, protocol.DispatchMessage) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		ds, err := f.client.Receive(ctx, f.id, 1, within)
		require.NoError(f.t, err, "receive for %s", f.id)
		if len(ds) == 0 {
			f.t.Fatalf("no dispatch message for %s within %s", f.id, within)
		}
		dec, err := bus.Decode(ds[0])
		require.NoError(f.t, err)
		if dec.Dispatch == nil {
			require.NoError(f.t, f.client.Complete(ctx, ds[0])) // a GC request: not what we wait for
			continue
		}
		return ds[0], *dec.Dispatch
	}
}

// accept is the push transport's claim.
func (f *factoryClient) accept(s *Stack, m protocol.DispatchMessage) Response {
	f.t.Helper()
	return s.As(f.token, http.MethodPost, "/accept", m.ProductID, map[string]any{"jobId": m.JobID, "dispatchEpoch": m.DispatchEpoch})
}

// TestPushDispatchLifecycle: submit -> the targeted factory receives a small
// message -> accept -> complete -> ship, with no claim polling anywhere.
func TestPushDispatchLifecycle(t *testing.T) {
	t.Parallel()
	s := busStack(t)
	s.Product("demo", "r1")
	tok := s.Factory("f1", "demo", 2, []string{"os:linux", "engine:claude"}, []string{"r1"})
	s.Factory("f2", "demo", 2, []string{"os:linux"}, []string{"r1"}) // lacks engine:claude
	f1 := newFactoryClient(t, s.NATS, "f1", tok)

	id := s.Submit("demo", Manifest("Push me", "r1", "os:linux", "engine:claude"))
	d, m := f1.receive(10 * time.Second)
	require.Equal(t, id, m.JobID)
	require.Equal(t, "f1", m.TargetFactoryID)
	require.EqualValues(t, 1, m.DispatchEpoch)
	require.Equal(t, id+":1", d.ID, "MessageID is jobId:dispatchEpoch")
	require.Equal(t, "r1", m.Repo)
	require.NotContains(t, string(d.Body), "Do Push me", "the message never carries the job body")

	r := f1.accept(s, m)
	require.Equal(t, http.StatusOK, r.Status, "accept: %s", r.Body)
	epoch := r.Map(t)["leaseEpoch"]
	require.NoError(t, f1.client.Complete(context.Background(), d), "complete-on-claim")

	for _, stage := range []string{"building", "shipped"} {
		r = s.As(tok, http.MethodPatch, "/jobs/"+id, "demo", map[string]any{"stage": stage, "leaseEpoch": epoch})
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", stage, r.Body)
	}
	job := s.Job("demo", id)
	require.Equal(t, "shipped", job["stage"])
	require.Equal(t, "f1", job["targetFactoryId"])

	// The coordinator's metrics see the subscription (a factory may not
	// read the stream's counts) and what it did.
	var metrics struct {
		Adapters struct {
			Bus struct {
				SubscriptionDepth map[string]int64 `json:"subscriptionDepth"`
			} `json:"bus"`
			Store struct {
				Writes int64 `json:"writes"`
			} `json:"store"`
		} `json:"adapters"`
		Coordinator struct {
			Dispatched int64 `json:"dispatched"`
			Claims     int64 `json:"claims"`
		} `json:"coordinator"`
	}
	r = s.Op(http.MethodGet, "/metrics", "demo", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &metrics)
	f1Depth, ok := metrics.Adapters.Bus.SubscriptionDepth["f1"]
	require.True(t, ok, "f1's depth is reported: %s", r.Body)
	require.Zero(t, f1Depth, "nothing left in f1's subscription")
	require.EqualValues(t, 1, metrics.Coordinator.Dispatched)
	require.EqualValues(t, 1, metrics.Coordinator.Claims)
	require.Positive(t, metrics.Adapters.Store.Writes)
}

// TestDuplicateDeliveryOneHolder: the same dispatch delivered twice (a
// redelivery after a lost lock) gives one holder and one 409.
func TestDuplicateDeliveryOneHolder(t *testing.T) {
	t.Parallel()
	s := busStack(t)
	s.Product("demo", "r1")
	tok := s.Factory("f1", "demo", 2, []string{"os:linux"}, []string{"r1"})
	f1 := newFactoryClient(t, s.NATS, "f1", tok)
	id := s.Submit("demo", Manifest("Twice", "r1", "os:linux"))

	d1, m1 := f1.receive(10 * time.Second)
	// Let the lock lapse unsettled: the broker delivers it again.
	d2, m2 := f1.receive(10 * time.Second)
	require.Equal(t, d1.ID, d2.ID)
	require.Equal(t, 2, d2.DeliveryCount)
	require.Equal(t, m1, m2)

	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, m := range []protocol.DispatchMessage{m1, m2} {
		wg.Go(func() { codes[i] = f1.accept(s, m).Status })
	}
	wg.Wait()
	require.ElementsMatch(t, []int{http.StatusOK, http.StatusConflict}, codes)
	require.NoError(t, f1.client.Complete(context.Background(), d2))
	job := s.Job("demo", id)
	require.Equal(t, "assigned", job["stage"])
	require.EqualValues(t, 1, job["leaseEpoch"])
}

// TestFactoryDiesBeforeAccept: a factory that received its message and died
// before accepting goes stale; the sweep sends the job to another factory
// with a new dispatch epoch, and the dead factory's message is void.
func TestFactoryDiesBeforeAccept(t *testing.T) {
	t.Parallel()
	s := busStack(t, "FLEET_STALE_AFTER=2s", "FLEET_REDISPATCH_SCHEDULE=* * * * * *")
	s.Product("demo", "r1")
	// Only f1 exists when the job is dispatched, so it is the target.
	tok1 := s.Factory("f1", "demo", 4, []string{"os:linux"}, []string{"r1"})
	f1 := newFactoryClient(t, s.NATS, "f1", tok1)
	id := s.Submit("demo", Manifest("Orphaned", "r1", "os:linux"))
	_, m := f1.receive(10 * time.Second) // ...and f1 dies without accepting or heartbeating
	require.Equal(t, id, m.JobID)

	tok2 := s.Factory("f2", "demo", 4, []string{"os:linux"}, []string{"r1"})
	f2 := newFactoryClient(t, s.NATS, "f2", tok2)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { // f2 stays alive
		for ctx.Err() == nil {
			Call(t, http.MethodPost, s.API+"/factories/heartbeat", tok2, map[string]any{
				"capabilities": []string{"os:linux"}, "repos": []string{"r1"}, "load": 0, "health": "ok"})
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()

	d, m2 := f2.receive(20 * time.Second)
	require.Equal(t, id, m2.JobID)
	require.Equal(t, "f2", m2.TargetFactoryID)
	require.Greater(t, m2.DispatchEpoch, m.DispatchEpoch, "the re-dispatch voids the old message")
	r := f2.accept(s, m2)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NoError(t, f2.client.Complete(context.Background(), d))
	// The dead factory's message can no longer claim the job.
	require.Equal(t, http.StatusConflict, f1.accept(s, m).Status)
	require.Equal(t, "f2", s.Job("demo", id)["holderFactoryId"])
}

// TestPublishFailureHealedBySweep: with the broker down, the dispatch
// function's publish fails and the host checkpoints past the batch; once the
// broker is back, the redispatch sweep sends the job.
func TestPublishFailureHealedBySweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	storeDir := t.TempDir()
	srv, err := natsserver.Start(ctx, natsserver.Options{StoreDir: storeDir, Port: freePort(t)})
	require.NoError(t, err)
	url := srv.ClientURL()
	s := busStack(t, "FLEET_NATS_URL="+url, "FLEET_REDISPATCH_AFTER=1s", "FLEET_REDISPATCH_SCHEDULE=* * * * * *")
	s.NATS = url
	s.Product("demo", "r1")
	tok := s.Factory("f1", "demo", 2, []string{"os:linux"}, []string{"r1"})
	f1 := newFactoryClient(t, url, "f1", tok)

	srv.Shutdown()
	id := s.Submit("demo", Manifest("Lost publish", "r1", "os:linux"))
	Eventually(t, 15*time.Second, "the dispatch function stamped the job", func() bool {
		return s.Job("demo", id)["targetFactoryId"] == "f1"
	})

	srv, err = natsserver.Start(ctx, natsserver.Options{StoreDir: storeDir, Port: portOf(t, url)})
	require.NoError(t, err)
	defer srv.Shutdown()
	// The failed publish may still reach the broker once the client
	// reconnects (it was buffered); that message carries the voided epoch
	// and its accept is refused. The sweep's message is the one that wins.
	for {
		d, m := f1.receive(30 * time.Second)
		require.Equal(t, id, m.JobID)
		r := f1.accept(s, m)
		require.NoError(t, f1.client.Complete(ctx, d))
		if r.Status == http.StatusOK {
			require.Greater(t, m.DispatchEpoch, int64(1), "the sweep re-dispatched with a new epoch")
			break
		}
		require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	}
	require.Equal(t, "assigned", s.Job("demo", id)["stage"])
}

// TestHostKilledMidBatchLosesNoJob: kill -9 the local host while it
// dispatches a burst; after a restart every job is dispatched and claimed
// exactly once.
func TestHostKilledMidBatchLosesNoJob(t *testing.T) {
	t.Parallel()
	const jobs = 120
	s := busStack(t, "FLEET_REDISPATCH_AFTER=2s", "FLEET_REDISPATCH_SCHEDULE=* * * * * *")
	s.Product("demo", "r1")
	tok := s.Factory("f1", "demo", 1000, []string{"os:linux"}, []string{"r1"})
	submitted := map[string]bool{}
	for i := range jobs {
		submitted[s.Submit("demo", Manifest(fmt.Sprintf("burst %d", i), "r1", "os:linux"))] = true
	}
	s.kill()

	s2 := busStack(t, "FLEET_DATA_DIR="+s.DataDir, "FLEET_OPERATOR_TOKEN="+s.Token,
		"FLEET_REDISPATCH_AFTER=2s", "FLEET_REDISPATCH_SCHEDULE=* * * * * *")
	f1 := newFactoryClient(t, s2.NATS, "f1", tok)
	held := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(held) < jobs && time.Now().Before(deadline) {
		ds, err := f1.client.Receive(context.Background(), "f1", 50, 2*time.Second)
		require.NoError(t, err)
		for _, d := range ds {
			m, err := bus.DecodeDispatch(d)
			require.NoError(t, err)
			require.True(t, submitted[m.JobID], "message for an unknown job %s", m.JobID)
			switch r := f1.accept(s2, m); r.Status {
			case http.StatusOK:
				require.False(t, held[m.JobID], "job %s accepted twice", m.JobID)
				held[m.JobID] = true
			case http.StatusConflict: // a duplicate or superseded dispatch
			default:
				t.Fatalf("accept %s: %d %s", m.JobID, r.Status, r.Body)
			}
			require.NoError(t, f1.client.Complete(context.Background(), d))
		}
	}
	require.Len(t, held, jobs, "every submitted job reached the factory and was claimed once")
}
