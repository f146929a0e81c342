// Package nats is the bus backend on NATS JetStream: the one-machine shape's
// broker (embedded in the local stack by package natsserver) and the CI broker
// of the bus conformance suite. Open works against any NATS server by URL.
//
// # Topology
//
// One work-queue stream (FLEET_DISPATCH) holds subjects
// <prefix>.dispatch.<subscription>; each factory or pool has one durable pull
// consumer filtered on its subject, with explicit acks, AckWait as the lock
// duration and no server-side MaxDeliver. Work-queue retention removes a
// message once it is acked or terminated, and forbids two consumers on one
// subject, which is exactly "one subscription per factory". Competing
// receivers of one pool share its durable consumer. Duplicate detection is
// the stream's Duplicates window keyed on Nats-Msg-Id = Message.ID.
//
// Dead letters go to a second work-queue stream (FLEET_DLQ) on
// <prefix>.dlq.<subscription>, with one durable consumer per subscription.
//
// # Dead-lettering after max deliveries
//
// JetStream can stop redelivering at MaxDeliver and announce it with a
// $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES advisory, but advisories are
// plain core-NATS messages: if no watcher is connected at that instant the
// advisory is gone and the message sits in the stream forever, neither
// delivered nor dead-lettered. So the consumer is created with unlimited
// deliveries and the client enforces the limit on receive: a message whose
// delivery count exceeds MaxDeliver is copied to the dead-letter stream and
// then terminated, and never handed to the caller. Every step is durable and
// idempotent: the copy's Nats-Msg-Id is derived from the original's stream
// sequence, so a receiver that dies between copy and terminate leaves a
// message that is redelivered and copied again as a duplicate (collapsed).
// The cost: the move happens at the next receive of that subscription
// rather than the instant the last lock expires, and Depth counts such a
// message until then.
//
// # Depth
//
// Depth is the number of messages the dispatch stream holds on the
// subscription's subject. On a work-queue stream a message stays stored
// until it is acked, terminated or expired, so that is every message not yet
// delivered plus every one delivered and not yet settled (locked, or
// waiting for redelivery after an abandon): Service Bus's
// ActiveMessageCount, locked ones included, so a pool's scaler does not
// shrink under in-flight work. It is read from the stream's per-subject
// count, which the server updates before it acknowledges a publish, and not
// from the consumer's NumPending, which the server updates asynchronously
// after the acknowledgement (a signal goroutine per stream): read right
// after Send, NumPending can still miss the message.
//
// # Settlement
//
// Complete, Abandon and DeadLetter wait for the server's confirmation (a
// request on the ack subject, like DoubleAck), so a complete-on-claim that
// returns nil has really removed the message. JetStream applies an ack by
// stream sequence even after the AckWait expired, so a late settlement is
// not refused as it is on Service Bus; ErrLockLost is returned only for a
// delivery this client already settled.
package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gigafactory/fleet/shared/bus"
)

// Defaults, chosen to match Service Bus defaults so both shapes behave alike.
const (
	DefaultStream           = "FLEET_DISPATCH"
	DefaultDeadLetterStream = "FLEET_DLQ"
	DefaultSubjectPrefix    = "fleet"
	DefaultAckWait          = time.Minute
	DefaultMaxDeliver       = 10
	DefaultDuplicateWindow  = 10 * time.Minute
	DefaultMaxAckPending    = 1000
	DefaultRequestTimeout   = 10 * time.Second
)

// Headers the client writes. Properties travel as Fleet-Prop-<name> so they
// can never collide with NATS's own headers.
const (
	hdrMessageID     = "Fleet-Message-Id"
	hdrSubscription  = "Fleet-Subscription"
	hdrOrderingKey   = "Fleet-Ordering-Key"
	hdrPropPrefix    = "Fleet-Prop-"
	hdrDLReason      = "Fleet-Dead-Letter-Reason"
	hdrDLDescription = "Fleet-Dead-Letter-Description"
	hdrDLDeliveries  = "Fleet-Dead-Letter-Deliveries"
	hdrEnqueuedAt    = "Fleet-Enqueued-At"
)

