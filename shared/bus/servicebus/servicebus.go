// Package servicebus is the bus backend on Azure Service Bus, the
// production dispatch transport.
//
// # Topology (provisioned by Terraform)
//
// One topic, fleet-dispatch, with duplicate detection on (the window is a
// topic property). One subscription per factory or pool, named after it,
// whose only rule is a correlation filter targetFactoryId = '<name>' (the
// $Default true-filter rule deleted, or every subscription would receive
// every message). Send stamps targetFactoryId from Message.Subscription, so
// routing never depends on the caller setting the property.
//
// # Identity and roles
//
// Options.ClientID selects a user-assigned managed identity; empty means
// DefaultAzureCredential (workload identity, CLI login on a laptop).
// Sending needs "Azure Service Bus Data Sender", receiving "Data Receiver";
// so does receiving from a subscription's dead-letter queue
// (ReceiveDeadLetters, the coordinator's sweep). The management calls
// (Depth via runtime properties, EnsureSubscription with Provision,
// DeleteSubscription) go through the ATOM API and need the Manage right
// ("Data Owner"): Terraform gives it to each pool's scaler on its own
// subscription and to nobody else, so the deployed coordinator reports no
// depth (Depth fails with ErrUnauthorized).
//
// # Dead letters
//
// Expired messages are not dead-lettered (DeadLetterOnExpiration): the
// sweep re-dispatches from the store. What still lands in a dead-letter
// queue (past MaxDeliveries, a factory refusing a malformed message, a
// filter error) is drained by the coordinator's sweep, which holds Data
// Receiver on every pool subscription for that.
//
// # EnsureSubscription
//
// With Options.Provision it creates a missing subscription with the
// correlation rule, LockDuration, MaxDeliveries and RequiresSession from
// Options (tests, dev namespaces). Without it, it checks that the
// subscription exists and fails with bus.ErrNotFound if it does not; when
// the identity may not read entities (a factory with Data Receiver only) the
// check is skipped and the first Receive reports a missing subscription.
//
// # Sessions
//
// With Options.Sessions the subscriptions require sessions and
// SessionID = Message.OrderingKey (the repo), so one repo's messages are
// handed out one session at a time. A message without an ordering key gets
// its own ID as session, so it is never serialized behind anything.
// Receive accepts the next available session and returns its messages;
// the session stays locked to this client until every delivery of that
// batch is settled, then it is released for the next receiver. Meanwhile
// the key's later messages wait, which is the point: settle promptly
// (complete-on-claim) and a repo's jobs are claimed one after another.
// RenewLock renews the session lock. Elastic executions do not hold their
// dispatch for the run on sessions: it would hold the repo's session.
// NATS has no equivalent lock; there KeyOrder only means publish order.
package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/gigafactory/fleet/shared/bus"
)

// Defaults; LockDuration, MaxDeliveries and DuplicateWindow are Service
// Bus's own defaults.
const (
	DefaultTopic           = "fleet-dispatch"
	DefaultLockDuration    = time.Minute
	DefaultMaxDeliveries   = 10
	DefaultDuplicateWindow = 10 * time.Minute
)

// The subscription model, which Terraform creates identically
// (terraform/servicebus.tf; tests/terraform_servicebus_test.go compares).
const (
	// RuleName is the name of the correlation rule on targetFactoryId.
	RuleName = "target-factory"
	// DeadLetterOnExpiration is off: an expired dispatch has been
	// superseded (the sweep re-dispatches the job from the store with a
	// new epoch), so it simply expires. Dead-lettering it would only fill
	// the dead-letter queue, which counts toward the topic's size quota.
	DeadLetterOnExpiration = false
	// DeadLetterOnFilterError keeps a message whose rule failed to
	// evaluate; the coordinator's sweep drains it like any dead letter.
	DeadLetterOnFilterError = true
)

// propOrderingKey carries Message.OrderingKey as an application property,
// so it survives on subscriptions without sessions too. It is stripped from
// Delivery.Properties on receive.
const propOrderingKey = "orderingKey"

// minWait is the shortest receive wait: the SDK has no "only what is
// there" receive, and a wait shorter than a round trip would never see a
// message.
const minWait = 200 * time.Millisecond

