package servicebus

import (
	"context"
	"crypto/rand"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
)

// fakeNamespace is an in-memory stand-in for one Service Bus namespace,
// modelled on the documented behaviour the adapter relies on: correlation
// filters on application properties, duplicate detection on MessageID,
// peek-lock with lock tokens and DeliveryCount (1 on first delivery), dead-
// lettering once DeliveryCount reaches MaxDeliveryCount and the lock is
// released, sessions locked to one receiver, NotFound as amqp:not-found on
// the link and nil from the admin getters. It records every message sent
// so tests can inspect exactly what the adapter put on the wire.
type fakeNamespace struct {
	mu      sync.Mutex
	topics  map[string]bool
	subs    map[string]*fakeSub // key topic/sub
	dedup   map[string]time.Time
	window  time.Duration
	sent    []*azservicebus.Message
	seq     int64
	sendErr error // returned by the next SendMessage
	// afterFirst: each receive's TimeAfterFirstMessage (receivedWith).
	afterFirst []time.Duration
}

type fakeSub struct {
	props    admin.SubscriptionProperties
	active   []*fakeMsg
	dead     []*fakeMsg
	sessions map[string]*fakeSession // locked sessions
}

// fakeSession is a session lock: held by one receiver until it closes or
// the lock expires; RenewSessionLock extends it.
type fakeSession struct {
	owner       *fakeReceiver
	lockedUntil time.Time
}

type fakeMsg struct {
	m           azservicebus.Message
	seq         int64
	enqueued    time.Time
	deliveries  uint32
	token       [16]byte
	lockedUntil time.Time
	session     string
	dlReason    *string
	dlDesc      *string
}

func newFakeNamespace(topics ...string) *fakeNamespace {
	ns := &fakeNamespace{topics: map[string]bool{}, subs: map[string]*fakeSub{}, dedup: map[string]time.Time{}, window: time.Minute}
	for _, t := range topics {
		ns.topics[t] = true
	}
	return ns
}

// receivedWith records a receive's TimeAfterFirstMessage as the SDK reads
// it: its default, 20 ms, when none is given.
func (ns *fakeNamespace) receivedWith(o *azservicebus.ReceiveMessagesOptions) {
	d := 20 * time.Millisecond
	if o != nil && o.TimeAfterFirstMessage > 0 {
		d = o.TimeAfterFirstMessage
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.afterFirst = append(ns.afterFirst, d)
}

func (ns *fakeNamespace) sentMessages() []*azservicebus.Message {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return slices.Clone(ns.sent)
}

func notFound() error {
	return &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondNotFound, Description: "entity not found"}}
}

func lockLost() error { return &azservicebus.Error{Code: azservicebus.CodeLockLost} }

func lockDuration(p admin.SubscriptionProperties) time.Duration {
	// isoDuration writes PT<seconds>S.
	d, err := time.ParseDuration(strings.ToLower(strings.TrimPrefix(*p.LockDuration, "PT")))
	if err != nil {
		panic(err)
	}
	return d
}

// expire releases expired locks; a message whose deliveries reached the
// limit goes to the dead-letter queue instead. Lock held.
func (s *fakeSub) expire(now time.Time) {
	for _, m := range slices.Clone(s.active) {
		if !m.lockedUntil.IsZero() && now.After(m.lockedUntil) {
			s.release(m)
		}
	}
}

// release unlocks m (abandon or lock expiry). Lock held.
func (s *fakeSub) release(m *fakeMsg) {
	m.lockedUntil = time.Time{}
	m.token = [16]byte{}
	if m.deliveries >= uint32(*s.props.MaxDeliveryCount) {
		s.remove(m)
		m.dlReason = ptr("MaxDeliveryCountExceeded")
		m.dlDesc = ptr("Message could not be consumed after the max delivery count attempts.")
		m.deliveries = 0
		s.dead = append(s.dead, m)
	}
}

func (s *fakeSub) remove(m *fakeMsg) {
	s.active = slices.DeleteFunc(s.active, func(x *fakeMsg) bool { return x == m })
}

func ptr[T any](v T) *T { return &v }

// --- data plane ---

type fakeClient struct{ ns *fakeNamespace }

func (c fakeClient) NewSender(topic string) (sdkSender, error) {
	return &fakeSender{ns: c.ns, topic: topic}, nil
}