// Options configure a Client. Every process sharing a stream must use the
// same Stream, DeadLetterStream and SubjectPrefix; AckWait and MaxDeliver
// are applied to consumers when EnsureSubscription runs (last writer wins).
type Options struct {
	// Stream is the dispatch stream; default FLEET_DISPATCH.
	Stream string
	// DeadLetterStream is the dead-letter stream; default FLEET_DLQ.
	DeadLetterStream string
	// SubjectPrefix starts every subject; default "fleet".
	SubjectPrefix string
	// AckWait is the lock duration: how long a delivery may stay unsettled
	// before it is delivered again. Default 1m.
	AckWait time.Duration
	// MaxDeliver is how many deliveries a message gets before it is
	// dead-lettered. Default 10.
	MaxDeliver int
	// DuplicateWindow is how long message ids are remembered. Default 10m.
	DuplicateWindow time.Duration
	// MaxAckPending bounds unsettled deliveries per subscription. Default 1000.
	MaxAckPending int
	// Replicas of both streams; default 1 (set 3 on a clustered server).
	Replicas int
	// RequestTimeout bounds each JetStream API call and settlement when ctx
	// has no earlier deadline. Default 10s.
	RequestTimeout time.Duration
	// Name is the connection name servers show in their monitoring.
	Name string
	// ConnOptions are passed to nats.Connect: credentials, TLS, reconnects.
	// A factory adds FactoryConnOptions.
	ConnOptions []natsgo.Option
	// Bind uses the streams as they are: Open neither creates, updates nor
	// reads them, and subscriptions are created on them by name. A factory
	// binds: its credentials allow nothing on the streams themselves
	// (FactoryPermissions), so the coordinator must have created them.
	Bind bool
	// Logger; nil discards.
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.Stream, DefaultStream)
	def(&o.DeadLetterStream, DefaultDeadLetterStream)
	def(&o.SubjectPrefix, DefaultSubjectPrefix)
	def(&o.Name, "fleet-bus")
	if o.AckWait == 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.MaxAckPending == 0 {
		o.MaxAckPending = DefaultMaxAckPending
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Stream == o.DeadLetterStream:
		return fmt.Errorf("nats: stream and dead-letter stream are both %q", o.Stream)
	case o.AckWait < 0 || o.DuplicateWindow < 0 || o.RequestTimeout < 0:
		return fmt.Errorf("nats: negative duration (AckWait %s, DuplicateWindow %s, RequestTimeout %s)",
			o.AckWait, o.DuplicateWindow, o.RequestTimeout)
	case o.MaxDeliver < 0 || o.MaxAckPending < 0 || o.Replicas < 0:
		return fmt.Errorf("nats: negative count (MaxDeliver %d, MaxAckPending %d, Replicas %d)",
			o.MaxDeliver, o.MaxAckPending, o.Replicas)
	case strings.ContainsAny(o.SubjectPrefix, " \t\r\n*>") || strings.HasPrefix(o.SubjectPrefix, ".") || strings.HasSuffix(o.SubjectPrefix, "."):
		return fmt.Errorf("nats: subject prefix %q is not a subject", o.SubjectPrefix)
	}
	return nil
}

// Client is a bus backend on one NATS connection. It is safe for
// concurrent use.
type Client struct {
	nc       *natsgo.Conn
	js       jetstream.JetStream
	opts     Options
	log      *slog.Logger
	dispatch jetstream.Stream
	dlq      jetstream.Stream

	closed atomic.Bool

	mu        sync.Mutex
	consumers map[consumerKey]jetstream.Consumer
}

var (
	_ bus.Sender          = (*Client)(nil)
	_ bus.DeadLetterProbe = (*Client)(nil)
)

type consumerKey struct {
	dlq bool
	sub string
}

