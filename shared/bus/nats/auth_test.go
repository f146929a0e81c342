package nats_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	busnats "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/bus/nats/natsserver"
)

const coordinatorSecret = "coordinator-secret-0123456789"

// factoryTokens stand for fleet tokens: token -> factory id. The ids hold
// '.', which the subject encoding escapes.
var factoryTokens = map[string]string{"fft_a": "mac.a", "fft_b": "mac.b"}

// startAuthServer runs a server that admits the coordinator and the
// factories of factoryTokens, as the local stack's does.
func startAuthServer(t *testing.T) *natsserver.Server {
	t.Helper()
	srv, err := natsserver.Start(t.Context(), natsserver.Options{
		StoreDir: filepath.Join(t.TempDir(), "nats"),
		Auth: &natsserver.Auth{Coordinator: coordinatorSecret, Grant: func(_ context.Context, tok string) (natsserver.Grant, error) {
			sub, ok := factoryTokens[tok]
			if !ok {
				return natsserver.Grant{}, errors.New("unknown token")
			}
			p, err := busnats.FactoryPermissions(busnats.Options{}, sub)
			return natsserver.Grant{Name: "factory:" + sub, Publish: p.Publish, Subscribe: p.Subscribe}, err
		}},
	})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	return srv
}

// violations collects a connection's asynchronous errors (a refused
// publish or subscribe is reported only that way).
type violations chan error

func (v violations) option() natsgo.Option {
	return natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
		select {
		case v <- err:
		default:
		}
	})
}

// next returns the next violation naming subject.
func (v violations) next(t *testing.T, subject string) error {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-v:
			if errors.Is(err, natsgo.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return err
			}
		case <-timeout:
			t.Fatalf("no permissions violation for %q", subject)
			return nil
		}
	}
}

// TestAuthRefusesClientsWithoutCredentials: with Auth set, a client with
// no token or an unknown one cannot connect at all, so it can neither
// read fleet.> nor publish there.
func TestAuthRefusesClientsWithoutCredentials(t *testing.T) {
	t.Parallel()
	srv := startAuthServer(t)
	for name, opts := range map[string][]natsgo.Option{
		"no token":      nil,
		"unknown token": {natsgo.Token("fft_nobody")},
		"user/password": {natsgo.UserInfo("mac.a", "fft_a")},
	} {
		t.Run(name, func(t *testing.T) {
			nc, err := natsgo.Connect(srv.ClientURL(), append(opts, natsgo.MaxReconnects(0))...)
			if err == nil {
				nc.Close()
			}
			require.ErrorIs(t, err, natsgo.ErrAuthorization)
		})
	}
}

// TestAuthStartNeedsALongCoordinatorSecret: a guessable coordinator secret
// is refused at start.
func TestAuthStartNeedsALongCoordinatorSecret(t *testing.T) {
	t.Parallel()
	_, err := natsserver.Start(t.Context(), natsserver.Options{StoreDir: t.TempDir(), Auth: &natsserver.Auth{Coordinator: "short"}})
	require.ErrorContains(t, err, "at least 16 characters")
}