// receiveOptions hands a delivery over as soon as it comes, with whatever
// arrived with it. The SDK's default keeps collecting for 20 ms after the
// first message, and those 20 ms would be on every dispatch's path from
// the broker to its factory (issue 25's receive stage); messages arriving
// in that time are fetched by the next receive instead.
var receiveOptions = &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: time.Millisecond}

// Options configure a Client.
type Options struct {
	// Namespace is the fully qualified namespace host, e.g.
	// fleet-prod.servicebus.windows.net (app setting
	// ServiceBus__fullyQualifiedNamespace).
	Namespace string
	// ClientID of a user-assigned managed identity (ServiceBus__clientId);
	// empty uses DefaultAzureCredential.
	ClientID string
	// Credential overrides ClientID when set.
	Credential azcore.TokenCredential
	// Topic; default fleet-dispatch.
	Topic string
	// Sessions: subscriptions require sessions keyed by OrderingKey. Must
	// match how the subscriptions were provisioned.
	Sessions bool
	// Provision lets EnsureSubscription create missing subscriptions (needs
	// Data Owner). Production subscriptions come from Terraform.
	Provision bool
	// LockDuration, MaxDeliveries and DuplicateWindow describe the entities
	// (Limits) and are applied when provisioning. Keep them equal to the
	// Terraform values.
	LockDuration    time.Duration
	MaxDeliveries   int
	DuplicateWindow time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	if o.Namespace == "" {
		return errors.New("servicebus: namespace is required")
	}
	if o.Topic == "" {
		o.Topic = DefaultTopic
	}
	if o.LockDuration == 0 {
		o.LockDuration = DefaultLockDuration
	}
	if o.MaxDeliveries == 0 {
		o.MaxDeliveries = DefaultMaxDeliveries
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.LockDuration < 5*time.Second || o.LockDuration > 5*time.Minute:
		return fmt.Errorf("servicebus: lock duration %s is outside Service Bus's 5s..5m", o.LockDuration)
	case o.MaxDeliveries < 1:
		return fmt.Errorf("servicebus: max deliveries must be at least 1, got %d", o.MaxDeliveries)
	}
	return nil
}

// Client is a bus backend on one Service Bus namespace. It is safe for
// concurrent use.
type Client struct {
	opts  Options
	log   *slog.Logger
	sdk   sdkClient
	admin sdkAdmin

	closed atomic.Bool

	senderMu sync.Mutex
	sender   sdkSender

	mu        sync.Mutex
	receivers map[receiverKey]*receiver
	sessions  map[*sessionLease]struct{}
}

var _ bus.Sender = (*Client)(nil)

type receiverKey struct {
	sub string
	dlq bool
}

// receiver is one cached AMQP receiver. The SDK allows one ReceiveMessages
// at a time per receiver; sem serializes them and, unlike a mutex, lets a
// waiting caller give up when its context ends.
type receiver struct {
	r   sdkReceiver
	sem chan struct{}
}

// Open creates the credential and clients. It does no I/O except, with
// Provision, checking that the topic exists, so a misnamed namespace or
// topic fails at start rather than at the first send.
func Open(ctx context.Context, opts Options) (*Client, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	cred := opts.Credential
	if cred == nil {
		var err error
		if opts.ClientID != "" {
			cred, err = azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
				ID: azidentity.ClientID(opts.ClientID),
			})
		} else {
			cred, err = azidentity.NewDefaultAzureCredential(nil)
		}
		if err != nil {
			return nil, fmt.Errorf("servicebus: credential: %w", err)
		}
	}
	sb, err := azservicebus.NewClient(opts.Namespace, cred, nil)
	if err != nil {
		return nil, fmt.Errorf("servicebus: client for %s: %w", opts.Namespace, err)
	}
	adm, err := admin.NewClient(opts.Namespace, cred, nil)
	if err != nil {
		return nil, fmt.Errorf("servicebus: admin client for %s: %w", opts.Namespace, err)
	}
	c := newClient(opts, sdkAdapter{sb}, adm)
	if opts.Provision {
		topic, err := adm.GetTopic(ctx, opts.Topic, nil)
		if err != nil {
			_ = sb.Close(ctx)
			return nil, mapErr("topic "+opts.Topic, err)
		}
		if topic == nil {
			_ = sb.Close(ctx)
			return nil, fmt.Errorf("servicebus: topic %s in %s: %w", opts.Topic, opts.Namespace, bus.ErrNotFound)
		}
	}
	return c, nil
}