// Open connects to the NATS server at url and creates (or updates) the
// dispatch and dead-letter streams. It does not create subscriptions: call
// EnsureSubscription for the factory or pool that will receive.
func Open(ctx context.Context, url string, opts Options) (*Client, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	connOpts := append([]natsgo.Option{
		natsgo.Name(opts.Name),
		// A factory outlives broker restarts: keep reconnecting.
		natsgo.MaxReconnects(-1),
	}, opts.ConnOptions...)
	nc, err := natsgo.Connect(url, connOpts...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, opts: opts, log: opts.Logger, consumers: map[consumerKey]jetstream.Consumer{}}
	if opts.Bind {
		return c, nil
	}
	if err := c.ensureStreams(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) ensureStreams(ctx context.Context) error {
	common := func(name, desc, kind string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    []string{c.opts.SubjectPrefix + "." + kind + ".*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.opts.Replicas,
			Duplicates:  c.opts.DuplicateWindow,
		}
	}
	dcfg := common(c.opts.Stream, "Gigafactory fleet dispatch: one subject per factory or pool", "dispatch")
	dcfg.AllowMsgTTL = true // Message.TTL
	lcfg := common(c.opts.DeadLetterStream, "Gigafactory fleet dead letters: one subject per factory or pool", "dlq")

	var err error
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	if c.dispatch, err = c.ensureStream(rctx, dcfg); err != nil {
		return fmt.Errorf("nats: stream %s: %w", dcfg.Name, err)
	}
	if c.dlq, err = c.ensureStream(rctx, lcfg); err != nil {
		return fmt.Errorf("nats: stream %s: %w", lcfg.Name, err)
	}
	return nil
}

// ensureStream creates the stream, or updates it only when a setting this
// client manages differs. Every client opens with the same config, and an
// update of an unchanged stream is not free on the server: it rewrites the
// stream's store config while other clients create consumers on it (a data
// race inside nats-server 2.15 under -race).
func (c *Client) ensureStream(ctx context.Context, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := c.js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = c.js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = c.js.Stream(ctx, want.Name) // another client created it first
		}
	}
	if err != nil {
		return nil, err
	}
	have := s.CachedInfo().Config
	if slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.Storage == want.Storage &&
		have.Duplicates == want.Duplicates && have.AllowMsgTTL == want.AllowMsgTTL && max(have.Replicas, 1) == max(want.Replicas, 1) &&
		have.Description == want.Description {
		return s, nil
	}
	return c.js.UpdateStream(ctx, want)
}

// Limits reports the configured delivery guarantees.
func (c *Client) Limits() bus.Limits {
	return bus.Limits{
		LockDuration:    c.opts.AckWait,
		MaxDeliveries:   c.opts.MaxDeliver,
		DuplicateWindow: c.opts.DuplicateWindow,
		// One consumer per subscription on one stream: first deliveries
		// follow stream order, which covers every ordering key.
		KeyOrder: true,
	}
}

// EnsureSubscription creates or updates sub's durable consumers on the
// dispatch and dead-letter streams. Idempotent; factories call it at start.
func (c *Client) EnsureSubscription(ctx context.Context, sub string) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := bus.ValidateSubscription(sub); err != nil {
		return err
	}
	tok := token(sub)
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	for _, dlq := range []bool{false, true} {
		stream, subject, desc := c.opts.Stream, c.subject("dispatch", sub), "dispatch"
		if dlq {
			stream, subject, desc = c.opts.DeadLetterStream, c.subject("dlq", sub), "dead letters"
		}
		// By stream name, not through a stream handle: a bound client has
		// none, and the filtered create subject is the one a factory's
		// permissions name.
		cons, err := c.js.CreateOrUpdateConsumer(rctx, stream, jetstream.ConsumerConfig{
			Durable:       tok,
			Description:   "Gigafactory fleet " + desc + " of " + sub,
			FilterSubject: subject,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       c.opts.AckWait,
			// Unlimited on the server; the client dead-letters (see the
			// package doc for why).
			MaxDeliver:    -1,
			MaxAckPending: c.opts.MaxAckPending,
			Replicas:      c.opts.Replicas,
			Metadata:      map[string]string{"fleet.subscription": sub},
		})
		if err != nil {
			return c.mapErr(fmt.Sprintf("ensure subscription %s (%s)", sub, desc), err)
		}
		c.mu.Lock()
		c.consumers[consumerKey{dlq, sub}] = cons
		c.mu.Unlock()
	}
	return nil
}

