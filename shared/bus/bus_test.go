package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

type recordingSender struct {
	mu   sync.Mutex
	sent []bus.Message
	err  error
}

func (s *recordingSender) Send(_ context.Context, m bus.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.sent = append(s.sent, m.Clone())
	return nil
}

func dispatchMsg() protocol.DispatchMessage {
	return protocol.DispatchMessage{
		JobID: "job-42", ProductID: "notes-app", Repo: "learning-ai-notes",
		Capabilities: []string{"os:mac", "engine:claude"}, Priority: fleet.PriorityHigh,
		TargetFactoryID: "mac-1.local", DispatchEpoch: 3,
	}
}

func TestDispatcherPublish(t *testing.T) {
	t.Parallel()
	s := &recordingSender{}
	d := bus.NewDispatcher(s, bus.DispatcherOptions{DispatchTTL: 2 * time.Minute})
	msg := dispatchMsg()
	require.NoError(t, d.Publish(t.Context(), msg))

	require.Len(t, s.sent, 1)
	m := s.sent[0]
	require.Equal(t, "job-42:3", m.ID, "message id is jobId:dispatchEpoch")
	require.Equal(t, "mac-1.local", m.Subscription)
	require.Equal(t, map[string]string{
		bus.PropTargetFactoryID: "mac-1.local",
		bus.PropProductID:       "notes-app",
		bus.PropRepo:            "learning-ai-notes",
		bus.PropPriority:        "high",
		bus.PropKind:            "dispatch",
	}, m.Properties)
	require.Equal(t, "learning-ai-notes", m.OrderingKey)
	require.Equal(t, 2*time.Minute, m.TTL)
	require.Equal(t, bus.KindDispatch, m.Kind())

	var body protocol.DispatchMessage
	require.NoError(t, json.Unmarshal(m.Body, &body))
	require.Equal(t, msg, body, "the body is the whole dispatch message")
	require.NotContains(t, string(m.Body), "bodyMd", "never the job body")
}

func TestDispatcherRedispatchGetsANewID(t *testing.T) {
	t.Parallel()
	s := &recordingSender{}
	d := bus.NewDispatcher(s, bus.DispatcherOptions{})
	msg := dispatchMsg()
	require.NoError(t, d.Publish(t.Context(), msg))
	msg.DispatchEpoch++
	require.NoError(t, d.Publish(t.Context(), msg))
	require.Equal(t, "job-42:3", s.sent[0].ID)
	require.Equal(t, "job-42:4", s.sent[1].ID)
	require.Zero(t, s.sent[0].TTL, "no TTL unless configured: the broker default applies")
}

func TestDispatcherErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("broker down")
	d := bus.NewDispatcher(&recordingSender{err: boom}, bus.DispatcherOptions{})
	err := d.Publish(t.Context(), dispatchMsg())
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "job-42:3")

	d = bus.NewDispatcher(&recordingSender{}, bus.DispatcherOptions{})
	msg := dispatchMsg()
	msg.TargetFactoryID = ""
	require.ErrorIs(t, d.Publish(t.Context(), msg), bus.ErrInvalid)
	msg = dispatchMsg()
	msg.TargetFactoryID = "has space"
	require.ErrorIs(t, d.Publish(t.Context(), msg), bus.ErrInvalid)
	require.ErrorIs(t, d.PublishGC(t.Context(), protocol.GCRequest{}), bus.ErrInvalid)
}

