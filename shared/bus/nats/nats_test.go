package nats_test

import (
	"context"
	"fmt"
	"github.com/gigafactory/fleet/shared/bus/nats/natsserver"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/bus/bustest"
	busnats "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/protocol"
)

var _ bustest.Backend = (*busnats.Client)(nil)

// testOptions keep the lock short so redelivery tests take about a second.
func testOptions() busnats.Options {
	return busnats.Options{AckWait: time.Second, MaxDeliver: 3, DuplicateWindow: time.Minute, RequestTimeout: 5 * time.Second}
}

func startServer(t *testing.T) *natsserver.Server {
	t.Helper()
	srv, err := natsserver.Start(t.Context(), natsserver.Options{StoreDir: filepath.Join(t.TempDir(), "nats")})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	return srv
}

func open(t *testing.T, url string, opts busnats.Options) *busnats.Client {
	t.Helper()
	c, err := busnats.Open(t.Context(), url, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
	return c
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	bustest.Run(t, func(t *testing.T) bustest.Backend {
		c, err := busnats.Open(t.Context(), srv.ClientURL(), testOptions())
		require.NoError(t, err)
		return c
	})
}

func TestEmbeddedListensOnLoopbackAndRestartsWithItsStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "data", "nats") // FLEET_DATA_DIR/nats
	srv, err := natsserver.Start(ctx, natsserver.Options{StoreDir: dir})
	require.NoError(t, err)
	url := srv.ClientURL()
	require.Regexp(t, `^nats://127\.0\.0\.1:\d+$`, url)

	c, err := busnats.Open(ctx, url, testOptions())
	require.NoError(t, err)
	require.NoError(t, c.EnsureSubscription(ctx, "mac-1"))
	require.NoError(t, c.Send(ctx, bus.Message{ID: "j:1", Subscription: "mac-1", Body: []byte("x")}))
	require.NoError(t, c.Close(ctx))
	srv.Shutdown()
	srv.Shutdown() // idempotent

	// Same store, same port: a factory's URL stays valid across a restart
	// of the local stack, and the undelivered message is still there.
	var port int
	_, err = fmt.Sscanf(url, "nats://127.0.0.1:%d", &port)
	require.NoError(t, err)
	srv2, err := natsserver.Start(ctx, natsserver.Options{StoreDir: dir, Port: port})
	require.NoError(t, err)
	t.Cleanup(srv2.Shutdown)
	require.Equal(t, url, srv2.ClientURL())

	c2 := open(t, url, testOptions())
	ds, err := c2.Receive(ctx, "mac-1", 10, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "j:1", ds[0].ID)
	require.NoError(t, c2.Complete(ctx, ds[0]))
}

func TestEmbeddedNeedsStoreDir(t *testing.T) {
	t.Parallel()
	_, err := natsserver.Start(t.Context(), natsserver.Options{})
	require.ErrorContains(t, err, "store directory")
}

func TestOpenFailsWithoutServer(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the server was started and stopped.
	srv, err := natsserver.Start(t.Context(), natsserver.Options{StoreDir: t.TempDir()})
	require.NoError(t, err)
	url := srv.ClientURL()
	srv.Shutdown()
	_, err = busnats.Open(t.Context(), url, testOptions())
	require.ErrorContains(t, err, "connect")
}

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for name, o := range map[string]busnats.Options{
		"same streams":    {Stream: "X", DeadLetterStream: "X"},
		"negative":        {AckWait: -time.Second},
		"wildcard prefix": {SubjectPrefix: "fleet.*"},
	} {
		_, err := busnats.Open(t.Context(), srv.ClientURL(), o)
		require.Error(t, err, name)
	}
}

