package servicebus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/bus/bustest"
	"github.com/gigafactory/fleet/shared/protocol"
)

var _ bustest.Backend = (*Client)(nil)

// fakeOptions are options with a lock short enough for the suite. Service
// Bus's real minimum is 5s (Open enforces it); the fake needs none.
func fakeOptions(sessions bool) Options {
	return Options{
		Namespace: "fake.servicebus.windows.net", Topic: DefaultTopic, Sessions: sessions, Provision: true,
		LockDuration: time.Second, MaxDeliveries: 3, DuplicateWindow: time.Minute,
	}
}

func newFake(t *testing.T, ns *fakeNamespace, opts Options) *Client {
	t.Helper()
	c := newClient(opts, fakeClient{ns}, fakeAdmin{ns: ns})
	t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
	return c
}

// The adapter's receive, settle and session plumbing under the conformance
// suite, over a fake namespace. live_test.go runs the same suite against
// Azure when a namespace is configured.
func TestConformanceOnFakeNamespace(t *testing.T) {
	t.Parallel()
	for _, sessions := range []bool{false, true} {
		t.Run(fmt.Sprintf("sessions=%t", sessions), func(t *testing.T) {
			t.Parallel()
			ns := newFakeNamespace(DefaultTopic)
			bustest.Run(t, func(t *testing.T) bustest.Backend {
				return newClient(fakeOptions(sessions), fakeClient{ns}, fakeAdmin{ns: ns})
			})
		})
	}
}

func TestSendWireFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		sessions    bool
		orderingKey string
		wantSession *string
	}{
		{name: "no sessions", orderingKey: "notes"},
		{name: "session is the ordering key", sessions: true, orderingKey: "notes", wantSession: ptr("notes")},
		{name: "no key: the message is its own session", sessions: true, wantSession: ptr("job-42:3")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newFakeNamespace(DefaultTopic)
			c := newFake(t, ns, fakeOptions(tc.sessions))
			msg := protocol.DispatchMessage{JobID: "job-42", ProductID: "p1", Repo: "notes", Priority: "high",
				TargetFactoryID: "mac-1.local", DispatchEpoch: 3}
			d := bus.NewDispatcher(c, bus.DispatcherOptions{DispatchTTL: 2 * time.Minute})
			if tc.orderingKey == "" {
				m, err := bus.DispatchToMessage(msg)
				require.NoError(t, err)
				m.OrderingKey = ""
				m.TTL = 2 * time.Minute
				require.NoError(t, c.Send(t.Context(), m))
			} else {
				require.NoError(t, d.Publish(t.Context(), msg))
			}

			sent := ns.sentMessages()
			require.Len(t, sent, 1)
			got := sent[0]
			require.Equal(t, "job-42:3", *got.MessageID, "MessageID = jobId:dispatchEpoch")
			wantProps := map[string]any{
				"targetFactoryId": "mac-1.local", "productId": "p1", "repo": "notes",
				"priority": "high", "kind": "dispatch",
			}
			if tc.orderingKey != "" {
				wantProps["orderingKey"] = tc.orderingKey
			}
			require.Equal(t, wantProps, got.ApplicationProperties)
			require.Equal(t, tc.wantSession, got.SessionID)
			require.Equal(t, 2*time.Minute, *got.TimeToLive)
			require.Equal(t, "dispatch", *got.Subject)
			require.Equal(t, "application/json", *got.ContentType)
			require.Nil(t, got.PartitionKey, "a partition key would have to equal the session id")
		})
	}
}

func TestSendStampsRoutingPropertyFromSubscription(t *testing.T) {
	t.Parallel()
	ns := newFakeNamespace(DefaultTopic)
	c := newFake(t, ns, fakeOptions(false))
	// A bare message without properties is still routed: the filter's
	// property comes from Subscription.
	require.NoError(t, c.Send(t.Context(), bus.Message{ID: "x:1", Subscription: "pool-linux"}))
	sent := ns.sentMessages()
	require.Equal(t, map[string]any{"targetFactoryId": "pool-linux"}, sent[0].ApplicationProperties)
	require.Nil(t, sent[0].TimeToLive, "no TTL: the topic default applies")
	require.Nil(t, sent[0].Subject)
	require.Nil(t, sent[0].ContentType)
}