func TestDispatcherPublishGC(t *testing.T) {
	t.Parallel()
	s := &recordingSender{}
	at := time.Date(2026, 11, 3, 10, 15, 42, 0, time.UTC)
	d := bus.NewDispatcher(s, bus.DispatcherOptions{Clock: clocktest.New(at)})
	req := protocol.GCRequest{FactoryID: "mac-2", Repos: map[string][]string{"notes": {"j1", "j2"}}}
	require.NoError(t, d.PublishGC(t.Context(), req))
	// Same minute: same id, so the broker collapses a doubled sweep.
	d2 := bus.NewDispatcher(s, bus.DispatcherOptions{Clock: clocktest.New(at.Add(17 * time.Second))})
	require.NoError(t, d2.PublishGC(t.Context(), req))
	d3 := bus.NewDispatcher(s, bus.DispatcherOptions{Clock: clocktest.New(at.Add(time.Minute))})
	require.NoError(t, d3.PublishGC(t.Context(), req))

	require.Len(t, s.sent, 3)
	minute := at.Unix() / 60
	require.Equal(t, "gc:mac-2:"+strconv.FormatInt(minute, 10), s.sent[0].ID)
	require.Equal(t, s.sent[0].ID, s.sent[1].ID)
	require.Equal(t, "gc:mac-2:"+strconv.FormatInt(minute+1, 10), s.sent[2].ID)
	m := s.sent[0]
	require.Equal(t, "mac-2", m.Subscription)
	require.Equal(t, map[string]string{bus.PropTargetFactoryID: "mac-2", bus.PropKind: "gc"}, m.Properties)
	require.Equal(t, bus.DefaultGCTTL, m.TTL)
	require.Empty(t, m.OrderingKey)

	got, err := bus.DecodeGC(bus.NewDelivery(m, 1, at, nil))
	require.NoError(t, err)
	require.Equal(t, req, got)
}

func TestDecodeDispatch(t *testing.T) {
	t.Parallel()
	good, err := bus.DispatchToMessage(dispatchMsg())
	require.NoError(t, err)
	got, err := bus.DecodeDispatch(bus.NewDelivery(good, 1, time.Now(), nil))
	require.NoError(t, err)
	require.Equal(t, dispatchMsg(), got)

	withUnknownField := good.Clone()
	withUnknownField.Body = []byte(strings.Replace(string(good.Body), `{`, `{"futureField":1,`, 1))
	_, err = bus.DecodeDispatch(bus.NewDelivery(withUnknownField, 1, time.Now(), nil))
	require.NoError(t, err, "a newer coordinator may add fields")

	for name, mutate := range map[string]func(m *bus.Message){
		"wrong kind":         func(m *bus.Message) { m.Properties[bus.PropKind] = "gc" },
		"no kind":            func(m *bus.Message) { delete(m.Properties, bus.PropKind) },
		"not json":           func(m *bus.Message) { m.Body = []byte("{") },
		"trailing data":      func(m *bus.Message) { m.Body = append(m.Body, []byte(" {}")...) },
		"id mismatch":        func(m *bus.Message) { m.ID = "job-42:2" },
		"wrong subscription": func(m *bus.Message) { m.Subscription = "mac-2" },
		"no job":             func(m *bus.Message) { m.Body = []byte(`{"dispatchEpoch":3}`); m.ID = ":3" },
		"zero epoch": func(m *bus.Message) {
			m.Body = []byte(`{"jobId":"job-42","targetFactoryId":"mac-1.local"}`)
			m.ID = "job-42:0"
		},
	} {
		m := good.Clone()
		mutate(&m)
		_, err := bus.DecodeDispatch(bus.NewDelivery(m, 1, time.Now(), nil))
		require.ErrorIs(t, err, bus.ErrMalformed, name)
	}
}

func TestDecodeByKind(t *testing.T) {
	t.Parallel()
	dm, err := bus.DispatchToMessage(dispatchMsg())
	require.NoError(t, err)
	dec, err := bus.Decode(bus.NewDelivery(dm, 1, time.Now(), nil))
	require.NoError(t, err)
	require.NotNil(t, dec.Dispatch)
	require.Nil(t, dec.GC)

	gm, err := bus.GCToMessage(protocol.GCRequest{FactoryID: "mac-1.local"}, time.Now())
	require.NoError(t, err)
	dec, err = bus.Decode(bus.NewDelivery(gm, 1, time.Now(), nil))
	require.NoError(t, err)
	require.NotNil(t, dec.GC)
	require.Nil(t, dec.Dispatch)

	gm.Subscription = "other"
	_, err = bus.Decode(bus.NewDelivery(gm, 1, time.Now(), nil))
	require.ErrorIs(t, err, bus.ErrMalformed, "gc request delivered to the wrong factory")

	unknown := bus.Message{ID: "x", Subscription: "a", Properties: map[string]string{bus.PropKind: "preempt"}}
	_, err = bus.Decode(bus.NewDelivery(unknown, 1, time.Now(), nil))
	require.ErrorIs(t, err, bus.ErrMalformed)
}