// newClient wires a Client over any sdkClient/sdkAdmin; Open has applied
// the defaults (tests pass what they need).
func newClient(opts Options, sdk sdkClient, adm sdkAdmin) *Client {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		opts: opts, log: opts.Logger, sdk: sdk, admin: adm,
		receivers: map[receiverKey]*receiver{},
		sessions:  map[*sessionLease]struct{}{},
	}
}

// Limits reports the configured delivery guarantees.
func (c *Client) Limits() bus.Limits {
	return bus.Limits{
		LockDuration:    c.opts.LockDuration,
		MaxDeliveries:   c.opts.MaxDeliveries,
		DuplicateWindow: c.opts.DuplicateWindow,
		// Without sessions, Service Bus makes no ordering promise to
		// competing receivers.
		KeyOrder: c.opts.Sessions,
	}
}

// EnsureSubscription makes sure sub exists (see the package doc).
func (c *Client) EnsureSubscription(ctx context.Context, sub string) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := bus.ValidateSubscription(sub); err != nil {
		return err
	}
	existing, err := c.admin.GetSubscription(ctx, c.opts.Topic, sub, nil)
	switch {
	case err != nil && errors.Is(sentinel(err), ErrUnauthorized) && !c.opts.Provision:
		c.log.DebugContext(ctx, "servicebus: may not read subscription metadata; trusting provisioning",
			"topic", c.opts.Topic, "subscription", sub)
		return nil
	case err != nil:
		return mapErr("get subscription "+sub, err)
	case existing != nil:
		if got := existing.RequiresSession != nil && *existing.RequiresSession; got != c.opts.Sessions {
			return fmt.Errorf("servicebus: subscription %s has RequiresSession=%t but the client is configured with Sessions=%t",
				sub, got, c.opts.Sessions)
		}
		//lint:ignore S1002 compared with the named setting, not a literal, so the rule has one source
		if got := existing.DeadLetteringOnMessageExpiration; got != nil && *got != DeadLetterOnExpiration {
			// Not fatal either: the sweep drains dead letters. But expired
			// dispatches would pile up there between sweeps.
			c.log.WarnContext(ctx, "servicebus: subscription dead-letters expired messages; the fleet lets expired dispatches expire (set dead_lettering_on_message_expiration = false)",
				"subscription", sub)
		}
		if got := existing.MaxDeliveryCount; got != nil && int(*got) != c.opts.MaxDeliveries {
			// Not fatal: the entity wins. Limits() would misreport it.
			c.log.WarnContext(ctx, "servicebus: subscription max delivery count differs from Options.MaxDeliveries",
				"subscription", sub, "entity", *got, "options", c.opts.MaxDeliveries)
		}
		return nil
	case !c.opts.Provision:
		return fmt.Errorf("servicebus: subscription %s/%s (provision it in Terraform): %w", c.opts.Topic, sub, bus.ErrNotFound)
	}
	_, err = c.admin.CreateSubscription(ctx, c.opts.Topic, sub, &admin.CreateSubscriptionOptions{
		Properties: c.subscriptionProperties(sub),
	})
	if err != nil {
		var respErr *azcore.ResponseError
		if errors.As(err, &respErr) && respErr.StatusCode == 409 {
			return nil // created concurrently by another process
		}
		return mapErr("create subscription "+sub, err)
	}
	return nil
}