// TestFactoryCredentialsReachOnlyTheirOwnSubscription: a factory's
// connection does its whole job on its own subscription (bind, ensure,
// receive, renew, complete, dead-letter), and cannot subscribe to fleet.>,
// to the shared reply inbox, read another factory's consumer or create a
// consumer on its subject, nor publish any dispatch or control message.
func TestFactoryCredentialsReachOnlyTheirOwnSubscription(t *testing.T) {
	t.Parallel()
	srv := startAuthServer(t)
	ctx := t.Context()
	coordOpts := testOptions()
	coordOpts.ConnOptions = []natsgo.Option{natsgo.Token(coordinatorSecret)}
	coord := open(t, srv.ClientURL(), coordOpts)
	for _, sub := range []string{"mac.a", "mac.b"} {
		require.NoError(t, coord.EnsureSubscription(ctx, sub))
		require.NoError(t, coord.Send(ctx, bus.Message{ID: "j-" + sub + ":1", Subscription: sub, Body: []byte("for " + sub)}))
	}

	errs := make(violations, 64)
	fOpts := testOptions()
	fOpts.Bind, fOpts.RequestTimeout = true, time.Second
	fOpts.ConnOptions = append(busnats.FactoryConnOptions("mac.a", "fft_a"), errs.option())
	fa := open(t, srv.ClientURL(), fOpts)

	// Its own work: all of it passes.
	require.NoError(t, fa.EnsureSubscription(ctx, "mac.a"))
	ds, err := fa.Receive(ctx, "mac.a", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "for mac.a", string(ds[0].Body))
	_, err = fa.RenewLock(ctx, ds[0])
	require.NoError(t, err)
	require.NoError(t, fa.Complete(ctx, ds[0]))
	require.NoError(t, coord.Send(ctx, bus.Message{ID: "j-mac.a:2", Subscription: "mac.a", Body: []byte("bad")}))
	ds, err = fa.Receive(ctx, "mac.a", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, fa.DeadLetter(ctx, ds[0], "malformed"))
	dl, err := coord.ReceiveDeadLetters(ctx, "mac.a", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, dl, 1, "the factory's dead letter reached its queue")

	// Another factory's consumer: neither read nor recreated.
	_, err = fa.Receive(ctx, "mac.b", 10, 100*time.Millisecond)
	require.Error(t, err, "read mac.b's consumer")
	errs.next(t, "$JS.API.CONSUMER.INFO.FLEET_DISPATCH.mac%2Eb")
	require.Error(t, fa.EnsureSubscription(ctx, "mac.b"), "create a consumer on mac.b's subject")
	errs.next(t, "$JS.API.CONSUMER.CREATE.FLEET_DISPATCH.mac%2Eb.fleet.dispatch.mac%2Eb")

	// Raw subjects: no eavesdropping, no forged messages, not even to itself.
	nc, err := natsgo.Connect(srv.ClientURL(), append(busnats.FactoryConnOptions("mac.a", "fft_a"), errs.option())...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	for _, subject := range []string{"fleet.>", "fleet.dispatch.mac%2Eb", "_INBOX.>", busnats.FactoryInbox("mac.b") + ".>", "$JS.>"} {
		_, err := nc.SubscribeSync(subject)
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		errs.next(t, subject)
	}
	for _, subject := range []string{"fleet.dispatch.mac%2Ea", "fleet.dispatch.mac%2Eb", "fleet.dlq.mac%2Eb",
		"$JS.API.STREAM.INFO.FLEET_DISPATCH", "$JS.API.STREAM.DELETE.FLEET_DISPATCH", "$JS.API.DIRECT.GET.FLEET_DISPATCH"} {
		require.NoError(t, nc.Publish(subject, []byte(`{"action":"cancel"}`)))
		require.NoError(t, nc.Flush())
		errs.next(t, subject)
	}

	// mac.b's message is still there, unread, for mac.b.
	fbOpts := fOpts
	fbOpts.ConnOptions = busnats.FactoryConnOptions("mac.b", "fft_b")
	fb := open(t, srv.ClientURL(), fbOpts)
	ds, err = fb.Receive(ctx, "mac.b", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "for mac.b", string(ds[0].Body))
	require.Equal(t, 1, ds[0].DeliveryCount)
}

// TestBindDoesNotTouchStreams: a bound client reads no stream, so a
// factory needs no right on them; without streams its subscription is
// not found rather than created.
func TestBindDoesNotTouchStreams(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	o := testOptions()
	o.Bind = true
	c := open(t, srv.ClientURL(), o)
	require.ErrorIs(t, c.EnsureSubscription(t.Context(), "mac-1"), bus.ErrNotFound)
}
