// Package bustest is the one conformance suite every bus backend passes. A
// backend's test calls Run with a constructor; the suite exercises the
// contract coord and the factory agent rely on: targeted delivery, duplicate
// detection on Message.ID, receive with a wait, settlement, redelivery after
// lock expiry, lock renewal, dead-lettering (explicit and after max deliveries), depth
// per subscription and ordering keys.
//
// Every subtest uses its own freshly named subscriptions, so subtests run in
// parallel against one broker and against a shared cloud namespace.
// Timing-dependent checks derive their bounds from the backend's Limits and
// wait for conditions instead of sleeping.
package bustest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/protocol"
)

// Backend is what the suite needs of a broker adapter.
type Backend interface {
	// EnsureSubscription makes sub exist (or checks that it does).
	EnsureSubscription(ctx context.Context, sub string) error
	Send(ctx context.Context, m bus.Message) error
	// Receive returns up to max deliveries of sub, waiting up to wait for the
	// first; it returns as soon as one is there, and no error when the wait
	// ends with nothing.
	Receive(ctx context.Context, sub string, max int, wait time.Duration) ([]bus.Delivery, error)
	Complete(ctx context.Context, d bus.Delivery) error
	Abandon(ctx context.Context, d bus.Delivery) error
	DeadLetter(ctx context.Context, d bus.Delivery, reason string) error
	bus.LockRenewer
	ReceiveDeadLetters(ctx context.Context, sub string, max int, wait time.Duration) ([]bus.Delivery, error)
	// Depth is the number of active messages of sub: waiting or locked, not
	// dead-lettered.
	Depth(ctx context.Context, sub string) (int64, error)
	Limits() bus.Limits
	Close(ctx context.Context) error
}

// SubscriptionDeleter is implemented by backends whose subscriptions outlive
// the test (a cloud namespace); the suite deletes what it created.
type SubscriptionDeleter interface {
	DeleteSubscription(ctx context.Context, sub string) error
}

// Run runs the suite. newBackend is called once per subtest and may share
// one broker between calls; the suite closes every backend it gets.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	t.Helper()
	s := &suite{newBackend: newBackend}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"TargetedPublish", s.targetedPublish},
		{"ControlMessageTargeted", s.controlTargeted},
		{"DuplicateDetection", s.duplicateDetection},
		{"ReceiveWaitsThenReturnsEmpty", s.receiveWaitsEmpty},
		{"ReceiveReturnsPromptlyWhenMessageArrives", s.receiveReturnsPromptly},
		{"ReceiveBatch", s.receiveBatch},
		{"Complete", s.complete},
		{"Abandon", s.abandon},
		{"RedeliveryAfterLockExpiry", s.lockExpiry},
		{"RenewLockHoldsMessage", s.renewLock},
		{"RenewLockAfterLapseIsLost", s.renewLapsed},
		{"DeadLetterExplicit", s.deadLetterExplicit},
		{"DeadLetterAfterMaxDeliveries", s.deadLetterMaxDeliveries},
		{"DepthPerSubscription", s.depth},
		{"UnknownSubscription", s.unknownSubscription},
		{"InvalidMessage", s.invalidMessage},
		{"OrderingKey", s.orderingKey},
		{"ClosedBackend", s.closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, s.harness(t))
		})
	}
}

type suite struct {
	newBackend func(t *testing.T) Backend
}

// harness is one subtest's backend and the subscriptions it created.
type harness struct {
	t      *testing.T
	b      Backend
	limits bus.Limits
	ctx    context.Context
	prefix string
}

func (s *suite) harness(t *testing.T) *harness {
	b := s.newBackend(t)
	limits := b.Limits()
	require.Positive(t, limits.LockDuration, "backend must report its lock duration")
	require.Positive(t, limits.MaxDeliveries, "backend must report its max deliveries")
	// Bound every subtest: a broker that never answers fails instead of
	// hanging the run.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute+10*limits.LockDuration)
	t.Cleanup(cancel)
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, b.Close(ctx), "close backend")
	})
	return &harness{t: t, b: b, limits: limits, ctx: ctx, prefix: "bt" + randomHex(4)}
}