// subscriptionProperties is what Provision creates; Terraform creates the
// same.
func (c *Client) subscriptionProperties(sub string) *admin.SubscriptionProperties {
	return &admin.SubscriptionProperties{
		LockDuration:                     to.Ptr(isoDuration(c.opts.LockDuration)),
		MaxDeliveryCount:                 to.Ptr(int32(c.opts.MaxDeliveries)),
		RequiresSession:                  to.Ptr(c.opts.Sessions),
		DeadLetteringOnMessageExpiration: to.Ptr(DeadLetterOnExpiration),
		EnableDeadLetteringOnFilterEvaluationExceptions: to.Ptr(DeadLetterOnFilterError),
		// The only rule: created with the subscription, so there is never
		// a moment with the $Default true filter.
		DefaultRule: &admin.RuleProperties{
			Name: RuleName,
			Filter: &admin.CorrelationFilter{
				ApplicationProperties: map[string]any{bus.PropTargetFactoryID: sub},
			},
		},
	}
}

// DeleteSubscription removes sub and its messages (needs Data Owner).
func (c *Client) DeleteSubscription(ctx context.Context, sub string) error {
	if err := c.check(); err != nil {
		return err
	}
	c.dropReceiver(ctx, receiverKey{sub, false})
	c.dropReceiver(ctx, receiverKey{sub, true})
	if _, err := c.admin.DeleteSubscription(ctx, c.opts.Topic, sub, nil); err != nil {
		return mapErr("delete subscription "+sub, err)
	}
	return nil
}

// Send publishes m on the topic; the subscription whose rule matches
// targetFactoryId receives it. A duplicate MessageID inside the topic's
// window is accepted and dropped by Service Bus.
func (c *Client) Send(ctx context.Context, m bus.Message) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return err
	}
	s, err := c.getSender()
	if err != nil {
		return err
	}
	if err := s.SendMessage(ctx, c.toSDK(m), nil); err != nil {
		return mapErr("send "+m.ID, err)
	}
	return nil
}

// toSDK is the Service Bus form of m.
func (c *Client) toSDK(m bus.Message) *azservicebus.Message {
	props := make(map[string]any, len(m.Properties)+2)
	for k, v := range m.Properties {
		props[k] = v
	}
	// The subscription rule routes on this property.
	props[bus.PropTargetFactoryID] = m.Subscription
	if m.OrderingKey != "" {
		props[propOrderingKey] = m.OrderingKey
	}
	out := &azservicebus.Message{
		MessageID:             to.Ptr(m.ID),
		Body:                  m.Body,
		ApplicationProperties: props,
	}
	if k := m.Kind(); k != "" {
		// Shown as "Label/Subject" by Service Bus Explorer.
		out.Subject = to.Ptr(string(k))
	}
	if k := m.Kind(); k == bus.KindDispatch || k == bus.KindGC {
		out.ContentType = to.Ptr("application/json")
	}
	if m.TTL > 0 {
		out.TimeToLive = to.Ptr(m.TTL)
	}
	if c.opts.Sessions {
		session := m.OrderingKey
		if session == "" {
			session = m.ID
		}
		out.SessionID = to.Ptr(session)
	}
	return out
}

func (c *Client) getSender() (sdkSender, error) {
	c.senderMu.Lock()
	defer c.senderMu.Unlock()
	if c.sender == nil {
		s, err := c.sdk.NewSender(c.opts.Topic)
		if err != nil {
			return nil, mapErr("sender for "+c.opts.Topic, err)
		}
		c.sender = s
	}
	return c.sender, nil
}

// Receive returns up to max deliveries of sub, waiting up to wait for the
// first. An empty result with a nil error means the wait ended.
func (c *Client) Receive(ctx context.Context, sub string, maxMessages int, wait time.Duration) ([]bus.Delivery, error) {
	if err := c.checkReceive(ctx, sub, maxMessages); err != nil {
		return nil, err
	}
	if c.opts.Sessions {
		return c.receiveSession(ctx, sub, maxMessages, wait)
	}
	return c.receive(ctx, receiverKey{sub, false}, maxMessages, wait)
}

// ReceiveDeadLetters receives from sub's dead-letter sub-queue (never
// session-enabled). Complete removes a dead letter.
func (c *Client) ReceiveDeadLetters(ctx context.Context, sub string, maxMessages int, wait time.Duration) ([]bus.Delivery, error) {
	if err := c.checkReceive(ctx, sub, maxMessages); err != nil {
		return nil, err
	}
	return c.receive(ctx, receiverKey{sub, true}, maxMessages, wait)
}