// DeleteSubscription removes sub's consumers (not its messages, which stay
// in the work-queue streams until a consumer for sub exists again).
func (c *Client) DeleteSubscription(ctx context.Context, sub string) error {
	if err := c.check(); err != nil {
		return err
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	var errs []error
	for _, dlq := range []bool{false, true} {
		stream := c.opts.Stream
		if dlq {
			stream = c.opts.DeadLetterStream
		}
		c.mu.Lock()
		delete(c.consumers, consumerKey{dlq, sub})
		c.mu.Unlock()
		if err := c.js.DeleteConsumer(rctx, stream, token(sub)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			errs = append(errs, c.mapErr("delete subscription "+sub, err))
		}
	}
	return errors.Join(errs...)
}

// Send publishes m to its subscription's subject and waits for the stream's
// acknowledgement. A duplicate inside the window is acknowledged and dropped
// by the server, so Send is idempotent per Message.ID.
func (c *Client) Send(ctx context.Context, m bus.Message) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return err
	}
	msg := natsgo.NewMsg(c.subject("dispatch", m.Subscription))
	msg.Data = m.Body
	msg.Header.Set(hdrMessageID, m.ID)
	msg.Header.Set(hdrSubscription, m.Subscription)
	if m.OrderingKey != "" {
		msg.Header.Set(hdrOrderingKey, m.OrderingKey)
	}
	for k, v := range m.Properties {
		msg.Header.Set(hdrPropPrefix+k, v)
	}
	popts := []jetstream.PublishOpt{jetstream.WithMsgID(m.ID), jetstream.WithExpectStream(c.opts.Stream)}
	if m.TTL > 0 {
		// JetStream TTLs are whole seconds, at least one.
		popts = append(popts, jetstream.WithMsgTTL(max(time.Second, m.TTL.Round(time.Second))))
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	if _, err := c.js.PublishMsg(rctx, msg, popts...); err != nil {
		return c.mapErr("send "+m.ID, err)
	}
	return nil
}

// Receive returns up to max deliveries of sub. It returns at once with what
// is available; when nothing is, it waits up to wait for the first message
// and returns as soon as one arrives. An empty result with a nil error
// means the wait ended. Messages past MaxDeliver are dead-lettered on the
// way and never returned.
func (c *Client) Receive(ctx context.Context, sub string, max int, wait time.Duration) ([]bus.Delivery, error) {
	return c.receive(ctx, false, sub, max, wait)
}

// DeadLettered returns the subscriptions of subs that hold a dead letter
// (bus.DeadLetterProbe), from one request for the dead-letter stream's
// message count per subject: a dead letter stays in the work-queue stream
// until Complete removes it.
func (c *Client) DeadLettered(ctx context.Context, subs []string) ([]string, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	stream := c.dlq
	if stream == nil { // a bound client: look the stream up
		var err error
		if stream, err = c.js.Stream(rctx, c.opts.DeadLetterStream); err != nil {
			return nil, c.mapErr("dead letters", err)
		}
	}
	info, err := stream.Info(rctx, jetstream.WithSubjectFilter(c.opts.SubjectPrefix+".dlq.*"))
	if err != nil {
		return nil, c.mapErr("dead letters", err)
	}
	var held []string
	for _, sub := range subs {
		if info.State.Subjects[c.subject("dlq", sub)] > 0 {
			held = append(held, sub)
		}
	}
	return held, nil
}

