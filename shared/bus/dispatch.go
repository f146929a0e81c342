package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/protocol"
)

// Sender is the one thing the Dispatcher needs of a backend.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// DefaultGCTTL bounds how long a GC request waits for a factory: a newer
// request supersedes it long before, and a pool that scales up a day later
// should not start with yesterday's cleanup list.
const DefaultGCTTL = time.Hour

// DeadLetterReceiver is what the Dispatcher needs to drain dead letters.
// Both backends implement it.
type DeadLetterReceiver interface {
	ReceiveDeadLetters(ctx context.Context, sub string, max int, wait time.Duration) ([]Delivery, error)
	Complete(ctx context.Context, d Delivery) error
	Abandon(ctx context.Context, d Delivery) error
}

// DeadLetterProbe is a DeadLetterReceiver that can say in one request
// which subscriptions hold a dead letter (the NATS client: the dead-letter
// stream's message count per subject). The drain then asks only those: a
// receive per factory on every redispatch tick, almost always for nothing,
// is otherwise what the sweep costs at a thousand factories.
type DeadLetterProbe interface {
	// DeadLettered returns the subscriptions of subs that hold a dead
	// letter, in the order of subs.
	DeadLettered(ctx context.Context, subs []string) ([]string, error)
}

// drainBatch is how many dead letters one receive asks for.
const drainBatch = 32

// maxDrainPerSub bounds the dead letters one drain takes from one
// subscription: the rest wait for the next sweep. Each costs a job's
// compare-and-swap, and a queue that refills as fast as it is drained (a
// factory publishing to its own, on a broker that lets it) would otherwise
// hold the sweep, and the fleet's redispatch after it, for as long as it
// kept publishing.
const maxDrainPerSub = 1000

// DispatcherOptions tune a Dispatcher; the zero value is usable.
type DispatcherOptions struct {
	// DispatchTTL is the TTL of dispatch messages; zero leaves the broker
	// default. Set it near coord's RedispatchAfter: a message older than that
	// has been (or is about to be) voided by a redispatch with a newer epoch,
	// and the fenced accept would refuse it anyway.
	DispatchTTL time.Duration
	// GCTTL is the TTL of GC requests; zero means DefaultGCTTL.
	GCTTL time.Duration
	// Clock stamps GC message ids; nil means the wall clock.
	Clock clock.Clock
	// DeadLetters is where DrainDeadLetters reads; nil means the Sender
	// when it is also a DeadLetterReceiver (both backends are).
	DeadLetters DeadLetterReceiver
}

// Dispatcher publishes coord's dispatch messages and GC requests as targeted
// bus messages. It implements coord.Publisher and coord.GCPublisher (checked
// where shared/app wires it, so this package speaks only the protocol).
type Dispatcher struct {
	sender Sender
	opts   DispatcherOptions
}