func (c *Client) checkReceive(ctx context.Context, sub string, maxMessages int) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if maxMessages <= 0 {
		return fmt.Errorf("%w: receive max must be positive, got %d", bus.ErrInvalid, maxMessages)
	}
	return bus.ValidateSubscription(sub)
}

func (c *Client) receive(ctx context.Context, key receiverKey, maxMessages int, wait time.Duration) ([]bus.Delivery, error) {
	rc, err := c.getReceiver(key)
	if err != nil {
		return nil, err
	}
	select {
	case rc.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-rc.sem }()

	wctx, cancel := context.WithTimeout(ctx, max(wait, minWait))
	msgs, err := rc.r.ReceiveMessages(wctx, maxMessages, receiveOptions)
	waitEnded := wctx.Err() != nil
	cancel()
	switch {
	case len(msgs) > 0:
		// The SDK returns messages and swallows a concurrent error; the
		// next call reports it.
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && waitEnded:
		return nil, nil // the wait ended
	case err != nil:
		mapped := mapErr("receive from "+key.sub, err)
		if errors.Is(mapped, bus.ErrNotFound) || errors.Is(mapped, bus.ErrClosed) {
			// The link is dead; the next call starts a fresh one (after,
			// say, Terraform created the subscription).
			c.dropReceiver(ctx, key)
		}
		return nil, mapped
	}
	out := make([]bus.Delivery, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, c.toDelivery(m, key.sub, &handle{client: c, recv: rc.r, msg: m, dlq: key.dlq}))
	}
	return out, nil
}

// receiveSession accepts the next session with messages and returns a
// batch of them; see sessionLease for when the session is released.
func (c *Client) receiveSession(ctx context.Context, sub string, maxMessages int, wait time.Duration) ([]bus.Delivery, error) {
	deadline := time.Now().Add(max(wait, minWait))
	for {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		out, err := c.receiveOneSession(wctx, sub, maxMessages)
		waitEnded := wctx.Err() != nil
		cancel()
		switch {
		case len(out) > 0:
			return out, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil && (waitEnded || isTimeout(err)):
			return nil, nil // no session became available within the wait
		case err != nil:
			return nil, mapErr("receive from "+sub, err)
		case !time.Now().Before(deadline):
			return nil, nil
		}
		// An accepted session had nothing left (its messages went to
		// another receiver): try the next one.
	}
}

func (c *Client) receiveOneSession(ctx context.Context, sub string, maxMessages int) ([]bus.Delivery, error) {
	sr, err := c.sdk.AcceptNextSessionForSubscription(ctx, c.opts.Topic, sub)
	if err != nil {
		return nil, err
	}
	lease := &sessionLease{client: c, recv: sr}
	c.mu.Lock()
	c.sessions[lease] = struct{}{}
	c.mu.Unlock()

	msgs, err := sr.ReceiveMessages(ctx, maxMessages, receiveOptions)
	if len(msgs) == 0 {
		lease.close(ctx)
		return nil, err
	}
	lease.outstanding.Store(int64(len(msgs)))
	out := make([]bus.Delivery, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, c.toDelivery(m, sub, &handle{client: c, recv: sr, msg: m, session: lease}))
	}
	return out, nil
}

func (c *Client) toDelivery(m *azservicebus.ReceivedMessage, sub string, h *handle) bus.Delivery {
	msg := bus.Message{ID: m.MessageID, Subscription: sub, Body: m.Body}
	for k, v := range m.ApplicationProperties {
		s, ok := v.(string)
		if !ok {
			// Another publisher's typed property; keep it readable.
			s = fmt.Sprint(v)
		}
		if k == propOrderingKey {
			msg.OrderingKey = s
			continue
		}
		if msg.Properties == nil {
			msg.Properties = map[string]string{}
		}
		msg.Properties[k] = s
	}
	if m.TimeToLive != nil {
		msg.TTL = *m.TimeToLive
	}
	var enqueued time.Time
	if m.EnqueuedTime != nil {
		enqueued = *m.EnqueuedTime
	}
	d := bus.NewDelivery(msg, int(m.DeliveryCount), enqueued, h)
	if m.LockedUntil != nil {
		d.LockedUntil = *m.LockedUntil
	}
	if sr, ok := h.recv.(sdkSessionLockRenewer); ok && h.session != nil {
		// A session's messages are locked by the session.
		d.LockedUntil = sr.LockedUntil()
	}
	if m.DeadLetterReason != nil {
		d.DeadLetterReason = *m.DeadLetterReason
	}
	if m.DeadLetterErrorDescription != nil {
		d.DeadLetterDescription = *m.DeadLetterErrorDescription
	}
	return d
}