// ReceiveDeadLetters is Receive on sub's dead-letter queue. Complete
// removes a dead letter; Abandon puts it back.
func (c *Client) ReceiveDeadLetters(ctx context.Context, sub string, max int, wait time.Duration) ([]bus.Delivery, error) {
	return c.receive(ctx, true, sub, max, wait)
}

func (c *Client) receive(ctx context.Context, dlq bool, sub string, max int, wait time.Duration) ([]bus.Delivery, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, fmt.Errorf("%w: receive max must be positive, got %d", bus.ErrInvalid, max)
	}
	cons, err := c.consumer(ctx, dlq, sub)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	var out []bus.Delivery
	for {
		// Whatever is there now, without waiting.
		batch, err := cons.FetchNoWait(max - len(out))
		if err != nil {
			return out, c.consumerErr(dlq, sub, err)
		}
		for m := range batch.Messages() {
			if d, ok := c.accept(ctx, m, dlq, sub); ok {
				out = append(out, d)
			}
		}
		if err := batch.Error(); err != nil && len(out) == 0 {
			return nil, c.consumerErr(dlq, sub, err)
		}
		if len(out) > 0 {
			return out, nil
		}

		// Nothing yet: block for the first message, up to the deadline.
		// The pull request's server-side expiry is set a little before the
		// deadline, so the server, not a client timer, ends an idle wait and
		// no message is delivered into a request nobody reads any more.
		remaining := time.Until(deadline)
		if remaining < 10*time.Millisecond {
			return nil, nil
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		m, err := cons.Next(jetstream.FetchContext(wctx))
		cancel()
		switch {
		case err == nil:
			// Handed over at once: topping up with another fetch would
			// cost every delivery that ended a wait a round trip to the
			// server (issue 25's receive stage), and whatever came with
			// it is fetched without waiting by the caller's next receive.
			if d, ok := c.accept(ctx, m, dlq, sub); ok {
				return append(out, d), nil
			}
			// Dead-lettered on the way: keep waiting.
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, natsgo.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoMessages):
			return nil, nil
		default:
			return nil, c.consumerErr(dlq, sub, err)
		}
	}
}

// accept turns a fetched message into a delivery, or dead-letters it when it
// has used up its deliveries.
func (c *Client) accept(ctx context.Context, m jetstream.Msg, dlq bool, sub string) (bus.Delivery, bool) {
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to ack it with. Never happens on
		// a pull consumer; logged so it is seen if it does.
		c.log.ErrorContext(ctx, "nats: received a message without JetStream metadata", "subscription", sub, "err", err)
		return bus.Delivery{}, false
	}
	h := &handle{client: c, msg: m, meta: meta, sub: sub, dlq: dlq}
	d := bus.NewDelivery(messageFromHeaders(m, sub), int(meta.NumDelivered), meta.Timestamp, h)
	// The server started AckWait when it sent the message, a moment ago.
	d.LockedUntil = time.Now().Add(c.opts.AckWait)
	h.lockedUntil.Store(d.LockedUntil.UnixNano())
	if dlq {
		hdr := m.Headers()
		d.DeadLetterReason = hdr.Get(hdrDLReason)
		d.DeadLetterDescription = hdr.Get(hdrDLDescription)
		if t, err := time.Parse(time.RFC3339Nano, hdr.Get(hdrEnqueuedAt)); err == nil {
			d.EnqueuedAt = t
		}
		return d, true
	}
	if int(meta.NumDelivered) > c.opts.MaxDeliver {
		desc := fmt.Sprintf("Message could not be consumed after %d delivery attempts.", c.opts.MaxDeliver)
		if err := c.deadLetter(ctx, d, h, bus.ReasonMaxDeliveries, desc); err != nil {
			// It stays locked until AckWait and is moved on a later receive.
			c.log.WarnContext(ctx, "nats: dead-letter after max deliveries failed; retried on redelivery",
				"subscription", sub, "id", d.ID, "deliveries", meta.NumDelivered, "err", err)
		} else {
			c.log.InfoContext(ctx, "nats: dead-lettered after max deliveries",
				"subscription", sub, "id", d.ID, "deliveries", meta.NumDelivered-1)
		}
		return bus.Delivery{}, false
	}
	return d, true
}