// Subscription routing end to end: the rule EnsureSubscription provisions
// selects exactly the messages Send addresses to it.
func TestProvisionedRuleRoutesBySubscription(t *testing.T) {
	t.Parallel()
	ns := newFakeNamespace(DefaultTopic)
	opts := fakeOptions(false)
	opts.LockDuration, opts.MaxDeliveries = 90*time.Second, 7
	c := newFake(t, ns, opts)
	ctx := t.Context()
	require.NoError(t, c.EnsureSubscription(ctx, "mac-1.local"))
	require.NoError(t, c.EnsureSubscription(ctx, "mac-2"))

	props := ns.subs[DefaultTopic+"/mac-1.local"].props
	require.Equal(t, "PT90S", *props.LockDuration)
	require.EqualValues(t, 7, *props.MaxDeliveryCount)
	require.False(t, *props.RequiresSession)
	require.False(t, *props.DeadLetteringOnMessageExpiration, "expired dispatches expire; the sweep re-dispatches")
	require.True(t, *props.EnableDeadLetteringOnFilterEvaluationExceptions)
	require.Equal(t, RuleName, props.DefaultRule.Name)
	require.Equal(t, &admin.CorrelationFilter{ApplicationProperties: map[string]any{"targetFactoryId": "mac-1.local"}},
		props.DefaultRule.Filter)

	require.NoError(t, c.Send(ctx, bus.Message{ID: "a:1", Subscription: "mac-1.local"}))
	require.NoError(t, c.Send(ctx, bus.Message{ID: "b:1", Subscription: "mac-2"}))
	for sub, want := range map[string]string{"mac-1.local": "a:1", "mac-2": "b:1"} {
		ds, err := c.Receive(ctx, sub, 10, time.Second)
		require.NoError(t, err)
		require.Len(t, ds, 1, sub)
		require.Equal(t, want, ds[0].ID)
		require.Equal(t, sub, ds[0].Subscription)
	}
}

func TestEnsureSubscriptionWithoutProvision(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newFakeNamespace(DefaultTopic)
	provisioner := newFake(t, ns, fakeOptions(true))
	require.NoError(t, provisioner.EnsureSubscription(ctx, "mac-1"))

	opts := fakeOptions(true)
	opts.Provision = false
	c := newFake(t, ns, opts)
	require.NoError(t, c.EnsureSubscription(ctx, "mac-1"), "exists")
	require.ErrorIs(t, c.EnsureSubscription(ctx, "mac-9"), bus.ErrNotFound, "not provisioned")

	opts.Sessions = false
	mismatched := newFake(t, ns, opts)
	require.ErrorContains(t, mismatched.EnsureSubscription(ctx, "mac-1"), "RequiresSession=true",
		"a session subscription cannot be read without sessions")

	// A factory with Data Receiver only may not read entities: the check
	// is skipped, not failed.
	forbidden := &azcore.ResponseError{StatusCode: 403, ErrorCode: "Unauthorized"}
	opts = fakeOptions(true)
	opts.Provision = false
	receiverOnly := newClient(opts, fakeClient{ns}, fakeAdmin{ns: ns, err: forbidden})
	t.Cleanup(func() { _ = receiverOnly.Close(context.Background()) })
	require.NoError(t, receiverOnly.EnsureSubscription(ctx, "mac-9"))
	_, err := receiverOnly.Depth(ctx, "mac-1")
	require.ErrorIs(t, err, ErrUnauthorized, "depth needs the management API")

	// With Provision the same refusal is an error: it was asked to create.
	opts.Provision = true
	owner := newClient(opts, fakeClient{ns}, fakeAdmin{ns: ns, err: forbidden})
	t.Cleanup(func() { _ = owner.Close(context.Background()) })
	require.ErrorIs(t, owner.EnsureSubscription(ctx, "mac-9"), ErrUnauthorized)
}

// A subscription made before expired dispatches stopped being dead-lettered
// (or by hand) still works, and says what to change.
func TestEnsureSubscriptionWarnsOnExpiryDeadLettering(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newFakeNamespace(DefaultTopic)
	require.NoError(t, newFake(t, ns, fakeOptions(false)).EnsureSubscription(ctx, "pool-1"))
	require.NoError(t, newFake(t, ns, fakeOptions(false)).EnsureSubscription(ctx, "pool-2"))
	ns.mu.Lock()
	ns.subs[DefaultTopic+"/pool-2"].props.DeadLetteringOnMessageExpiration = to.Ptr(true)
	ns.mu.Unlock()

	var logs bytes.Buffer
	opts := fakeOptions(false)
	opts.Provision = false
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c := newFake(t, ns, opts)
	require.NoError(t, c.EnsureSubscription(ctx, "pool-1"))
	require.Empty(t, logs.String(), "a subscription as provisioned: nothing to say")
	require.NoError(t, c.EnsureSubscription(ctx, "pool-2"), "the entity wins")
	require.Contains(t, logs.String(), "dead_lettering_on_message_expiration = false")
	require.Contains(t, logs.String(), "subscription=pool-2")
}