func (c fakeClient) NewReceiverForSubscription(topic, sub string, dlq bool) (sdkReceiver, error) {
	return &fakeReceiver{ns: c.ns, key: topic + "/" + sub, dlq: dlq}, nil
}

func (c fakeClient) AcceptNextSessionForSubscription(ctx context.Context, topic, sub string) (sdkReceiver, error) {
	key := topic + "/" + sub
	for {
		c.ns.mu.Lock()
		s, ok := c.ns.subs[key]
		if !ok {
			c.ns.mu.Unlock()
			return nil, notFound()
		}
		now := time.Now()
		s.expire(now)
		for _, m := range s.active {
			if l := s.sessions[m.session]; m.lockedUntil.IsZero() && (l == nil || now.After(l.lockedUntil)) {
				r := &fakeReceiver{ns: c.ns, key: key, session: &m.session}
				s.sessions[m.session] = &fakeSession{owner: r, lockedUntil: now.Add(lockDuration(s.props))}
				c.ns.mu.Unlock()
				return r, nil
			}
		}
		c.ns.mu.Unlock()
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// ownsSession reports whether a session receiver still holds its session
// lock. Lock held.
func (r *fakeReceiver) ownsSession(s *fakeSub) bool {
	if r.session == nil {
		return true
	}
	l := s.sessions[*r.session]
	return l != nil && l.owner == r && time.Now().Before(l.lockedUntil)
}

func (c fakeClient) Close(context.Context) error { return nil }

type fakeSender struct {
	ns    *fakeNamespace
	topic string
}

func (s *fakeSender) SendMessage(_ context.Context, m *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	ns := s.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if err := ns.sendErr; err != nil {
		ns.sendErr = nil
		return err
	}
	if !ns.topics[s.topic] {
		return notFound()
	}
	cp := *m
	cp.ApplicationProperties = maps.Clone(m.ApplicationProperties)
	ns.sent = append(ns.sent, &cp)
	now := time.Now()
	if m.MessageID != nil {
		if at, ok := ns.dedup[*m.MessageID]; ok && now.Sub(at) < ns.window {
			return nil // duplicate: accepted and dropped
		}
		ns.dedup[*m.MessageID] = now
	}
	ns.seq++
	for key, sub := range ns.subs {
		if len(key) <= len(s.topic) || key[:len(s.topic)+1] != s.topic+"/" || !matches(sub.props.DefaultRule, m) {
			continue
		}
		fm := &fakeMsg{m: cp, seq: ns.seq, enqueued: now}
		if m.SessionID != nil {
			fm.session = *m.SessionID
		}
		sub.active = append(sub.active, fm)
	}
	return nil
}

// matches applies a subscription's rule: only correlation filters on
// application properties, which is all the adapter provisions.
func matches(rule *admin.RuleProperties, m *azservicebus.Message) bool {
	if rule == nil {
		return true // the $Default true filter
	}
	f, ok := rule.Filter.(*admin.CorrelationFilter)
	if !ok {
		return false
	}
	for k, v := range f.ApplicationProperties {
		if m.ApplicationProperties[k] != v {
			return false
		}
	}
	return true
}

func (s *fakeSender) Close(context.Context) error { return nil }

type fakeReceiver struct {
	ns      *fakeNamespace
	key     string
	dlq     bool
	session *string // set on session receivers
	mu      sync.Mutex
	busy    bool
	closed  bool
}

func (r *fakeReceiver) ReceiveMessages(ctx context.Context, max int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	r.ns.receivedWith(o)
	r.mu.Lock()
	if r.busy {
		r.mu.Unlock()
		panic("fake: concurrent ReceiveMessages on one receiver")
	}
	r.busy = true
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.busy = false; r.mu.Unlock() }()

	for {
		if out, err := r.take(max); err != nil || len(out) > 0 {
			return out, err
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func (r *fakeReceiver) take(max int) ([]*azservicebus.ReceivedMessage, error) {
	ns := r.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	s, ok := ns.subs[r.key]
	if !ok {
		return nil, notFound()
	}
	now := time.Now()
	s.expire(now)
	if !r.ownsSession(s) {
		return nil, lockLost()
	}
	list := s.active
	if r.dlq {
		list = s.dead
	}
	var out []*azservicebus.ReceivedMessage
	for _, m := range list {
		if len(out) == max {
			break
		}
		if !m.lockedUntil.IsZero() || (r.session != nil && m.session != *r.session) ||
			(r.session == nil && !r.dlq && *s.props.RequiresSession) {
			continue
		}
		m.deliveries++
		_, _ = rand.Read(m.token[:])
		m.lockedUntil = now.Add(lockDuration(s.props))
		rm := &azservicebus.ReceivedMessage{
			MessageID:                  *m.m.MessageID,
			Body:                       m.m.Body,
			ApplicationProperties:      maps.Clone(m.m.ApplicationProperties),
			DeliveryCount:              m.deliveries,
			EnqueuedTime:               ptr(m.enqueued),
			LockToken:                  m.token,
			LockedUntil:                ptr(m.lockedUntil),
			SequenceNumber:             ptr(m.seq),
			TimeToLive:                 m.m.TimeToLive,
			SessionID:                  m.m.SessionID,
			DeadLetterReason:           m.dlReason,
			DeadLetterErrorDescription: m.dlDesc,
		}
		out = append(out, rm)
	}
	return out, nil
}

// settle finds the locked message by token and applies fn. Lock held.
func (r *fakeReceiver) settle(rm *azservicebus.ReceivedMessage, fn func(s *fakeSub, m *fakeMsg)) error {
	ns := r.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	s, ok := ns.subs[r.key]
	if !ok {
		return notFound()
	}
	s.expire(time.Now())
	if !r.ownsSession(s) {
		return lockLost()
	}
	list := s.active
	if r.dlq {
		list = s.dead
	}
	for _, m := range list {
		if m.token == rm.LockToken && !m.lockedUntil.IsZero() {
			fn(s, m)
			return nil
		}
	}
	return lockLost()
}

// RenewMessageLock extends a held message lock and, as the SDK does,
// writes the new expiry into rm.
func (r *fakeReceiver) RenewMessageLock(_ context.Context, rm *azservicebus.ReceivedMessage, _ *azservicebus.RenewMessageLockOptions) error {
	if r.session != nil {
		panic("fake: RenewMessageLock on a session receiver (the SDK has no such method there)")
	}
	return r.settle(rm, func(s *fakeSub, m *fakeMsg) {
		m.lockedUntil = time.Now().Add(lockDuration(s.props))
		rm.LockedUntil = ptr(m.lockedUntil)
	})
}

// RenewSessionLock extends the session lock this receiver holds, and the
// locks of the session's messages it holds with it.
func (r *fakeReceiver) RenewSessionLock(context.Context, *azservicebus.RenewSessionLockOptions) error {
	ns := r.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	s, ok := ns.subs[r.key]
	if !ok {
		return notFound()
	}
	s.expire(time.Now())
	if r.session == nil || !r.ownsSession(s) {
		return lockLost()
	}
	until := time.Now().Add(lockDuration(s.props))
	s.sessions[*r.session].lockedUntil = until
	for _, m := range s.active {
		if m.session == *r.session && !m.lockedUntil.IsZero() {
			m.lockedUntil = until
		}
	}
	return nil
}

// LockedUntil is the session lock's expiry.
func (r *fakeReceiver) LockedUntil() time.Time {
	ns := r.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if r.session == nil {
		return time.Time{}
	}
	if l := ns.subs[r.key].sessions[*r.session]; l != nil && l.owner == r {
		return l.lockedUntil
	}
	return time.Time{}
}

func (r *fakeReceiver) CompleteMessage(_ context.Context, rm *azservicebus.ReceivedMessage, _ *azservicebus.CompleteMessageOptions) error {
	return r.settle(rm, func(s *fakeSub, m *fakeMsg) {
		if r.dlq {
			s.dead = slices.DeleteFunc(s.dead, func(x *fakeMsg) bool { return x == m })
			return
		}
		s.remove(m)
	})
}

func (r *fakeReceiver) AbandonMessage(_ context.Context, rm *azservicebus.ReceivedMessage, _ *azservicebus.AbandonMessageOptions) error {
	return r.settle(rm, func(s *fakeSub, m *fakeMsg) {
		if r.dlq {
			m.lockedUntil, m.token = time.Time{}, [16]byte{}
			return
		}
		s.release(m)
	})
}

func (r *fakeReceiver) DeadLetterMessage(_ context.Context, rm *azservicebus.ReceivedMessage, o *azservicebus.DeadLetterOptions) error {
	return r.settle(rm, func(s *fakeSub, m *fakeMsg) {
		s.remove(m)
		m.lockedUntil, m.token, m.deliveries = time.Time{}, [16]byte{}, 0
		m.dlReason, m.dlDesc = o.Reason, o.ErrorDescription
		s.dead = append(s.dead, m)
	})
}

func (r *fakeReceiver) Close(context.Context) error {
	r.ns.mu.Lock()
	defer r.ns.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.session != nil {
		if s, ok := r.ns.subs[r.key]; ok && r.ownsSession(s) {
			delete(s.sessions, *r.session)
		}
	}
	return nil
}

// --- management plane ---

type fakeAdmin struct {
	ns *fakeNamespace
	// err, when set, is returned by every call (authorization tests).
	err error
}

func (a fakeAdmin) GetTopic(_ context.Context, topic string, _ *admin.GetTopicOptions) (*admin.GetTopicResponse, error) {
	if a.err != nil {
		return nil, a.err
	}
	a.ns.mu.Lock()
	defer a.ns.mu.Unlock()
	if !a.ns.topics[topic] {
		return nil, nil
	}
	return &admin.GetTopicResponse{TopicName: topic}, nil
}

func (a fakeAdmin) GetSubscription(_ context.Context, topic, sub string, _ *admin.GetSubscriptionOptions) (*admin.GetSubscriptionResponse, error) {
	if a.err != nil {
		return nil, a.err
	}
	a.ns.mu.Lock()
	defer a.ns.mu.Unlock()
	s, ok := a.ns.subs[topic+"/"+sub]
	if !ok {
		return nil, nil
	}
	return &admin.GetSubscriptionResponse{TopicName: topic, SubscriptionName: sub, SubscriptionProperties: s.props}, nil
}

func (a fakeAdmin) CreateSubscription(_ context.Context, topic, sub string, o *admin.CreateSubscriptionOptions) (admin.CreateSubscriptionResponse, error) {
	if a.err != nil {
		return admin.CreateSubscriptionResponse{}, a.err
	}
	a.ns.mu.Lock()
	defer a.ns.mu.Unlock()
	key := topic + "/" + sub
	if _, ok := a.ns.subs[key]; ok {
		return admin.CreateSubscriptionResponse{}, &azcore.ResponseError{StatusCode: 409, ErrorCode: "Conflict"}
	}
	if !a.ns.topics[topic] {
		return admin.CreateSubscriptionResponse{}, &azcore.ResponseError{StatusCode: 404}
	}
	a.ns.subs[key] = &fakeSub{props: *o.Properties, sessions: map[string]*fakeSession{}}
	return admin.CreateSubscriptionResponse{}, nil
}

func (a fakeAdmin) DeleteSubscription(_ context.Context, topic, sub string, _ *admin.DeleteSubscriptionOptions) (admin.DeleteSubscriptionResponse, error) {
	if a.err != nil {
		return admin.DeleteSubscriptionResponse{}, a.err
	}
	a.ns.mu.Lock()
	defer a.ns.mu.Unlock()
	delete(a.ns.subs, topic+"/"+sub)
	return admin.DeleteSubscriptionResponse{}, nil
}

func (a fakeAdmin) GetSubscriptionRuntimeProperties(_ context.Context, topic, sub string, _ *admin.GetSubscriptionRuntimePropertiesOptions) (*admin.GetSubscriptionRuntimePropertiesResponse, error) {
	if a.err != nil {
		return nil, a.err
	}
	a.ns.mu.Lock()
	defer a.ns.mu.Unlock()
	s, ok := a.ns.subs[topic+"/"+sub]
	if !ok {
		return nil, nil
	}
	s.expire(time.Now())
	return &admin.GetSubscriptionRuntimePropertiesResponse{
		TopicName: topic, SubscriptionName: sub,
		SubscriptionRuntimeProperties: admin.SubscriptionRuntimeProperties{
			ActiveMessageCount:     int32(len(s.active)),
			DeadLetterMessageCount: int32(len(s.dead)),
		},
	}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