// sub creates a subscription unique to this subtest run. Names stay within
// bus.MaxSubscriptionLen and use a '.' so encodings of fleet ids are covered.
func (h *harness) sub(name string) string {
	h.t.Helper()
	sub := h.prefix + "." + name
	require.NoError(h.t, h.b.EnsureSubscription(h.ctx, sub), "ensure subscription %s", sub)
	// Idempotent: factories call it on every start.
	require.NoError(h.t, h.b.EnsureSubscription(h.ctx, sub), "ensure subscription %s again", sub)
	if del, ok := h.b.(SubscriptionDeleter); ok {
		h.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := del.DeleteSubscription(ctx, sub); err != nil {
				h.t.Logf("delete subscription %s: %v", sub, err)
			}
		})
	}
	return sub
}

func (h *harness) msg(sub, id string) bus.Message {
	return bus.Message{
		ID:           id,
		Subscription: sub,
		Body:         []byte(`{"id":"` + id + `"}`),
		Properties: map[string]string{
			bus.PropTargetFactoryID: sub,
			bus.PropProductID:       "p1",
			bus.PropRepo:            "repo-a",
			bus.PropPriority:        "normal",
			bus.PropKind:            string(bus.KindDispatch),
		},
		OrderingKey: "repo-a",
	}
}

func (h *harness) send(m bus.Message) {
	h.t.Helper()
	require.NoError(h.t, h.b.Send(h.ctx, m), "send %s", m.ID)
}

// receiveN collects exactly n deliveries of sub, failing if they do not all
// arrive within a generous bound.
func (h *harness) receiveN(sub string, n int) []bus.Delivery {
	h.t.Helper()
	var got []bus.Delivery
	deadline := time.Now().Add(h.patience())
	for len(got) < n && time.Now().Before(deadline) {
		ds, err := h.b.Receive(h.ctx, sub, n-len(got), time.Until(deadline))
		require.NoError(h.t, err, "receive from %s", sub)
		got = append(got, ds...)
	}
	require.Len(h.t, got, n, "deliveries from %s: %v", sub, ids(got))
	return got
}

func (h *harness) receiveOne(sub string) bus.Delivery {
	h.t.Helper()
	return h.receiveN(sub, 1)[0]
}

// receiveNone asserts that sub delivers nothing for wait.
func (h *harness) receiveNone(sub string, wait time.Duration) {
	h.t.Helper()
	ds, err := h.b.Receive(h.ctx, sub, 10, wait)
	require.NoError(h.t, err, "receive from %s", sub)
	require.Empty(h.t, ds, "unexpected deliveries from %s: %v", sub, ids(ds))
}

func (h *harness) deadLettersN(sub string, n int) []bus.Delivery {
	h.t.Helper()
	var got []bus.Delivery
	deadline := time.Now().Add(h.patience())
	for len(got) < n && time.Now().Before(deadline) {
		ds, err := h.b.ReceiveDeadLetters(h.ctx, sub, n-len(got), time.Until(deadline))
		require.NoError(h.t, err, "receive dead letters of %s", sub)
		got = append(got, ds...)
	}
	require.Len(h.t, got, n, "dead letters of %s: %v", sub, ids(got))
	return got
}

// eventuallyDepth waits for Depth(sub) == want: some brokers (Service Bus
// runtime properties) report counts with a delay.
func (h *harness) eventuallyDepth(sub string, want int64) {
	h.t.Helper()
	var last int64
	var lastErr error
	ok := waitFor(h.ctx, 20*time.Second, func() bool {
		last, lastErr = h.b.Depth(h.ctx, sub)
		return lastErr == nil && last == want
	})
	require.NoError(h.t, lastErr, "depth of %s", sub)
	require.True(h.t, ok, "depth of %s: want %d, last read %d", sub, want, last)
}

// patience bounds how long an expected message may take to arrive: a
// network round trip to a cloud broker plus a lock expiry.
func (h *harness) patience() time.Duration {
	return 10*time.Second + 2*h.limits.LockDuration
}

// quiet is how long "nothing arrives" is observed: past one lock duration,
// so a message that was wrongly left locked would have come back.
func (h *harness) quiet() time.Duration {
	return h.limits.LockDuration + h.limits.LockDuration/2 + 200*time.Millisecond
}