func TestEnsureSubscriptionRaceIsHarmless(t *testing.T) {
	t.Parallel()
	ns := newFakeNamespace(DefaultTopic)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		c := newFake(t, ns, fakeOptions(false))
		wg.Go(func() { errs <- c.EnsureSubscription(t.Context(), "pool-1") })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	other := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"lock lost", &azservicebus.Error{Code: azservicebus.CodeLockLost}, bus.ErrLockLost},
		{"not found", &azservicebus.Error{Code: azservicebus.CodeNotFound}, bus.ErrNotFound},
		{"closed", &azservicebus.Error{Code: azservicebus.CodeClosed}, bus.ErrClosed},
		{"unauthorized", &azservicebus.Error{Code: azservicebus.CodeUnauthorizedAccess}, ErrUnauthorized},
		{"link not found", &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondNotFound}}, bus.ErrNotFound},
		{"link unauthorized", &amqp.Error{Condition: amqp.ErrCondUnauthorizedAccess}, ErrUnauthorized},
		{"admin 404", &azcore.ResponseError{StatusCode: 404}, bus.ErrNotFound},
		{"admin 401", &azcore.ResponseError{StatusCode: 401}, ErrUnauthorized},
		{"admin 403", &azcore.ResponseError{StatusCode: 403}, ErrUnauthorized},
		{"too large", fmt.Errorf("send: %w", azservicebus.ErrMessageTooLarge), bus.ErrInvalid},
		{"connection lost", &azservicebus.Error{Code: azservicebus.CodeConnectionLost}, nil},
		{"timeout", &azservicebus.Error{Code: azservicebus.CodeTimeout}, nil},
		{"other", other, nil},
	} {
		got := mapErr("op", tc.err)
		require.ErrorIs(t, got, tc.err, "%s: the SDK error stays in the chain", tc.name)
		require.ErrorContains(t, got, "servicebus: op")
		for _, s := range []error{bus.ErrLockLost, bus.ErrNotFound, bus.ErrClosed, bus.ErrInvalid, ErrUnauthorized} {
			require.Equal(t, s == tc.want, errors.Is(got, s), "%s: errors.Is(%v)", tc.name, s)
		}
	}
	var sbErr *azservicebus.Error
	require.ErrorAs(t, mapErr("op", &azservicebus.Error{Code: azservicebus.CodeLockLost}), &sbErr)
	require.Equal(t, azservicebus.CodeLockLost, sbErr.Code)
	require.NoError(t, mapErr("op", nil))
}

func TestSendErrorsAreMapped(t *testing.T) {
	t.Parallel()
	ns := newFakeNamespace(DefaultTopic)
	c := newFake(t, ns, fakeOptions(false))
	ns.sendErr = &azservicebus.Error{Code: azservicebus.CodeUnauthorizedAccess}
	require.ErrorIs(t, c.Send(t.Context(), bus.Message{ID: "a:1", Subscription: "s"}), ErrUnauthorized)
	ns.sendErr = azservicebus.ErrMessageTooLarge
	require.ErrorIs(t, c.Send(t.Context(), bus.Message{ID: "a:1", Subscription: "s"}), bus.ErrInvalid)

	opts := fakeOptions(false)
	opts.Topic = "no-such-topic"
	missing := newFake(t, ns, opts)
	require.ErrorIs(t, missing.Send(t.Context(), bus.Message{ID: "a:1", Subscription: "s"}), bus.ErrNotFound)
}

// A receive on a subscription that does not exist yet fails with
// ErrNotFound and drops the dead link; once the subscription exists the
// same client receives.
func TestReceiveRecoversAfterSubscriptionIsCreated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newFakeNamespace(DefaultTopic)
	c := newFake(t, ns, fakeOptions(false))
	_, err := c.Receive(ctx, "late", 1, time.Second)
	require.ErrorIs(t, err, bus.ErrNotFound)
	require.NoError(t, c.EnsureSubscription(ctx, "late"))
	require.NoError(t, c.Send(ctx, bus.Message{ID: "a:1", Subscription: "late"}))
	ds, err := c.Receive(ctx, "late", 1, time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
}

// Every receive, with sessions or without, asks the SDK to hand a message
// over as it comes: its default keeps collecting for 20 ms after the first
// one, on the path of every dispatch.
func TestReceiveHandsOverTheFirstMessageAtOnce(t *testing.T) {
	t.Parallel()
	for _, sessions := range []bool{false, true} {
		ctx := t.Context()
		ns := newFakeNamespace(DefaultTopic)
		c := newFake(t, ns, fakeOptions(sessions))
		require.NoError(t, c.EnsureSubscription(ctx, "mac-1"))
		require.NoError(t, c.Send(ctx, bus.Message{ID: "a:1", Subscription: "mac-1", OrderingKey: "a"}))
		ds, err := c.Receive(ctx, "mac-1", 10, time.Second)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		ns.mu.Lock()
		got := slices.Clone(ns.afterFirst)
		ns.mu.Unlock()
		require.NotEmpty(t, got, "sessions %v", sessions)
		for _, d := range got {
			require.LessOrEqual(t, d, time.Millisecond, "sessions %v: TimeAfterFirstMessage", sessions)
		}
	}
}