// Complete removes the delivery's message for good.
func (c *Client) Complete(ctx context.Context, d bus.Delivery) error {
	return c.settle(ctx, d, "complete", func(h *handle) error {
		return h.recv.CompleteMessage(ctx, h.msg, nil)
	})
}

// Abandon releases the lock; the message is delivered again with its
// delivery count one higher, or dead-lettered past MaxDeliveries.
func (c *Client) Abandon(ctx context.Context, d bus.Delivery) error {
	return c.settle(ctx, d, "abandon", func(h *handle) error {
		return h.recv.AbandonMessage(ctx, h.msg, nil)
	})
}

// DeadLetter moves the message to its subscription's dead-letter sub-queue.
func (c *Client) DeadLetter(ctx context.Context, d bus.Delivery, reason string) error {
	if h, ok := d.Handle().(*handle); ok && h.dlq {
		return fmt.Errorf("%w: message %s is already a dead letter", bus.ErrInvalid, d.ID)
	}
	return c.settle(ctx, d, "dead-letter", func(h *handle) error {
		return h.recv.DeadLetterMessage(ctx, h.msg, &azservicebus.DeadLetterOptions{Reason: to.Ptr(reason)})
	})
}

func (c *Client) settle(ctx context.Context, d bus.Delivery, op string, fn func(h *handle) error) error {
	if err := c.check(); err != nil {
		return err
	}
	h, ok := d.Handle().(*handle)
	if !ok || h.client != c {
		return fmt.Errorf("%w: delivery %s was not received by this client", bus.ErrInvalid, d.ID)
	}
	if !h.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("servicebus: %s %s: already settled: %w", op, d.ID, bus.ErrLockLost)
	}
	err := mapErr(op+" "+d.ID, fn(h))
	if err != nil && !errors.Is(err, bus.ErrLockLost) {
		// Not applied (a transient failure): the caller may retry.
		h.settled.Store(false)
		return err
	}
	if h.session != nil {
		h.session.settled(ctx)
	}
	return err
}

// RenewLock extends the delivery's lock by the subscription's lock
// duration: the message's own lock (RenewMessageLock), or with sessions
// its session's lock (RenewSessionLock), which covers every message of the
// session held here. A lapsed lock or a settled delivery is ErrLockLost.
func (c *Client) RenewLock(ctx context.Context, d bus.Delivery) (time.Time, error) {
	if err := c.check(); err != nil {
		return time.Time{}, err
	}
	h, ok := d.Handle().(*handle)
	if !ok || h.client != c {
		return time.Time{}, fmt.Errorf("%w: delivery %s was not received by this client", bus.ErrInvalid, d.ID)
	}
	if h.settled.Load() {
		return time.Time{}, fmt.Errorf("servicebus: renew lock of %s: already settled: %w", d.ID, bus.ErrLockLost)
	}
	if h.session != nil {
		sr, ok := h.recv.(sdkSessionLockRenewer)
		if !ok {
			return time.Time{}, fmt.Errorf("servicebus: renew lock of %s: the session receiver cannot renew its lock", d.ID)
		}
		if err := sr.RenewSessionLock(ctx, nil); err != nil {
			return time.Time{}, mapErr("renew session lock of "+d.ID, err)
		}
		return sr.LockedUntil(), nil
	}
	mr, ok := h.recv.(sdkMessageLockRenewer)
	if !ok {
		return time.Time{}, fmt.Errorf("servicebus: renew lock of %s: the receiver cannot renew message locks", d.ID)
	}
	// RenewMessageLock writes the new LockedUntil into the message.
	if err := mr.RenewMessageLock(ctx, h.msg, nil); err != nil {
		return time.Time{}, mapErr("renew lock of "+d.ID, err)
	}
	if h.msg.LockedUntil == nil {
		return time.Time{}, fmt.Errorf("servicebus: renew lock of %s: the broker returned no lock expiry", d.ID)
	}
	return *h.msg.LockedUntil, nil
}