func (s *suite) targetedPublish(t *testing.T, h *harness) {
	a, b := h.sub("a"), h.sub("b")
	m := h.msg(a, "job-1:1")
	m.TTL = time.Hour
	h.send(m)

	h.receiveNone(b, time.Second)
	d := h.receiveOne(a)
	require.Equal(t, m.ID, d.ID)
	require.Equal(t, a, d.Subscription)
	require.Equal(t, m.Body, d.Body)
	require.Equal(t, m.Properties, d.Properties, "application properties round-trip")
	require.Equal(t, m.OrderingKey, d.OrderingKey)
	require.Equal(t, 1, d.DeliveryCount)
	require.WithinDuration(t, time.Now(), d.EnqueuedAt, 5*time.Minute, "enqueued time is the broker's accept time")
	require.NotNil(t, d.Handle(), "a delivery carries its backend handle")
	require.NoError(t, h.b.Complete(h.ctx, d))
	h.eventuallyDepth(b, 0)
}

// controlTargeted: a cancel command reaches only the holder's subscription
// and decodes there as sent (no ordering key: it must not wait behind the
// repo's dispatches).
func (s *suite) controlTargeted(t *testing.T, h *harness) {
	a, b := h.sub("a"), h.sub("b")
	msg := protocol.ControlMessage{Action: protocol.ControlCancel, JobID: "job-1", ProductID: "p1", TargetFactoryID: a, LeaseEpoch: 2}
	m, err := bus.ControlToMessage(msg)
	require.NoError(t, err)
	h.send(m)
	h.receiveNone(b, time.Second)
	d := h.receiveOne(a)
	dec, err := bus.Decode(d)
	require.NoError(t, err)
	require.Equal(t, &msg, dec.Control)
	require.NoError(t, h.b.Complete(h.ctx, d))
}

func (s *suite) duplicateDetection(t *testing.T, h *harness) {
	a := h.sub("dup")
	h.send(h.msg(a, "job:1"))
	h.send(h.msg(a, "job:1")) // a repeated publish of one dispatch
	got := h.receiveN(a, 1)
	require.Equal(t, "job:1", got[0].ID)
	require.NoError(t, h.b.Complete(h.ctx, got[0]))

	// Completed or not, the ID stays remembered for the duplicate window.
	h.send(h.msg(a, "job:1"))
	// The re-dispatch case: a new epoch is a new ID and must go out.
	h.send(h.msg(a, "job:2"))
	got = h.receiveN(a, 1)
	require.Equal(t, "job:2", got[0].ID)
	require.NoError(t, h.b.Complete(h.ctx, got[0]))
	h.receiveNone(a, time.Second)
	h.eventuallyDepth(a, 0)
}

func (s *suite) receiveWaitsEmpty(t *testing.T, h *harness) {
	a := h.sub("empty")
	const wait = 1500 * time.Millisecond
	start := time.Now()
	ds, err := h.b.Receive(h.ctx, a, 5, wait)
	elapsed := time.Since(start)
	require.NoError(t, err)
	require.Empty(t, ds)
	require.GreaterOrEqual(t, elapsed, wait/2, "receive waits rather than polling")
	require.Less(t, elapsed, wait+5*time.Second, "receive returns within its wait")

	// A cancelled context ends the wait with the context's error.
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	_, err = h.b.Receive(ctx, a, 5, wait)
	require.ErrorIs(t, err, context.Canceled)
}

func (s *suite) receiveReturnsPromptly(t *testing.T, h *harness) {
	a := h.sub("prompt")
	const wait = 20 * time.Second
	type result struct {
		ds      []bus.Delivery
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		ds, err := h.b.Receive(h.ctx, a, 5, wait)
		done <- result{ds, err, time.Since(start)}
	}()
	// The stimulus lands while the receive is (very likely) blocked; if it
	// lands first the receive must return at once all the same.
	var r result
	select {
	case r = <-done:
		t.Fatalf("receive returned before anything was sent: %v %v", ids(r.ds), r.err)
	case <-time.After(300 * time.Millisecond):
	}
	h.send(h.msg(a, "mid-wait:1"))
	r = <-done
	require.NoError(t, r.err)
	require.Len(t, r.ds, 1)
	require.Equal(t, "mid-wait:1", r.ds[0].ID)
	require.Less(t, r.elapsed, wait/2, "receive returns when a message arrives, not at the end of its wait")
	require.NoError(t, h.b.Complete(h.ctx, r.ds[0]))
}