// The SDK allows one ReceiveMessages per receiver at a time; the fake
// panics on a second. Concurrent Receive calls on one subscription queue.
func TestConcurrentReceivesAreSerializedPerReceiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newFakeNamespace(DefaultTopic)
	c := newFake(t, ns, fakeOptions(false))
	require.NoError(t, c.EnsureSubscription(ctx, "pool"))
	const n = 20
	for i := range n {
		require.NoError(t, c.Send(ctx, bus.Message{ID: fmt.Sprintf("j%d:1", i), Subscription: "pool"}))
	}
	var mu sync.Mutex
	got := map[string]bool{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				ds, err := c.Receive(ctx, "pool", 2, 300*time.Millisecond)
				if err != nil {
					t.Errorf("receive: %v", err)
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, d := range ds {
					mu.Lock()
					got[d.ID] = true
					mu.Unlock()
					if err := c.Complete(ctx, d); err != nil {
						t.Errorf("complete: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, got, n)
}

// A session stays locked to the receiver until its batch is settled, so
// two receivers never hold one repo's messages at once.
func TestSessionHeldUntilBatchSettled(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newFakeNamespace(DefaultTopic)
	a := newFake(t, ns, fakeOptions(true))
	b := newFake(t, ns, fakeOptions(true))
	require.NoError(t, a.EnsureSubscription(ctx, "mac-1"))
	for i := range 2 {
		require.NoError(t, a.Send(ctx, bus.Message{ID: fmt.Sprintf("n%d:1", i), Subscription: "mac-1", OrderingKey: "notes"}))
	}
	first, err := a.Receive(ctx, "mac-1", 1, time.Second)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, "notes", first[0].OrderingKey)

	// The other receiver cannot get the second "notes" message meanwhile.
	ds, err := b.Receive(ctx, "mac-1", 1, 300*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, ds)

	require.NoError(t, a.Complete(ctx, first[0]))
	ds, err = b.Receive(ctx, "mac-1", 1, time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "n1:1", ds[0].ID)
	require.NoError(t, b.Complete(ctx, ds[0]))
}

func TestSettleErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newFakeNamespace(DefaultTopic)
	c := newFake(t, ns, fakeOptions(false))
	other := newFake(t, ns, fakeOptions(false))
	require.NoError(t, c.EnsureSubscription(ctx, "s"))
	require.NoError(t, c.Send(ctx, bus.Message{ID: "a:1", Subscription: "s"}))
	ds, err := c.Receive(ctx, "s", 1, time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 1)

	require.ErrorIs(t, other.Complete(ctx, ds[0]), bus.ErrInvalid, "settled only by the client that received it")
	require.ErrorIs(t, c.Complete(ctx, bus.Delivery{}), bus.ErrInvalid)

	// The lock expires: the broker refuses the late complete.
	require.Eventually(t, func() bool {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		ns.subs[DefaultTopic+"/s"].expire(time.Now())
		return ns.subs[DefaultTopic+"/s"].active[0].lockedUntil.IsZero()
	}, 5*time.Second, 20*time.Millisecond)
	err = c.Complete(ctx, ds[0])
	require.ErrorIs(t, err, bus.ErrLockLost)
	var sbErr *azservicebus.Error
	require.ErrorAs(t, err, &sbErr)
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]Options{
		"no namespace":   {},
		"lock too short": {Namespace: "x.servicebus.windows.net", LockDuration: time.Second},
		"lock too long":  {Namespace: "x.servicebus.windows.net", LockDuration: 6 * time.Minute},
		"bad deliveries": {Namespace: "x.servicebus.windows.net", MaxDeliveries: -1},
	} {
		_, err := Open(t.Context(), o)
		require.Error(t, err, name)
	}
	o := Options{Namespace: "x.servicebus.windows.net"}
	require.NoError(t, o.defaults())
	require.Equal(t, DefaultTopic, o.Topic)
	require.Equal(t, time.Minute, o.LockDuration)
	require.Equal(t, 10, o.MaxDeliveries)
}

func TestIsoDuration(t *testing.T) {
	t.Parallel()
	require.Equal(t, "PT60S", isoDuration(time.Minute))
	require.Equal(t, "PT5S", isoDuration(5*time.Second))
	require.Equal(t, "PT1.5S", isoDuration(1500*time.Millisecond))
}
