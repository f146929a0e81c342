package transport

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus/nats/natsserver"

	"github.com/gigafactory/fleet/shared/bus"
	busnats "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/protocol"
)

// TestBusOverNATS: against an embedded JetStream server, what the
// coordinator's Dispatcher publishes reaches the factory decoded; a
// malformed message goes to the dead-letter queue; an abandoned message
// comes back and a completed one does not.
func TestBusOverNATS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As the local stack runs it: credentials required, the factory
	// limited to its own subscription, which is all it needs.
	const coordinator = "coordinator-secret-0123456789"
	srv, err := natsserver.Start(ctx, natsserver.Options{StoreDir: t.TempDir(), Auth: &natsserver.Auth{Coordinator: coordinator,
		Grant: func(_ context.Context, tok string) (natsserver.Grant, error) {
			if tok != "fft_f1" {
				return natsserver.Grant{}, errors.New("unknown token")
			}
			p, err := busnats.FactoryPermissions(busnats.Options{}, "f1")
			return natsserver.Grant{Name: "f1", Publish: p.Publish, Subscribe: p.Subscribe}, err
		}}})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)

	pub, err := busnats.Open(ctx, srv.ClientURL(), busnats.Options{ConnOptions: []natsgo.Option{natsgo.Token(coordinator)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	recv, err := OpenNATS(ctx, NATSOptions{URL: srv.ClientURL(), FactoryID: "f1", Subscription: "f1", Token: "fft_f1",
		Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = recv.Close(context.Background()) })

	d := bus.NewDispatcher(pub, bus.DispatcherOptions{})
	msg := protocol.DispatchMessage{JobID: "j1", ProductID: "p", Repo: "app", TargetFactoryID: "f1", DispatchEpoch: 2}
	require.NoError(t, d.Publish(ctx, msg))
	require.NoError(t, pub.Send(ctx, bus.Message{ID: "junk-1", Subscription: "f1", Body: []byte("{"),
		Properties: map[string]string{bus.PropKind: string(bus.KindDispatch)}}))
	require.NoError(t, d.PublishGC(ctx, protocol.GCRequest{FactoryID: "f1", Repos: map[string][]string{"app": {"j0"}}}))

	var got []Delivery
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		ds, err := recv.Receive(ctx, 10, time.Second)
		require.NoError(t, err)
		got = append(got, ds...)
	}
	require.Len(t, got, 2, "the malformed message is not handed over")
	require.Equal(t, msg, *got[0].Dispatch)
	require.Equal(t, "j1:2", got[0].ID)
	require.Equal(t, []string{"j0"}, got[1].GC.Repos["app"])

	dead, err := pub.ReceiveDeadLetters(ctx, "f1", 10, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "junk-1", dead[0].ID)

	require.NoError(t, recv.Abandon(ctx, got[0]))
	require.NoError(t, recv.Complete(ctx, got[1]))
	again, err := recv.Receive(ctx, 10, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, "j1:2", again[0].ID)
	require.NoError(t, recv.Complete(ctx, again[0]))
	none, err := recv.Receive(ctx, 10, 500*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, none)
}