func (s *suite) receiveBatch(t *testing.T, h *harness) {
	a := h.sub("batch")
	for i := range 5 {
		// Distinct keys: with sessions a key's messages are handed to one
		// receiver at a time, and this test holds them all unsettled.
		m := h.msg(a, fmt.Sprintf("batch:%d", i+1))
		m.OrderingKey = fmt.Sprintf("repo-%d", i+1)
		h.send(m)
	}
	h.eventuallyDepth(a, 5)
	var got []bus.Delivery
	for len(got) < 5 {
		ds, err := h.b.Receive(h.ctx, a, 3, 10*time.Second)
		require.NoError(t, err)
		require.NotEmpty(t, ds)
		require.LessOrEqual(t, len(ds), 3, "receive honours max")
		got = append(got, ds...)
	}
	require.Len(t, got, 5)
	require.ElementsMatch(t, []string{"batch:1", "batch:2", "batch:3", "batch:4", "batch:5"}, ids(got))
	for _, d := range got {
		require.NoError(t, h.b.Complete(h.ctx, d))
	}
	h.eventuallyDepth(a, 0)
}

func (s *suite) complete(t *testing.T, h *harness) {
	a := h.sub("complete")
	h.send(h.msg(a, "done:1"))
	d := h.receiveOne(a)
	require.NoError(t, h.b.Complete(h.ctx, d))
	h.eventuallyDepth(a, 0)
	// Gone for good: not redelivered after the lock would have expired.
	h.receiveNone(a, h.quiet())
	// Settling twice is refused: the lock is gone with the message.
	require.ErrorIs(t, h.b.Complete(h.ctx, d), bus.ErrLockLost)
}

func (s *suite) abandon(t *testing.T, h *harness) {
	a := h.sub("abandon")
	h.send(h.msg(a, "again:1"))
	d := h.receiveOne(a)
	require.Equal(t, 1, d.DeliveryCount)
	require.NoError(t, h.b.Abandon(h.ctx, d))
	// Redelivered at once, not after the lock duration.
	start := time.Now()
	d2 := h.receiveOne(a)
	require.Less(t, time.Since(start), h.limits.LockDuration, "abandon releases the lock immediately")
	require.Equal(t, "again:1", d2.ID)
	require.Equal(t, 2, d2.DeliveryCount)
	require.Equal(t, d.Body, d2.Body)
	require.NoError(t, h.b.Complete(h.ctx, d2))
	h.eventuallyDepth(a, 0)
}

func (s *suite) lockExpiry(t *testing.T, h *harness) {
	a := h.sub("expiry")
	h.send(h.msg(a, "crash:1"))
	d := h.receiveOne(a)
	received := time.Now()
	require.Equal(t, 1, d.DeliveryCount)
	// The receiver "crashes": no settlement. The message comes back once the
	// lock expires, and not before.
	d2 := h.receiveOne(a)
	require.GreaterOrEqual(t, time.Since(received), h.limits.LockDuration*3/4, "redelivered only after the lock expired")
	require.Equal(t, "crash:1", d2.ID)
	require.Equal(t, 2, d2.DeliveryCount)
	require.NoError(t, h.b.Complete(h.ctx, d2))
	h.eventuallyDepth(a, 0)
}

// renewLock: a receiver renewing its lock holds the message for several
// lock durations (an elastic execution holds its dispatch for its whole
// run); meanwhile nobody else gets it and it stays counted in the depth
// (what the pool's scaler reads).
func (s *suite) renewLock(t *testing.T, h *harness) {
	a := h.sub("renew")
	h.send(h.msg(a, "long:1"))
	d := h.receiveOne(a)
	received := time.Now()
	lock := h.limits.LockDuration
	require.WithinDuration(t, received.Add(lock/2), d.LockedUntil, lock/2+5*time.Second,
		"a delivery says when its lock lapses")

	until := d.LockedUntil
	for time.Since(received) < 3*lock {
		h.receiveNone(a, lock/3)
		next, err := h.b.RenewLock(h.ctx, d)
		require.NoError(t, err, "renew %s after %s", d.ID, time.Since(received))
		require.True(t, next.After(until) || next.Equal(until), "renewal moves the lock forward: %s then %s", until, next)
		until = next
	}
	h.eventuallyDepth(a, 1)
	require.NoError(t, h.b.Complete(h.ctx, d), "the lock held across renewals still settles the message")
	h.eventuallyDepth(a, 0)
	_, err := h.b.RenewLock(h.ctx, d)
	require.ErrorIs(t, err, bus.ErrLockLost, "a settled delivery has no lock to renew")
	h.receiveNone(a, h.quiet())
}