func TestMessageValidate(t *testing.T) {
	t.Parallel()
	ok := bus.Message{ID: "j:1", Subscription: "mac-1.local"}
	require.NoError(t, ok.Validate())
	for name, m := range map[string]bus.Message{
		"empty id":         {Subscription: "a"},
		"long id":          {ID: strings.Repeat("j", 129), Subscription: "a"},
		"empty sub":        {ID: "j:1"},
		"long sub":         {ID: "j:1", Subscription: strings.Repeat("s", 51)},
		"sub with newline": {ID: "j:1", Subscription: "a\nb"},
		"negative ttl":     {ID: "j:1", Subscription: "a", TTL: -1},
		"target mismatch":  {ID: "j:1", Subscription: "a", Properties: map[string]string{bus.PropTargetFactoryID: "b"}},
	} {
		require.ErrorIs(t, m.Validate(), bus.ErrInvalid, name)
	}
}

func TestCloneSharesNothing(t *testing.T) {
	t.Parallel()
	m := bus.Message{ID: "j:1", Subscription: "a", Body: []byte("x"), Properties: map[string]string{"k": "v"}}
	c := m.Clone()
	c.Body[0] = 'y'
	c.Properties["k"] = "w"
	require.Equal(t, "x", string(m.Body))
	require.Equal(t, "v", m.Properties["k"])
}

// fakeDeadLetters serves dead letters per subscription and records what the
// drain did with them.
type fakeDeadLetters struct {
	recordingSender
	queues    map[string][]bus.Delivery
	completed []string
	abandoned []string
}

func (f *fakeDeadLetters) ReceiveDeadLetters(_ context.Context, sub string, max int, _ time.Duration) ([]bus.Delivery, error) {
	q, ok := f.queues[sub]
	if !ok {
		return nil, bus.ErrNotFound
	}
	n := min(max, len(q))
	f.queues[sub] = q[n:]
	return q[:n], nil
}

func (f *fakeDeadLetters) Complete(_ context.Context, d bus.Delivery) error {
	f.completed = append(f.completed, d.ID)
	return nil
}

func (f *fakeDeadLetters) Abandon(_ context.Context, d bus.Delivery) error {
	f.abandoned = append(f.abandoned, d.ID)
	return nil
}

func TestDrainDeadLetters(t *testing.T) {
	t.Parallel()
	deadDispatch := func(job string, epoch int64) bus.Delivery {
		msg := dispatchMsg()
		msg.JobID, msg.DispatchEpoch = job, epoch
		m, err := bus.DispatchToMessage(msg)
		require.NoError(t, err)
		d := bus.NewDelivery(m, 1, time.Now(), nil)
		d.DeadLetterReason = bus.ReasonMaxDeliveries
		return d
	}
	gc, err := bus.GCToMessage(protocol.GCRequest{FactoryID: "mac-1.local"}, time.Now())
	require.NoError(t, err)
	f := &fakeDeadLetters{queues: map[string][]bus.Delivery{
		"mac-1.local": {deadDispatch("a", 1), bus.NewDelivery(gc, 1, time.Now(), nil), deadDispatch("b", 2)},
		"mac-2":       {},
	}}
	d := bus.NewDispatcher(f, bus.DispatcherOptions{}) // the sender drains too
	var handled []string
	n, err := d.DrainDeadLetters(t.Context(), []string{"mac-1.local", "mac-2", "never-provisioned"},
		func(_ context.Context, m protocol.DispatchMessage) error {
			handled = append(handled, m.MessageID())
			return nil
		})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{"a:1", "b:2"}, handled)
	require.Equal(t, []string{"a:1", gc.ID, "b:2"}, f.completed, "a dead GC request is dropped, not left to block")
	require.Empty(t, f.abandoned)
}

func TestDrainDeadLettersStopsASubscriptionOnFailure(t *testing.T) {
	t.Parallel()
	var ds []bus.Delivery
	for i := range 3 {
		msg := dispatchMsg()
		msg.DispatchEpoch = int64(i + 1)
		m, err := bus.DispatchToMessage(msg)
		require.NoError(t, err)
		ds = append(ds, bus.NewDelivery(m, 1, time.Now(), nil))
	}
	f := &fakeDeadLetters{queues: map[string][]bus.Delivery{"mac-1.local": ds}}
	d := bus.NewDispatcher(&recordingSender{}, bus.DispatcherOptions{DeadLetters: f})
	boom := errors.New("store unavailable")
	calls := 0
	n, err := d.DrainDeadLetters(t.Context(), []string{"mac-1.local"}, func(context.Context, protocol.DispatchMessage) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"job-42:1"}, f.completed)
	require.Equal(t, []string{"job-42:2", "job-42:3"}, f.abandoned, "the failed one and the rest go back for the next sweep")
}