func messageFromHeaders(m jetstream.Msg, sub string) bus.Message {
	hdr := m.Headers()
	out := bus.Message{
		ID:           hdr.Get(hdrMessageID),
		Subscription: sub,
		Body:         m.Data(),
		OrderingKey:  hdr.Get(hdrOrderingKey),
	}
	if out.ID == "" {
		// Published by something other than this client; keep its id so
		// the receiver can still name it when it dead-letters it.
		out.ID = hdr.Get(jetstream.MsgIDHeader)
	}
	for k, vs := range hdr {
		if name, ok := strings.CutPrefix(k, hdrPropPrefix); ok && len(vs) > 0 {
			if out.Properties == nil {
				out.Properties = map[string]string{}
			}
			out.Properties[name] = vs[0]
		}
	}
	if ttl, err := time.ParseDuration(hdr.Get(jetstream.MsgTTLHeader)); err == nil {
		out.TTL = ttl
	}
	return out
}

// Complete removes the delivery's message for good.
func (c *Client) Complete(ctx context.Context, d bus.Delivery) error {
	return c.settle(ctx, d, "complete", []byte("+ACK"))
}

// Abandon releases the delivery's lock: the message is delivered again at
// once, its delivery count one higher.
func (c *Client) Abandon(ctx context.Context, d bus.Delivery) error {
	return c.settle(ctx, d, "abandon", []byte("-NAK"))
}