// renewLapsed: once a lock lapsed and the message went to another
// receiver, the first receiver's renewal is refused (a crashed or stalled
// elastic execution); the new holder's lock is unaffected.
func (s *suite) renewLapsed(t *testing.T, h *harness) {
	a := h.sub("lapse")
	h.send(h.msg(a, "lapse:1"))
	d := h.receiveOne(a)
	// No renewal, no settlement: the message comes back after the lock.
	d2 := h.receiveOne(a)
	require.Equal(t, "lapse:1", d2.ID)
	require.Equal(t, 2, d2.DeliveryCount)
	_, err := h.b.RenewLock(h.ctx, d)
	require.ErrorIs(t, err, bus.ErrLockLost, "the lapsed lock is not renewed")
	_, err = h.b.RenewLock(h.ctx, d2)
	require.NoError(t, err, "the new holder renews its own lock")
	require.NoError(t, h.b.Complete(h.ctx, d2))
	h.eventuallyDepth(a, 0)
}

func (s *suite) deadLetterExplicit(t *testing.T, h *harness) {
	a := h.sub("dlq")
	m := h.msg(a, "poison:1")
	h.send(m)
	d := h.receiveOne(a)
	const reason = "malformed: body is not a dispatch message"
	require.NoError(t, h.b.DeadLetter(h.ctx, d, reason))
	h.eventuallyDepth(a, 0)
	h.receiveNone(a, h.quiet())

	dl := h.deadLettersN(a, 1)[0]
	require.Equal(t, m.ID, dl.ID)
	require.Equal(t, a, dl.Subscription)
	require.Equal(t, m.Body, dl.Body)
	require.Equal(t, m.Properties, dl.Properties)
	require.Equal(t, reason, dl.DeadLetterReason)
	require.Error(t, h.b.DeadLetter(h.ctx, dl, "again"), "a dead letter cannot be dead-lettered")
	require.NoError(t, h.b.Complete(h.ctx, dl), "a dead letter is removed by completing it")
	ds, err := h.b.ReceiveDeadLetters(h.ctx, a, 10, h.quiet())
	require.NoError(t, err)
	require.Empty(t, ds, "completed dead letter is gone: %v", ids(ds))
}

func (s *suite) deadLetterMaxDeliveries(t *testing.T, h *harness) {
	a := h.sub("maxdel")
	m := h.msg(a, "flaky:1")
	h.send(m)
	for i := 1; i <= h.limits.MaxDeliveries; i++ {
		d := h.receiveOne(a)
		require.Equal(t, i, d.DeliveryCount)
		require.NoError(t, h.b.Abandon(h.ctx, d))
	}
	// Delivered MaxDeliveries times: the next receive must not see it.
	h.receiveNone(a, h.quiet())
	h.eventuallyDepth(a, 0)

	dl := h.deadLettersN(a, 1)[0]
	require.Equal(t, m.ID, dl.ID)
	require.Equal(t, m.Properties, dl.Properties)
	require.Equal(t, bus.ReasonMaxDeliveries, dl.DeadLetterReason)
	require.NoError(t, h.b.Complete(h.ctx, dl))
}

func (s *suite) depth(t *testing.T, h *harness) {
	a, b := h.sub("deptha"), h.sub("depthb")
	h.eventuallyDepth(a, 0)
	for i := range 3 {
		h.send(h.msg(a, fmt.Sprintf("a:%d", i+1)))
	}
	h.send(h.msg(b, "b:1"))
	h.eventuallyDepth(a, 3)
	h.eventuallyDepth(b, 1)

	// A locked message is still active: a pool's scaler must not shrink
	// while work is in flight.
	d := h.receiveOne(a)
	h.eventuallyDepth(a, 3)
	require.NoError(t, h.b.Complete(h.ctx, d))
	h.eventuallyDepth(a, 2)
	// Dead letters are not active.
	d = h.receiveOne(b)
	require.NoError(t, h.b.DeadLetter(h.ctx, d, "test"))
	h.eventuallyDepth(b, 0)
	h.eventuallyDepth(a, 2)
}

func (s *suite) unknownSubscription(t *testing.T, h *harness) {
	missing := h.prefix + ".missing"
	_, err := h.b.Depth(h.ctx, missing)
	require.ErrorIs(t, err, bus.ErrNotFound)
	_, err = h.b.Receive(h.ctx, missing, 1, time.Second)
	require.ErrorIs(t, err, bus.ErrNotFound)
	_, err = h.b.ReceiveDeadLetters(h.ctx, missing, 1, time.Second)
	require.ErrorIs(t, err, bus.ErrNotFound)
}