// probedDeadLetters is fakeDeadLetters with a probe that names the
// subscriptions holding a dead letter (or fails with err), recording the
// subscriptions the drain asked.
type probedDeadLetters struct {
	fakeDeadLetters
	err    error
	probes int
	asked  []string
}

func (p *probedDeadLetters) DeadLettered(_ context.Context, subs []string) ([]string, error) {
	p.probes++
	if p.err != nil {
		return nil, p.err
	}
	var held []string
	for _, s := range subs {
		if len(p.queues[s]) > 0 {
			held = append(held, s)
		}
	}
	return held, nil
}

func (p *probedDeadLetters) ReceiveDeadLetters(ctx context.Context, sub string, max int, wait time.Duration) ([]bus.Delivery, error) {
	p.asked = append(p.asked, sub)
	return p.fakeDeadLetters.ReceiveDeadLetters(ctx, sub, max, wait)
}

// TestDrainDeadLettersAsksOnlyWhatTheProbeNames: with a probe the drain
// asks only the subscriptions that hold a dead letter; when the probe
// fails it asks every one, as without a probe.
func TestDrainDeadLettersAsksOnlyWhatTheProbeNames(t *testing.T) {
	t.Parallel()
	dead := func() bus.Delivery {
		m, err := bus.DispatchToMessage(dispatchMsg())
		require.NoError(t, err)
		return bus.NewDelivery(m, 1, time.Now(), nil)
	}
	for _, tc := range []struct {
		name      string
		queues    map[string][]bus.Delivery
		err       error
		wantAsked []string
		wantN     int
	}{
		{name: "none", queues: map[string][]bus.Delivery{"a": {}, "b": {}, "c": {}}},
		{name: "one", queues: map[string][]bus.Delivery{"a": {}, "b": {dead()}, "c": {}}, wantAsked: []string{"b", "b"}, wantN: 1},
		{name: "probe failed", queues: map[string][]bus.Delivery{"a": {}, "b": {dead()}, "c": {}}, err: errors.New("timeout"),
			wantAsked: []string{"a", "b", "b", "c"}, wantN: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &probedDeadLetters{fakeDeadLetters: fakeDeadLetters{queues: tc.queues}, err: tc.err}
			d := bus.NewDispatcher(&recordingSender{}, bus.DispatcherOptions{DeadLetters: p})
			n, err := d.DrainDeadLetters(t.Context(), []string{"a", "b", "c"}, func(context.Context, protocol.DispatchMessage) error { return nil })
			require.NoError(t, err)
			require.Equal(t, tc.wantN, n)
			require.Equal(t, tc.wantAsked, p.asked, "each subscription asked until it answers empty")
			require.Equal(t, 1, p.probes)
		})
	}
	// No subscription (no factory): nothing to probe either.
	p := &probedDeadLetters{}
	n, err := bus.NewDispatcher(&recordingSender{}, bus.DispatcherOptions{DeadLetters: p}).DrainDeadLetters(t.Context(), nil,
		func(context.Context, protocol.DispatchMessage) error { return nil })
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, p.probes, "no request for no subscription")
}