// RenewLock restarts the delivery's AckWait ("+WPI", what
// jetstream.Msg.InProgress sends), confirmed by the server. JetStream
// answers a progress ack whether or not the delivery is still pending, and
// one for a message since redelivered would extend the new receiver's
// lock; so a lock that has lapsed by this client's clock is reported lost
// without asking the server.
func (c *Client) RenewLock(ctx context.Context, d bus.Delivery) (time.Time, error) {
	if err := c.check(); err != nil {
		return time.Time{}, err
	}
	h, err := c.handleOf(d)
	if err != nil {
		return time.Time{}, err
	}
	if h.settled.Load() {
		return time.Time{}, fmt.Errorf("nats: renew lock of %s: already settled: %w", d.ID, bus.ErrLockLost)
	}
	start := time.Now()
	if start.After(time.Unix(0, h.lockedUntil.Load())) {
		return time.Time{}, fmt.Errorf("nats: renew lock of %s: the lock lapsed at %s: %w",
			d.ID, time.Unix(0, h.lockedUntil.Load()).UTC().Format(time.RFC3339Nano), bus.ErrLockLost)
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	if _, err := c.nc.RequestWithContext(rctx, h.msg.Reply(), []byte("+WPI")); err != nil {
		if errors.Is(err, natsgo.ErrNoResponders) {
			return time.Time{}, fmt.Errorf("nats: renew lock of %s: %w: %w", d.ID, bus.ErrNotFound, err)
		}
		return time.Time{}, c.mapErr("renew lock of "+d.ID, err)
	}
	// The server reset the timer somewhere between start and now.
	until := start.Add(c.opts.AckWait)
	h.lockedUntil.Store(until.UnixNano())
	return until, nil
}

// DeadLetter moves the delivery's message to its subscription's dead-letter
// queue with reason, and removes it from the subscription.
func (c *Client) DeadLetter(ctx context.Context, d bus.Delivery, reason string) error {
	if err := c.check(); err != nil {
		return err
	}
	h, err := c.handleOf(d)
	if err != nil {
		return err
	}
	if h.dlq {
		return fmt.Errorf("%w: message %s is already a dead letter", bus.ErrInvalid, d.ID)
	}
	return c.deadLetter(ctx, d, h, reason, "")
}

// deadLetter copies the message to the dead-letter stream, then terminates
// the original. A crash between the two leaves the original to be
// redelivered and moved again; the copy's id makes the second copy a
// duplicate the stream drops.
func (c *Client) deadLetter(ctx context.Context, d bus.Delivery, h *handle, reason, desc string) error {
	if h.settled.Load() {
		return fmt.Errorf("nats: dead-letter %s: %w", d.ID, bus.ErrLockLost)
	}
	if err := c.copyToDeadLetters(ctx, h, reason, desc); err != nil {
		return c.mapErr("dead-letter "+d.ID, err)
	}
	return c.settle(ctx, d, "dead-letter", []byte("+TERM "+oneLine(reason)))
}

func (c *Client) copyToDeadLetters(ctx context.Context, h *handle, reason, desc string) error {
	msg := natsgo.NewMsg(c.subject("dlq", h.sub))
	msg.Data = h.msg.Data()
	for k, vs := range h.msg.Headers() {
		// Only our own headers: the original's Nats-Msg-Id and Nats-TTL
		// must not apply to the dead letter.
		if strings.HasPrefix(k, "Fleet-") {
			msg.Header[k] = append([]string(nil), vs...)
		}
	}
	msg.Header.Set(hdrDLReason, oneLine(reason))
	if desc != "" {
		msg.Header.Set(hdrDLDescription, oneLine(desc))
	}
	msg.Header.Set(hdrDLDeliveries, strconv.FormatUint(h.meta.NumDelivered, 10))
	msg.Header.Set(hdrEnqueuedAt, h.meta.Timestamp.UTC().Format(time.RFC3339Nano))

	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	// The id names this stored message, not the bus message: a move
	// repeated after a crash collapses, while a later message with the same
	// bus id (outside the dispatch window) is still its own dead letter.
	dlqID := "dlq:" + c.opts.Stream + ":" + strconv.FormatUint(h.meta.Sequence.Stream, 10)
	_, err := c.js.PublishMsg(rctx, msg, jetstream.WithMsgID(dlqID), jetstream.WithExpectStream(c.opts.DeadLetterStream))
	return err
}

// settle sends one acknowledgement and waits for the server to confirm it.
func (c *Client) settle(ctx context.Context, d bus.Delivery, op string, body []byte) error {
	if err := c.check(); err != nil {
		return err
	}
	h, err := c.handleOf(d)
	if err != nil {
		return err
	}
	if !h.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("nats: %s %s: already settled: %w", op, d.ID, bus.ErrLockLost)
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	if _, err := c.nc.RequestWithContext(rctx, h.msg.Reply(), body); err != nil {
		// Unknown whether it was applied; let the caller retry. A repeated
		// ack of an acked message is a no-op on the server.
		h.settled.Store(false)
		if errors.Is(err, natsgo.ErrNoResponders) {
			// Nobody answers the ack subject: the consumer is gone.
			return fmt.Errorf("nats: %s %s: %w: %w", op, d.ID, bus.ErrNotFound, err)
		}
		return c.mapErr(op+" "+d.ID, err)
	}
	return nil
}

// Depth is the number of sub's messages that are neither completed nor
// dead-lettered, locked ones included (Service Bus's ActiveMessageCount).
// It counts every message whose Send returned (see the package doc).
func (c *Client) Depth(ctx context.Context, sub string) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	cons, err := c.consumer(ctx, false, sub)
	if err != nil {
		return 0, err
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	// The consumer must still exist: an unknown subscription is ErrNotFound,
	// as on Service Bus, although its messages stay in the stream.
	if _, err := cons.Info(rctx); err != nil {
		return 0, c.consumerErr(false, sub, err)
	}
	subject := c.subject("dispatch", sub)
	stream := c.dispatch
	if stream == nil { // a bound client: look the stream up
		if stream, err = c.js.Stream(rctx, c.opts.Stream); err != nil {
			return 0, c.mapErr("depth of "+sub, err)
		}
	}
	info, err := stream.Info(rctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, c.mapErr("depth of "+sub, err)
	}
	return int64(info.State.Subjects[subject]), nil
}

// Close closes the connection. Unsettled deliveries are redelivered after
// their AckWait. Safe to call more than once.
func (c *Client) Close(ctx context.Context) error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Flush so that settlements and publishes already written reach the
	// server; their confirmations were awaited, so this only bounds the
	// goodbye.
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	err := c.nc.FlushWithContext(rctx)
	c.nc.Close()
	if err != nil && !errors.Is(err, natsgo.ErrConnectionClosed) {
		return fmt.Errorf("nats: close: %w", err)
	}
	return nil
}

