// Package bus is the dispatch transport seen from both ends: the types every
// broker adapter speaks (Message, Delivery, Limits, the error sentinels), the
// Dispatcher that turns coord's dispatch and GC requests into targeted
// messages, and the decoders a factory uses on what it receives.
//
// The broker is transport, never state: a Delivery only tells a factory that
// a job may be waiting for it. The authoritative claim is the coordinator's
// fenced accept ({jobId, dispatchEpoch}); a duplicate, late or stale delivery
// is harmless because accept rejects it. That is why every adapter here is
// at-least-once and none tries to be exactly-once.
//
// Adapters live in sub-packages named after what they wrap (bus/nats,
// bus/servicebus) and must pass the one conformance suite in bus/bustest.
// This package imports no SDK.
package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"
	"unicode"
	"unicode/utf8"
)

// Application properties every message carries beside its body, so a broker
// can route and an operator can read a message without decoding it. Service
// Bus subscriptions filter on PropTargetFactoryID.
const (
	PropTargetFactoryID = "targetFactoryId"
	PropProductID       = "productId"
	PropRepo            = "repo"
	PropPriority        = "priority"
	PropKind            = "kind"
)

// Kind says what a message's body is.
type Kind string

// The kinds of message on the dispatch transport.
const (
	// KindDispatch: the body is a protocol.DispatchMessage.
	KindDispatch Kind = "dispatch"
	// KindGC: the body is a protocol.GCRequest.
	KindGC Kind = "gc"
	// KindControl: the body is a protocol.ControlMessage (cancel or
	// preempt one lease).
	KindControl Kind = "control"
)

// ReasonMaxDeliveries is the dead-letter reason of a message that was
// delivered Limits.MaxDeliveries times without being completed. It is the
// reason Service Bus itself records, so both backends read the same.
const ReasonMaxDeliveries = "MaxDeliveryCountExceeded"

// Size limits shared by every backend: the tightest of Service Bus (message
// id 128 characters, subscription name 50) and NATS.
const (
	MaxMessageIDLen    = 128
	MaxSubscriptionLen = 50
)

// Errors every adapter maps its broker's failures onto. Adapters wrap them
// together with the broker's own error, so callers can branch with
// errors.Is and still log the cause.
var (
	// ErrNotFound: the subscription (or the topic/stream behind it) does not
	// exist. Subscriptions are created by EnsureSubscription or provisioning,
	// never implicitly by a receive. A transport failure, not an answer
	// about a job: it never becomes a fleet not_found (a 404).
	ErrNotFound = errors.New("bus: subscription not found")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("bus: client closed")
	// ErrLockLost: the delivery can no longer be settled or renewed by
	// this receiver: its lock expired or it was already settled. The message is (or will
	// be) delivered again; the fenced accept makes that harmless.
	ErrLockLost = errors.New("bus: message lock lost")
	// ErrInvalid: a message or an argument the broker would refuse.
	ErrInvalid = errors.New("bus: invalid message")
	// ErrMalformed: a received message this version cannot decode. The
	// receiver should dead-letter it rather than abandon it forever.
	ErrMalformed = errors.New("bus: malformed message")
)

// Message is one message for one subscription.
type Message struct {
	// ID is the duplicate-detection key: a second message with the same ID
	// inside the broker's duplicate window is dropped. Dispatch messages use
	// protocol.DispatchMessage.MessageID (jobId:dispatchEpoch).
	ID string
	// Subscription is the target factory or pool id: the one subscription
	// that receives the message.
	Subscription string
	// Body is opaque to the transport; Properties[PropKind] says how to read it.
	Body []byte
	// Properties are string application properties (see the Prop constants).
	Properties map[string]string
	// OrderingKey groups messages that should be handled one after another
	// (the repo). Optional. Service Bus with sessions serializes a key; NATS
	// keeps per-subscription publish order, which covers every key.
	OrderingKey string
	// TTL bounds how long an undelivered message is worth delivering; zero
	// leaves the broker's default. An expired message is dropped: the
	// coordinator's redispatch sweep is what recovers its job.
	TTL time.Duration
}

// Kind is the message's PropKind property.
func (m Message) Kind() Kind { return Kind(m.Properties[PropKind]) }