// NewDispatcher returns a Dispatcher sending through s.
func NewDispatcher(s Sender, opts DispatcherOptions) *Dispatcher {
	if opts.GCTTL == 0 {
		opts.GCTTL = DefaultGCTTL
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	if opts.DeadLetters == nil {
		opts.DeadLetters, _ = s.(DeadLetterReceiver)
	}
	return &Dispatcher{sender: s, opts: opts}
}

// Publish sends msg to its target's subscription with ID jobId:dispatchEpoch,
// so a repeated publish of one dispatch collapses in the broker while a
// re-dispatch (a new epoch) always goes out.
func (d *Dispatcher) Publish(ctx context.Context, msg protocol.DispatchMessage) error {
	m, err := DispatchToMessage(msg)
	if err != nil {
		return err
	}
	m.TTL = d.opts.DispatchTTL
	if err := d.sender.Send(ctx, m); err != nil {
		return fmt.Errorf("send dispatch %s to %s: %w", m.ID, m.Subscription, err)
	}
	return nil
}

// PublishGC sends req to its factory. The ID is gc:<factory>:<unix minute>:
// sweeps that fire twice within a minute (a timer retried by the host,
// two coordinators) send one request.
func (d *Dispatcher) PublishGC(ctx context.Context, req protocol.GCRequest) error {
	m, err := GCToMessage(req, d.opts.Clock.Now())
	if err != nil {
		return err
	}
	m.TTL = d.opts.GCTTL
	if err := d.sender.Send(ctx, m); err != nil {
		return fmt.Errorf("send gc request %s to %s: %w", m.ID, m.Subscription, err)
	}
	return nil
}

// PublishControl sends a cancel or preempt command to the factory holding
// the lease. Its ID names the lease (ControlMessage.MessageID), so a repeated
// publish collapses in the broker. It carries no TTL of its own beyond the
// dispatch one: a command outliving the lease it names is ignored by the
// factory, and the renewal answer carries the request besides.
func (d *Dispatcher) PublishControl(ctx context.Context, msg protocol.ControlMessage) error {
	m, err := ControlToMessage(msg)
	if err != nil {
		return err
	}
	m.TTL = d.opts.DispatchTTL
	if err := d.sender.Send(ctx, m); err != nil {
		return fmt.Errorf("send control %s to %s: %w", m.ID, m.Subscription, err)
	}
	return nil
}

// DrainDeadLetters hands every dead-lettered dispatch message of subs to
// handle (coord's DeadLettered, which re-routes the job if the message was
// its current dispatch) and completes it once handled. It returns how many
// it handled. A subscription that does not exist is skipped (a pool never
// provisioned has no dead letters). A dead letter that is not a dispatch
// message (a stale GC request, a malformed body) cannot be acted on and is
// completed, so it does not block the queue. When handle fails, the dead
// letter is abandoned for the next sweep and that subscription's drain
// stops, so one failing job cannot spin the sweep.
func (d *Dispatcher) DrainDeadLetters(ctx context.Context, subs []string,
	handle func(ctx context.Context, msg protocol.DispatchMessage) error) (int, error) {
	if d.opts.DeadLetters == nil {
		return 0, nil
	}
	if p, ok := d.opts.DeadLetters.(DeadLetterProbe); ok && len(subs) > 0 {
		// A failed probe drains every subscription, as without one: the
		// receives then say what is wrong with the broker, if anything.
		if held, err := p.DeadLettered(ctx, subs); err == nil {
			subs = held
		}
	}
	n := 0
	var errs []error
	for _, sub := range subs {
		k, err := d.drain(ctx, sub, handle)
		n += k
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return n, errors.Join(errs...)
}

func (d *Dispatcher) drain(ctx context.Context, sub string,
	handle func(ctx context.Context, msg protocol.DispatchMessage) error) (int, error) {
	dl := d.opts.DeadLetters
	n := 0
	for taken := 0; taken < maxDrainPerSub; {
		ds, err := dl.ReceiveDeadLetters(ctx, sub, min(drainBatch, maxDrainPerSub-taken), 0)
		taken += len(ds)
		switch {
		case errors.Is(err, ErrNotFound):
			return n, nil
		case err != nil:
			return n, fmt.Errorf("dead letters of %s: %w", sub, err)
		case len(ds) == 0:
			return n, nil
		}
		for i, dv := range ds {
			msg, err := DecodeDispatch(dv)
			if err == nil {
				err = handle(ctx, msg)
				if err != nil {
					// Put back this one and every one not yet looked at.
					var errs []error
					errs = append(errs, fmt.Errorf("dead letter %s of %s: %w", dv.ID, sub, err))
					for _, rest := range ds[i:] {
						if aerr := dl.Abandon(ctx, rest); aerr != nil {
							errs = append(errs, fmt.Errorf("abandon dead letter %s of %s: %w", rest.ID, sub, aerr))
						}
					}
					return n, errors.Join(errs...)
				}
				n++
			}
			if err := dl.Complete(ctx, dv); err != nil {
				return n, fmt.Errorf("complete dead letter %s of %s: %w", dv.ID, sub, err)
			}
		}
	}
	return n, nil
}

// DispatchToMessage is the bus form of a dispatch message: JSON body,
// ID = MessageID(), addressed to TargetFactoryID, ordered by repo.
func DispatchToMessage(msg protocol.DispatchMessage) (Message, error) {
	if msg.JobID == "" || msg.TargetFactoryID == "" {
		return Message{}, fmt.Errorf("%w: dispatch message needs a job id and a target factory (got %q, %q)",
			ErrInvalid, msg.JobID, msg.TargetFactoryID)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return Message{}, fmt.Errorf("encode dispatch %s: %w", msg.MessageID(), err)
	}
	m := Message{
		ID:           msg.MessageID(),
		Subscription: msg.TargetFactoryID,
		Body:         body,
		Properties: map[string]string{
			PropTargetFactoryID: msg.TargetFactoryID,
			PropProductID:       msg.ProductID,
			PropRepo:            msg.Repo,
			PropPriority:        string(msg.Priority),
			PropKind:            string(KindDispatch),
		},
		OrderingKey: msg.Repo,
	}
	return m, m.Validate()
}

// GCToMessage is the bus form of a GC request sent at now.
func GCToMessage(req protocol.GCRequest, now time.Time) (Message, error) {
	if req.FactoryID == "" {
		return Message{}, fmt.Errorf("%w: gc request has no factory", ErrInvalid)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Message{}, fmt.Errorf("encode gc request for %s: %w", req.FactoryID, err)
	}
	m := Message{
		ID:           "gc:" + req.FactoryID + ":" + strconv.FormatInt(now.Unix()/60, 10),
		Subscription: req.FactoryID,
		Body:         body,
		Properties: map[string]string{
			PropTargetFactoryID: req.FactoryID,
			PropKind:            string(KindGC),
		},
	}
	return m, m.Validate()
}

// ControlToMessage is the bus form of a control message, addressed to the
// holder's subscription like a dispatch (the same targetFactoryId property,
// so Service Bus subscription rules route it unchanged).
func ControlToMessage(msg protocol.ControlMessage) (Message, error) {
	switch {
	case msg.JobID == "" || msg.TargetFactoryID == "":
		return Message{}, fmt.Errorf("%w: control message needs a job id and a target factory (got %q, %q)",
			ErrInvalid, msg.JobID, msg.TargetFactoryID)
	case msg.Action != protocol.ControlCancel && msg.Action != protocol.ControlPreempt:
		return Message{}, fmt.Errorf("%w: control message has unknown action %q", ErrInvalid, msg.Action)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return Message{}, fmt.Errorf("encode control %s: %w", msg.MessageID(), err)
	}
	m := Message{
		ID:           msg.MessageID(),
		Subscription: msg.TargetFactoryID,
		Body:         body,
		Properties: map[string]string{
			PropTargetFactoryID: msg.TargetFactoryID,
			PropProductID:       msg.ProductID,
			PropKind:            string(KindControl),
		},
	}
	return m, m.Validate()
}

// DecodeControl reads a control delivery. Any error wraps ErrMalformed.
func DecodeControl(d Delivery) (protocol.ControlMessage, error) {
	var msg protocol.ControlMessage
	if k := d.Kind(); k != KindControl {
		return msg, fmt.Errorf("%w: message %s is of kind %q, not %q", ErrMalformed, d.ID, k, KindControl)
	}
	if err := decodeJSON(d.Body, &msg); err != nil {
		return msg, fmt.Errorf("%w: message %s: control body: %v", ErrMalformed, d.ID, err)
	}
	switch {
	case msg.JobID == "" || msg.LeaseEpoch <= 0:
		return msg, fmt.Errorf("%w: message %s: control body needs jobId and a positive leaseEpoch", ErrMalformed, d.ID)
	case msg.Action != protocol.ControlCancel && msg.Action != protocol.ControlPreempt:
		return msg, fmt.Errorf("%w: message %s: unknown control action %q", ErrMalformed, d.ID, msg.Action)
	case msg.MessageID() != d.ID:
		return msg, fmt.Errorf("%w: message id %q does not match its body (%s)", ErrMalformed, d.ID, msg.MessageID())
	case d.Subscription != "" && msg.TargetFactoryID != d.Subscription:
		return msg, fmt.Errorf("%w: message %s targets %q but was delivered to subscription %q",
			ErrMalformed, d.ID, msg.TargetFactoryID, d.Subscription)
	}
	return msg, nil
}

// DecodeDispatch reads a dispatch delivery. Any error wraps ErrMalformed:
// the message can never be handled and belongs on the dead-letter queue.
// It checks that the body agrees with the envelope (ID, subscription), so
// a misrouted or tampered message is refused before the factory accepts.
func DecodeDispatch(d Delivery) (protocol.DispatchMessage, error) {
	var msg protocol.DispatchMessage
	if k := d.Kind(); k != KindDispatch {
		return msg, fmt.Errorf("%w: message %s is of kind %q, not %q", ErrMalformed, d.ID, k, KindDispatch)
	}
	if err := decodeJSON(d.Body, &msg); err != nil {
		return msg, fmt.Errorf("%w: message %s: dispatch body: %v", ErrMalformed, d.ID, err)
	}
	switch {
	case msg.JobID == "" || msg.DispatchEpoch <= 0:
		return msg, fmt.Errorf("%w: message %s: dispatch body needs jobId and a positive dispatchEpoch", ErrMalformed, d.ID)
	case msg.MessageID() != d.ID:
		return msg, fmt.Errorf("%w: message id %q does not match its body (%s)", ErrMalformed, d.ID, msg.MessageID())
	case d.Subscription != "" && msg.TargetFactoryID != d.Subscription:
		return msg, fmt.Errorf("%w: message %s targets %q but was delivered to subscription %q",
			ErrMalformed, d.ID, msg.TargetFactoryID, d.Subscription)
	}
	return msg, nil
}

// DecodeGC reads a GC delivery. Any error wraps ErrMalformed.
func DecodeGC(d Delivery) (protocol.GCRequest, error) {
	var req protocol.GCRequest
	if k := d.Kind(); k != KindGC {
		return req, fmt.Errorf("%w: message %s is of kind %q, not %q", ErrMalformed, d.ID, k, KindGC)
	}
	if err := decodeJSON(d.Body, &req); err != nil {
		return req, fmt.Errorf("%w: message %s: gc body: %v", ErrMalformed, d.ID, err)
	}
	if req.FactoryID == "" {
		return req, fmt.Errorf("%w: message %s: gc body has no factoryId", ErrMalformed, d.ID)
	}
	if d.Subscription != "" && req.FactoryID != d.Subscription {
		return req, fmt.Errorf("%w: gc request for %q was delivered to subscription %q", ErrMalformed, req.FactoryID, d.Subscription)
	}
	return req, nil
}

// Decoded is a delivery's body by kind: exactly one field is set.
type Decoded struct {
	Dispatch *protocol.DispatchMessage
	GC       *protocol.GCRequest
	Control  *protocol.ControlMessage
}

// Decode reads a delivery of any known kind; an unknown kind is malformed
// (a newer coordinator speaking to an older factory: dead-letter it, the
// coordinator's sweep covers dispatch either way).
func Decode(d Delivery) (Decoded, error) {
	switch d.Kind() {
	case KindDispatch:
		m, err := DecodeDispatch(d)
		if err != nil {
			return Decoded{}, err
		}
		return Decoded{Dispatch: &m}, nil
	case KindGC:
		r, err := DecodeGC(d)
		if err != nil {
			return Decoded{}, err
		}
		return Decoded{GC: &r}, nil
	case KindControl:
		m, err := DecodeControl(d)
		if err != nil {
			return Decoded{}, err
		}
		return Decoded{Control: &m}, nil
	default:
		return Decoded{}, fmt.Errorf("%w: message %s has unknown kind %q", ErrMalformed, d.ID, d.Kind())
	}
}

// decodeJSON decodes exactly one JSON value. Unknown fields are allowed: a
// newer coordinator may add routing facts an older factory ignores.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}