// consumer returns sub's consumer handle, looking it up once.
func (c *Client) consumer(ctx context.Context, dlq bool, sub string) (jetstream.Consumer, error) {
	if err := bus.ValidateSubscription(sub); err != nil {
		return nil, err
	}
	key := consumerKey{dlq, sub}
	c.mu.Lock()
	cons, ok := c.consumers[key]
	c.mu.Unlock()
	if ok {
		return cons, nil
	}
	stream := c.opts.Stream
	if dlq {
		stream = c.opts.DeadLetterStream
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	cons, err := c.js.Consumer(rctx, stream, token(sub))
	if err != nil {
		return nil, c.mapErr("subscription "+sub, err)
	}
	c.mu.Lock()
	c.consumers[key] = cons
	c.mu.Unlock()
	return cons, nil
}

// consumerErr maps an error of a consumer operation and forgets a consumer
// that no longer exists, so a later EnsureSubscription takes effect.
func (c *Client) consumerErr(dlq bool, sub string, err error) error {
	mapped := c.mapErr("subscription "+sub, err)
	if errors.Is(mapped, bus.ErrNotFound) {
		c.mu.Lock()
		delete(c.consumers, consumerKey{dlq, sub})
		c.mu.Unlock()
	}
	return mapped
}

func (c *Client) mapErr(op string, err error) error {
	var sentinel error
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDoesNotExist),
		errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrStreamNotFound):
		sentinel = bus.ErrNotFound
	case errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, jetstream.ErrConnectionClosed):
		sentinel = bus.ErrClosed
	}
	if sentinel != nil {
		return fmt.Errorf("nats: %s: %w: %w", op, sentinel, err)
	}
	return fmt.Errorf("nats: %s: %w", op, err)
}

func (c *Client) check() error {
	if c.closed.Load() {
		return bus.ErrClosed
	}
	return nil
}

func (c *Client) handleOf(d bus.Delivery) (*handle, error) {
	h, ok := d.Handle().(*handle)
	if !ok || h.client != c {
		return nil, fmt.Errorf("%w: delivery %s was not received by this client", bus.ErrInvalid, d.ID)
	}
	return h, nil
}

// requestCtx bounds one server round trip by RequestTimeout.
func (c *Client) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

func (c *Client) subject(kind, sub string) string {
	return c.opts.SubjectPrefix + "." + kind + "." + token(sub)
}

// handle is what a Delivery carries back to settle it.
type handle struct {
	client  *Client
	msg     jetstream.Msg
	meta    *jetstream.MsgMetadata
	sub     string
	dlq     bool
	settled atomic.Bool
	// lockedUntil is when AckWait lapses (unix ns), by this client's clock.
	lockedUntil atomic.Int64
}

// token encodes a subscription as one subject token and consumer name:
// bytes outside [A-Za-z0-9_-] become %XX. Fleet ids contain '.', which
// would split a subject and is not allowed in consumer names. The encoding
// is injective ('%' itself is escaped), so two subscriptions never share a
// subject.
func token(sub string) string {
	var b strings.Builder
	for i := 0; i < len(sub); i++ {
		ch := sub[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-' {
			b.WriteByte(ch)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", ch)
	}
	return b.String()
}

// oneLine keeps a reason usable as a header value and an ack body.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