// Depth is the subscription's ActiveMessageCount: messages neither
// completed nor dead-lettered, locked ones included. Service Bus updates
// runtime properties within seconds, not instantly.
func (c *Client) Depth(ctx context.Context, sub string) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if err := bus.ValidateSubscription(sub); err != nil {
		return 0, err
	}
	props, err := c.admin.GetSubscriptionRuntimeProperties(ctx, c.opts.Topic, sub, nil)
	if err != nil {
		return 0, mapErr("depth of "+sub, err)
	}
	if props == nil {
		return 0, fmt.Errorf("servicebus: depth of %s/%s: %w", c.opts.Topic, sub, bus.ErrNotFound)
	}
	return int64(props.ActiveMessageCount), nil
}

// Close closes every link and the connection. Unsettled deliveries are
// redelivered after their lock expires. Safe to call more than once.
func (c *Client) Close(ctx context.Context) error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	c.mu.Lock()
	receivers := c.receivers
	sessions := c.sessions
	c.receivers, c.sessions = map[receiverKey]*receiver{}, map[*sessionLease]struct{}{}
	c.mu.Unlock()
	for _, rc := range receivers {
		errs = append(errs, rc.r.Close(ctx))
	}
	for l := range sessions {
		errs = append(errs, l.recv.Close(ctx))
	}
	c.senderMu.Lock()
	if c.sender != nil {
		errs = append(errs, c.sender.Close(ctx))
	}
	c.senderMu.Unlock()
	errs = append(errs, c.sdk.Close(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("servicebus: close: %w", err)
	}
	return nil
}

func (c *Client) check() error {
	if c.closed.Load() {
		return bus.ErrClosed
	}
	return nil
}

func (c *Client) getReceiver(key receiverKey) (*receiver, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc, ok := c.receivers[key]; ok {
		return rc, nil
	}
	r, err := c.sdk.NewReceiverForSubscription(c.opts.Topic, key.sub, key.dlq)
	if err != nil {
		return nil, mapErr("receiver for "+key.sub, err)
	}
	rc := &receiver{r: r, sem: make(chan struct{}, 1)}
	c.receivers[key] = rc
	return rc, nil
}

func (c *Client) dropReceiver(ctx context.Context, key receiverKey) {
	c.mu.Lock()
	rc, ok := c.receivers[key]
	delete(c.receivers, key)
	c.mu.Unlock()
	if ok {
		if err := rc.r.Close(ctx); err != nil {
			c.log.DebugContext(ctx, "servicebus: close receiver", "subscription", key.sub, "err", err)
		}
	}
}

// handle is what a Delivery carries back to settle it: the receiver that
// holds its lock (settlement must go through the same link).
type handle struct {
	client  *Client
	recv    sdkReceiver
	msg     *azservicebus.ReceivedMessage
	dlq     bool
	session *sessionLease
	settled atomic.Bool
}

// sessionLease holds an accepted session until every delivery received
// from it is settled, then closes the session receiver, which releases the
// session to the next receiver. A batch never settled is released by
// Service Bus when the session lock expires.
type sessionLease struct {
	client      *Client
	recv        sdkReceiver
	outstanding atomic.Int64
}

func (l *sessionLease) settled(ctx context.Context) {
	if l.outstanding.Add(-1) == 0 {
		l.close(ctx)
	}
}

func (l *sessionLease) close(ctx context.Context) {
	l.client.mu.Lock()
	delete(l.client.sessions, l)
	l.client.mu.Unlock()
	// Settlement succeeded whatever the caller's context does next; the
	// release should not fail because of it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := l.recv.Close(ctx); err != nil {
		l.client.log.DebugContext(ctx, "servicebus: release session", "err", err)
	}
}

// isoDuration formats d as the xs:duration the management API expects.
func isoDuration(d time.Duration) string {
	return "PT" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
}