// Two agents of one pool share its subscription: every message goes to
// exactly one of them (competing consumers on one durable).
func TestCompetingReceiversShareASubscription(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := t.Context()
	pub := open(t, srv.ClientURL(), testOptions())
	require.NoError(t, pub.EnsureSubscription(ctx, "pool-linux"))
	const n = 40
	for i := range n {
		require.NoError(t, pub.Send(ctx, bus.Message{ID: fmt.Sprintf("j%d:1", i), Subscription: "pool-linux"}))
	}

	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		c := open(t, srv.ClientURL(), testOptions())
		wg.Go(func() {
			for {
				ds, err := c.Receive(ctx, "pool-linux", 3, 500*time.Millisecond)
				if err != nil {
					t.Errorf("receive: %v", err)
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, d := range ds {
					mu.Lock()
					seen[d.ID]++
					mu.Unlock()
					if err := c.Complete(ctx, d); err != nil {
						t.Errorf("complete: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, n)
	for id, k := range seen {
		require.Equal(t, 1, k, "message %s delivered %d times", id, k)
	}
	depth, err := pub.Depth(ctx, "pool-linux")
	require.NoError(t, err)
	require.Zero(t, depth)
}

func TestTTLExpiresUndeliveredMessage(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := t.Context()
	c := open(t, srv.ClientURL(), testOptions())
	require.NoError(t, c.EnsureSubscription(ctx, "mac-2"))
	// Sub-second TTLs round up to JetStream's one-second minimum.
	require.NoError(t, c.Send(ctx, bus.Message{ID: "old:1", Subscription: "mac-2", TTL: 300 * time.Millisecond}))
	require.NoError(t, c.Send(ctx, bus.Message{ID: "new:1", Subscription: "mac-2", TTL: time.Hour}))
	require.Eventually(t, func() bool {
		d, err := c.Depth(ctx, "mac-2")
		return err == nil && d == 1
	}, 10*time.Second, 50*time.Millisecond, "the expired message leaves the subscription")
	// Depth counted both messages the moment Send returned, so 1 means the
	// expired one left (TestDepthCountsSentMessagesAtOnce), not that the
	// second one was not counted yet.
	ds, err := c.Receive(ctx, "mac-2", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "new:1", ds[0].ID)
	require.Equal(t, time.Hour, ds[0].TTL)
}

// The Dispatcher over a real broker: what coord publishes is what a factory
// decodes, and a re-dispatch with a new epoch is delivered although the old
// message id is still inside the duplicate window.
func TestDispatcherEndToEnd(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := t.Context()
	c := open(t, srv.ClientURL(), testOptions())
	require.NoError(t, c.EnsureSubscription(ctx, "mac-1.local"))
	require.NoError(t, c.EnsureSubscription(ctx, "mac-2"))

	d := bus.NewDispatcher(c, bus.DispatcherOptions{DispatchTTL: 2 * time.Minute})
	msg := protocol.DispatchMessage{JobID: "job-7", ProductID: "p1", Repo: "notes", Capabilities: []string{"os:mac"},
		Priority: "high", TargetFactoryID: "mac-1.local", DispatchEpoch: 1}
	require.NoError(t, d.Publish(ctx, msg))
	require.NoError(t, d.Publish(ctx, msg)) // change feed redelivered the batch
	msg.DispatchEpoch = 2
	require.NoError(t, d.Publish(ctx, msg)) // requeued and dispatched again
	require.NoError(t, d.PublishGC(ctx, protocol.GCRequest{FactoryID: "mac-2", Repos: map[string][]string{"notes": {"job-1"}}}))

	// Receive returns what the consumer has delivered so far, which can lag
	// the stream by a message right after Send: collect both.
	ds := receiveN(t, c, "mac-1.local", 2)
	for i, dl := range ds {
		got, err := bus.DecodeDispatch(dl)
		require.NoError(t, err)
		require.Equal(t, int64(i+1), got.DispatchEpoch)
		require.Equal(t, "high", dl.Properties[bus.PropPriority])
		require.Equal(t, "notes", dl.OrderingKey)
		require.NoError(t, c.Complete(ctx, dl))
	}
	ds = receiveN(t, c, "mac-2", 1)
	dec, err := bus.Decode(ds[0])
	require.NoError(t, err)
	require.NotNil(t, dec.GC)
	require.Equal(t, []string{"job-1"}, dec.GC.Repos["notes"])
}

// A dispatch that exhausted its deliveries reaches coord through the
// Dispatcher's drain, once.
func TestDispatcherDrainsDeadLetters(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := t.Context()
	opts := testOptions()
	opts.MaxDeliver = 1
	c := open(t, srv.ClientURL(), opts)
	require.NoError(t, c.EnsureSubscription(ctx, "mac-1"))
	d := bus.NewDispatcher(c, bus.DispatcherOptions{})
	anyDead := func() bool {
		t.Helper()
		held, err := c.DeadLettered(ctx, []string{"mac-2", "mac-1", "unknown"})
		require.NoError(t, err)
		require.Subset(t, []string{"mac-1"}, held, "only mac-1 can hold one")
		return len(held) > 0
	}
	require.False(t, anyDead(), "no dead letter yet")
	msg := protocol.DispatchMessage{JobID: "job-1", ProductID: "p1", Repo: "notes", TargetFactoryID: "mac-1", DispatchEpoch: 4}
	require.NoError(t, d.Publish(ctx, msg))
	ds, err := c.Receive(ctx, "mac-1", 1, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, c.Abandon(ctx, ds[0]))
	require.False(t, anyDead(), "a message short of MaxDeliver is not dead")
	ds, err = c.Receive(ctx, "mac-1", 1, 500*time.Millisecond) // moves it
	require.NoError(t, err)
	require.Empty(t, ds)
	require.True(t, anyDead(), "the probe sees the dead letter")
	bo := opts
	bo.Bind = true // no stream handles: the probe looks the stream up
	held, err := open(t, srv.ClientURL(), bo).DeadLettered(ctx, []string{"mac-1"})
	require.NoError(t, err)
	require.Equal(t, []string{"mac-1"}, held, "a bound client's probe")

	var got []protocol.DispatchMessage
	handle := func(_ context.Context, m protocol.DispatchMessage) error {
		got = append(got, m)
		return nil
	}
	n, err := d.DrainDeadLetters(ctx, []string{"mac-1", "unknown"}, handle)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []protocol.DispatchMessage{msg}, got)
	require.False(t, anyDead(), "completed dead letters are gone from the stream")
	n, err = d.DrainDeadLetters(ctx, []string{"mac-1"}, handle)
	require.NoError(t, err)
	require.Zero(t, n, "completed dead letters are gone")
}

// Depth is exact as soon as Send returns: the scaler and the TTL test read
// it right after publishing. (The consumer's own pending count is updated by
// the server asynchronously after the publish is acknowledged.)
func TestDepthCountsSentMessagesAtOnce(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := t.Context()
	c := open(t, srv.ClientURL(), testOptions())
	require.NoError(t, c.EnsureSubscription(ctx, "mac-3"))
	for i := range 20 {
		require.NoError(t, c.Send(ctx, bus.Message{ID: fmt.Sprintf("j%d:1", i), Subscription: "mac-3"}))
		d, err := c.Depth(ctx, "mac-3")
		require.NoError(t, err)
		require.EqualValues(t, i+1, d, "depth right after send %d", i+1)
	}
}

// receiveN collects exactly n deliveries of sub within a generous bound:
// Receive returns at least one message and at most max, not every message
// already sent.
func receiveN(t *testing.T, c *busnats.Client, sub string, n int) []bus.Delivery {
	t.Helper()
	var got []bus.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		ds, err := c.Receive(t.Context(), sub, n-len(got), time.Until(deadline))
		require.NoError(t, err)
		got = append(got, ds...)
	}
	require.Len(t, got, n)
	return got
}