func TestDrainDeadLettersWithoutReceiver(t *testing.T) {
	t.Parallel()
	d := bus.NewDispatcher(&recordingSender{}, bus.DispatcherOptions{})
	n, err := d.DrainDeadLetters(t.Context(), []string{"a"}, func(context.Context, protocol.DispatchMessage) error {
		t.Fatal("nothing to drain")
		return nil
	})
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestDispatcherPublishControl(t *testing.T) {
	t.Parallel()
	s := &recordingSender{}
	d := bus.NewDispatcher(s, bus.DispatcherOptions{DispatchTTL: 2 * time.Minute})
	msg := protocol.ControlMessage{Action: protocol.ControlCancel, JobID: "job-42", ProductID: "p1",
		TargetFactoryID: "mac-1.local", LeaseEpoch: 3}
	require.NoError(t, d.PublishControl(t.Context(), msg))
	require.Len(t, s.sent, 1)
	m := s.sent[0]
	require.Equal(t, "control:cancel:job-42:3", m.ID, "one command per lease: a repeated publish collapses")
	require.Equal(t, "mac-1.local", m.Subscription)
	require.Equal(t, map[string]string{bus.PropTargetFactoryID: "mac-1.local", bus.PropProductID: "p1",
		bus.PropKind: "control"}, m.Properties, "routed on targetFactoryId like a dispatch")
	require.Equal(t, 2*time.Minute, m.TTL)

	dec, err := bus.Decode(bus.NewDelivery(m, 1, time.Now(), nil))
	require.NoError(t, err)
	require.Equal(t, &msg, dec.Control)
	require.Nil(t, dec.Dispatch)
	require.Nil(t, dec.GC)

	for name, bad := range map[string]protocol.ControlMessage{
		"no job":         {Action: protocol.ControlCancel, TargetFactoryID: "a", LeaseEpoch: 1},
		"no target":      {Action: protocol.ControlCancel, JobID: "j", LeaseEpoch: 1},
		"unknown action": {Action: "pause", JobID: "j", TargetFactoryID: "a", LeaseEpoch: 1},
	} {
		require.ErrorIs(t, d.PublishControl(t.Context(), bad), bus.ErrInvalid, name)
	}
	for name, mutate := range map[string]func(m *bus.Message){
		"wrong kind":         func(m *bus.Message) { m.Properties[bus.PropKind] = "dispatch" },
		"id mismatch":        func(m *bus.Message) { m.ID = "control:cancel:job-42:4" },
		"wrong subscription": func(m *bus.Message) { m.Subscription = "mac-2" },
		"zero epoch": func(m *bus.Message) {
			m.Body = []byte(`{"action":"cancel","jobId":"job-42","targetFactoryId":"mac-1.local"}`)
			m.ID = "control:cancel:job-42:0"
		},
		"unknown action": func(m *bus.Message) {
			m.Body = []byte(`{"action":"pause","jobId":"job-42","targetFactoryId":"mac-1.local","leaseEpoch":3}`)
			m.ID = "control:pause:job-42:3"
		},
	} {
		bad := m.Clone()
		mutate(&bad)
		_, err := bus.DecodeControl(bus.NewDelivery(bad, 1, time.Now(), nil))
		require.ErrorIs(t, err, bus.ErrMalformed, name)
	}
}

// endlessDeadLetters is a dead-letter queue that refills as fast as it is
// drained (a factory publishing to its own, where the broker lets it).
type endlessDeadLetters struct {
	fakeDeadLetters
	letter bus.Delivery
}

func (f *endlessDeadLetters) ReceiveDeadLetters(ctx context.Context, sub string, max int, wait time.Duration) ([]bus.Delivery, error) {
	if sub != "flooded" {
		return f.fakeDeadLetters.ReceiveDeadLetters(ctx, sub, max, wait)
	}
	out := make([]bus.Delivery, max)
	for i := range out {
		out[i] = f.letter
	}
	return out, nil
}

// TestDrainDeadLettersIsBounded: a queue that never empties costs a drain
// at most MaxDrainPerSub letters, and the subscriptions after it are
// drained too; the rest waits for the next sweep.
func TestDrainDeadLettersIsBounded(t *testing.T) {
	t.Parallel()
	m, err := bus.DispatchToMessage(dispatchMsg())
	require.NoError(t, err)
	f := &endlessDeadLetters{letter: bus.NewDelivery(m, 1, time.Now(), nil)}
	f.queues = map[string][]bus.Delivery{"after": {bus.NewDelivery(m, 1, time.Now(), nil)}}
	d := bus.NewDispatcher(&recordingSender{}, bus.DispatcherOptions{DeadLetters: f})
	n, err := d.DrainDeadLetters(t.Context(), []string{"flooded", "after"}, func(context.Context, protocol.DispatchMessage) error { return nil })
	require.NoError(t, err)
	require.Equal(t, bus.MaxDrainPerSub+1, n)
	require.Len(t, f.completed, bus.MaxDrainPerSub+1, "the one of the next subscription too")
}
