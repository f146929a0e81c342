package nats

import (
	"context"
	"github.com/gigafactory/fleet/shared/bus/nats/natsserver"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
)

func TestTokenIsOneValidSubjectTokenAndInjective(t *testing.T) {
	t.Parallel()
	for sub, want := range map[string]string{
		"mac-1":       "mac-1",
		"pool_linux":  "pool_linux",
		"mac-1.local": "mac-1%2Elocal",
		"a%2Eb":       "a%252Eb",
		"a.b":         "a%2Eb",
		"x*>/\\":      "x%2A%3E%2F%5C",
		"ü":           "%C3%BC",
	} {
		got := token(sub)
		require.Equal(t, want, got, sub)
		require.False(t, strings.ContainsAny(got, " \t\r\n.*>/\\"), "token %q of %q", got, sub)
	}
	require.NotEqual(t, token("a.b"), token("a%2Eb"))
}

// A receiver that dies after copying an exhausted message to the
// dead-letter stream but before terminating it leaves the message to be
// redelivered; the next receive moves it again and the copy collapses.
func TestDeadLetterMoveSurvivesCrashBetweenCopyAndTerm(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := natsserver.Start(ctx, natsserver.Options{StoreDir: filepath.Join(t.TempDir(), "nats")})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	c, err := Open(ctx, srv.ClientURL(), Options{AckWait: time.Second, MaxDeliver: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })

	const sub = "mac-9.local"
	require.NoError(t, c.EnsureSubscription(ctx, sub))
	require.NoError(t, c.Send(ctx, bus.Message{ID: "j:1", Subscription: sub, Body: []byte("b")}))
	ds, err := c.Receive(ctx, sub, 1, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, c.Abandon(ctx, ds[0]))

	// The second delivery exceeds MaxDeliver. Take it past the client's
	// check and do only the first half of the move, then "crash".
	cons, err := c.consumer(ctx, false, sub)
	require.NoError(t, err)
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	meta, err := m.Metadata()
	require.NoError(t, err)
	require.EqualValues(t, 2, meta.NumDelivered)
	h := &handle{client: c, msg: m, meta: meta, sub: sub}
	require.NoError(t, c.copyToDeadLetters(ctx, h, bus.ReasonMaxDeliveries, ""))
	require.NoError(t, m.Nak()) // redelivered now rather than after AckWait

	// The next receive finishes the move.
	ds, err = c.Receive(ctx, sub, 10, 2*time.Second)
	require.NoError(t, err)
	require.Empty(t, ds)
	depth, err := c.Depth(ctx, sub)
	require.NoError(t, err)
	require.Zero(t, depth)

	dls, err := c.ReceiveDeadLetters(ctx, sub, 10, 2*time.Second)
	require.NoError(t, err)
	require.Len(t, dls, 1, "one dead letter although the move ran twice")
	require.Equal(t, "j:1", dls[0].ID)
	require.Equal(t, bus.ReasonMaxDeliveries, dls[0].DeadLetterReason)
}

// A message that ends a receive's wait is handed over with no further
// request to the server: the pull that waited is the only one sent.
func TestReceiveReturnsTheMessageThatEndedItsWait(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := natsserver.Start(ctx, natsserver.Options{StoreDir: filepath.Join(t.TempDir(), "nats")})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	open := func() *Client {
		c, err := Open(ctx, srv.ClientURL(), Options{AckWait: time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
		return c
	}
	receiver, sender := open(), open()
	const sub = "mac-1"
	require.NoError(t, receiver.EnsureSubscription(ctx, sub))
	_, err = receiver.consumer(ctx, false, sub) // bound before counting
	require.NoError(t, err)

	type result struct {
		ds  []bus.Delivery
		err error
	}
	got := make(chan result, 1)
	before := receiver.nc.Stats().OutMsgs
	go func() {
		ds, err := receiver.Receive(ctx, sub, 10, 10*time.Second)
		got <- result{ds, err}
	}()
	// Sent once the receive waits: its no-wait fetch and its waiting pull
	// have both gone out.
	require.Eventually(t, func() bool { return receiver.nc.Stats().OutMsgs-before >= 2 }, 5*time.Second, time.Millisecond)
	require.NoError(t, sender.Send(ctx, bus.Message{ID: "j:1", Subscription: sub, Body: []byte("b")}))
	r := <-got
	require.NoError(t, r.err)
	require.Len(t, r.ds, 1)
	require.EqualValues(t, 2, receiver.nc.Stats().OutMsgs-before,
		"one no-wait fetch and one waiting pull; no top-up request after the message came")
}