// Validate checks what every backend needs of a message.
func (m Message) Validate() error {
	switch {
	case m.ID == "":
		return fmt.Errorf("%w: message id is empty", ErrInvalid)
	case len(m.ID) > MaxMessageIDLen:
		return fmt.Errorf("%w: message id %q is longer than %d bytes", ErrInvalid, m.ID, MaxMessageIDLen)
	case m.TTL < 0:
		return fmt.Errorf("%w: message %s has a negative TTL", ErrInvalid, m.ID)
	}
	if err := ValidateSubscription(m.Subscription); err != nil {
		return fmt.Errorf("message %s: %w", m.ID, err)
	}
	if t, ok := m.Properties[PropTargetFactoryID]; ok && t != m.Subscription {
		// Service Bus routes on the property, NATS on the subscription: if
		// they disagree the two backends would deliver differently.
		return fmt.Errorf("%w: message %s is for subscription %q but its %s is %q",
			ErrInvalid, m.ID, m.Subscription, PropTargetFactoryID, t)
	}
	return nil
}

// Clone returns a copy that shares nothing mutable with m.
func (m Message) Clone() Message {
	m.Body = append([]byte(nil), m.Body...)
	m.Properties = maps.Clone(m.Properties)
	return m
}

// ValidateSubscription checks a subscription name: non-empty, at most
// MaxSubscriptionLen bytes, printable, no whitespace. Backends encode it
// further for their own naming rules; fleet ids (letters, digits, '.', '_',
// '-') always pass.
func ValidateSubscription(sub string) error {
	switch {
	case sub == "":
		return fmt.Errorf("%w: subscription is empty", ErrInvalid)
	case len(sub) > MaxSubscriptionLen:
		return fmt.Errorf("%w: subscription %q is longer than %d bytes", ErrInvalid, sub, MaxSubscriptionLen)
	case !utf8.ValidString(sub):
		return fmt.Errorf("%w: subscription %q is not valid UTF-8", ErrInvalid, sub)
	}
	for _, r := range sub {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%w: subscription %q holds whitespace or a control character", ErrInvalid, sub)
		}
	}
	return nil
}

// Delivery is a received message, locked to its receiver until it is
// settled (Complete, Abandon, DeadLetter) or its lock expires.
type Delivery struct {
	Message
	// DeliveryCount is 1 on the first delivery and grows with every
	// abandon or lock expiry.
	DeliveryCount int
	// EnqueuedAt is when the broker accepted the message (for a dead
	// letter: the original message).
	EnqueuedAt time.Time
	// DeadLetterReason is set on deliveries from a dead-letter queue.
	DeadLetterReason string
	// DeadLetterDescription is the free-text detail of a dead letter.
	DeadLetterDescription string
	// LockedUntil is when the delivery's lock lapses unless renewed
	// (RenewLock): from then on the message may go to another receiver.
	LockedUntil time.Time

	handle any
}

// LockRenewer extends a delivery's lock, so a receiver can hold a message
// longer than one lock duration: an elastic execution holds its dispatch
// for its whole run, which keeps the message counted in the subscription's
// depth (the scaler's queue length) while the run lasts. Both backends
// implement it.
type LockRenewer interface {
	// RenewLock extends d's lock by the subscription's lock duration from
	// now and returns the new LockedUntil. It fails with ErrLockLost once
	// the lock has lapsed or d was settled: the message may already be with
	// another receiver.
	RenewLock(ctx context.Context, d Delivery) (time.Time, error)
}

// NewDelivery is for adapters: it attaches the backend's own handle (lock
// token, JetStream message) that settling the delivery needs.
func NewDelivery(m Message, deliveryCount int, enqueuedAt time.Time, handle any) Delivery {
	return Delivery{Message: m, DeliveryCount: deliveryCount, EnqueuedAt: enqueuedAt, handle: handle}
}

// Handle is for adapters: the backend handle given to NewDelivery.
func (d Delivery) Handle() any { return d.handle }

// Limits are the delivery guarantees a backend was configured with. A
// factory reads LockDuration to know how long it has between receive and
// complete; the conformance suite reads all of them.
type Limits struct {
	// LockDuration is how long a delivery stays invisible to other receivers
	// before it is delivered again (Service Bus lock duration, JetStream
	// AckWait).
	LockDuration time.Duration
	// MaxDeliveries is how many deliveries a message gets before it is
	// dead-lettered with ReasonMaxDeliveries.
	MaxDeliveries int
	// DuplicateWindow is how long a message ID is remembered.
	DuplicateWindow time.Duration
	// KeyOrder: messages of one OrderingKey in one subscription are first
	// delivered in publish order.
	KeyOrder bool
}