func (s *suite) invalidMessage(t *testing.T, h *harness) {
	a := h.sub("invalid")
	for name, m := range map[string]bus.Message{
		"no id":           {Subscription: a},
		"no subscription": {ID: "x:1"},
		"id too long":     {ID: strings.Repeat("x", bus.MaxMessageIDLen+1), Subscription: a},
		"negative ttl":    {ID: "x:1", Subscription: a, TTL: -time.Second},
		"target mismatch": {ID: "x:1", Subscription: a, Properties: map[string]string{bus.PropTargetFactoryID: "other"}},
	} {
		require.ErrorIs(t, h.b.Send(h.ctx, m), bus.ErrInvalid, name)
	}
	require.ErrorIs(t, h.b.EnsureSubscription(h.ctx, "has space"), bus.ErrInvalid)
	require.ErrorIs(t, h.b.EnsureSubscription(h.ctx, ""), bus.ErrInvalid)
	h.eventuallyDepth(a, 0)
}

func (s *suite) orderingKey(t *testing.T, h *harness) {
	a := h.sub("order")
	// Two keys interleaved, plus a message without a key.
	sent := []struct{ id, key string }{
		{"k1-1:1", "repo-1"}, {"k2-1:1", "repo-2"}, {"k1-2:1", "repo-1"},
		{"none:1", ""}, {"k2-2:1", "repo-2"}, {"k1-3:1", "repo-1"},
	}
	for _, s := range sent {
		m := h.msg(a, s.id)
		m.OrderingKey = s.key
		h.send(m)
	}
	// Settle each delivery before asking for more, as a factory with one
	// seat would: with sessions, a key stays locked until its messages are
	// settled.
	byKey := map[string][]string{}
	var all []bus.Delivery
	deadline := time.Now().Add(2 * h.patience())
	for len(all) < len(sent) && time.Now().Before(deadline) {
		ds, err := h.b.Receive(h.ctx, a, 1, time.Until(deadline))
		require.NoError(t, err)
		for _, d := range ds {
			byKey[d.OrderingKey] = append(byKey[d.OrderingKey], d.ID)
			require.NoError(t, h.b.Complete(h.ctx, d))
		}
		all = append(all, ds...)
	}
	require.Len(t, all, len(sent), "deliveries: %v", ids(all))
	if h.limits.KeyOrder {
		require.Equal(t, []string{"k1-1:1", "k1-2:1", "k1-3:1"}, byKey["repo-1"], "per-key order")
		require.Equal(t, []string{"k2-1:1", "k2-2:1"}, byKey["repo-2"], "per-key order")
	} else {
		require.ElementsMatch(t, []string{"k1-1:1", "k1-2:1", "k1-3:1"}, byKey["repo-1"])
		require.ElementsMatch(t, []string{"k2-1:1", "k2-2:1"}, byKey["repo-2"])
	}
	require.Equal(t, []string{"none:1"}, byKey[""])
	h.eventuallyDepth(a, 0)
}

func (s *suite) closed(t *testing.T, h *harness) {
	a := h.sub("closed")
	h.send(h.msg(a, "closed:1"))
	// A second backend is closed, so h.b can still clean up after the test.
	b := s.newBackend(t)
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	ds, err := b.Receive(h.ctx, a, 1, h.patience())
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, b.Close(h.ctx))
	require.NoError(t, b.Close(h.ctx), "close is idempotent")
	require.ErrorIs(t, b.Send(h.ctx, h.msg(a, "closed:2")), bus.ErrClosed)
	_, err = b.Receive(h.ctx, a, 1, time.Second)
	require.ErrorIs(t, err, bus.ErrClosed)
	require.ErrorIs(t, b.Complete(h.ctx, ds[0]), bus.ErrClosed)
	_, err = b.Depth(h.ctx, a)
	require.ErrorIs(t, err, bus.ErrClosed)
	require.ErrorIs(t, b.EnsureSubscription(h.ctx, a), bus.ErrClosed)

	// The delivery the closed client never settled comes back to a live
	// one after its lock.
	d := h.receiveOne(a)
	require.Equal(t, "closed:1", d.ID)
	require.Equal(t, 2, d.DeliveryCount)
	require.NoError(t, h.b.Complete(h.ctx, d))
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
}

func ids(ds []bus.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b)
}
