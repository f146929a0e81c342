package tests

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	natsbus "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/protocol"
)

// natsViolations collects a connection's asynchronous errors: a refused
// subscribe or publish is reported only that way.
type natsViolations chan error

func (v natsViolations) option() natsgo.Option {
	return natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
		select {
		case v <- err:
		default:
		}
	})
}

func (v natsViolations) await(t *testing.T, subject string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-v:
			if errors.Is(err, natsgo.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-timeout:
			t.Fatalf("the broker did not refuse %q", subject)
		}
	}
}

// TestNATSRequiresCredentials (issue 23 item 4): the local stack's NATS
// admits no client without credentials, not even with an operator token;
// a factory's own token reaches its own subscription only: it cannot
// read fleet.>, another factory's consumer or the shared reply inbox, and
// cannot publish on a fleet subject (a forged cancel included).
func TestNATSRequiresCredentials(t *testing.T) {
	t.Parallel()
	s := busStack(t)
	s.Product("demo", "app")
	tokA := s.Factory("fa", "demo", 1, []string{"os:linux"}, []string{"app"})
	tokB := s.Factory("fb", "demo", 1, []string{"os:linux"}, []string{"other"})

	for name, opts := range map[string][]natsgo.Option{
		"no credentials": nil,
		"operator token": {natsgo.Token(s.Token)},
		"a made-up one":  {natsgo.Token("fft_" + strings.Repeat("x", 43))},
	} {
		nc, err := natsgo.Connect(s.NATS, append(opts, natsgo.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
		}
		require.ErrorIs(t, err, natsgo.ErrAuthorization, "%s: connected", name)
	}

	// fa's message waits in fa's subscription.
	id := s.Submit("demo", Manifest("For fa", "app", "os:linux"))
	Eventually(t, 30*time.Second, "the job dispatched to fa", func() bool {
		return s.Job("demo", id)["targetFactoryId"] == "fa"
	})

	errs := make(natsViolations, 64)
	nc, err := natsgo.Connect(s.NATS, append(natsbus.FactoryConnOptions("fb", tokB), errs.option())...)
	require.NoError(t, err, "a factory connects with its fleet token")
	t.Cleanup(nc.Close)
	for _, subject := range []string{"fleet.>", "fleet.dispatch.fa", ">", "_INBOX.>", natsbus.FactoryInbox("fa") + ".>"} {
		_, err := nc.SubscribeSync(subject)
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		errs.await(t, subject)
	}
	for _, subject := range []string{"fleet.dispatch.fa", "fleet.dispatch.fb", "$JS.API.CONSUMER.INFO.FLEET_DISPATCH.fa",
		"$JS.API.CONSUMER.MSG.NEXT.FLEET_DISPATCH.fa", "$JS.API.STREAM.INFO.FLEET_DISPATCH"} {
		require.NoError(t, nc.Publish(subject, []byte(`{"action":"cancel","jobId":"`+id+`"}`)))
		require.NoError(t, nc.Flush())
		errs.await(t, subject)
	}

	// fb's bus client cannot reach fa's consumer; fa's own can, and the
	// message is still there, never delivered to anyone else.
	ctx := context.Background()
	fb, err := natsbus.Open(ctx, s.NATS, natsbus.Options{Name: "test-fb", Bind: true, RequestTimeout: 2 * time.Second,
		ConnOptions: natsbus.FactoryConnOptions("fb", tokB)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = fb.Close(ctx) })
	_, err = fb.Receive(ctx, "fa", 1, time.Second)
	require.Error(t, err, "fb read fa's subscription")
	fa := newFactoryClient(t, s.NATS, "fa", tokA)
	d, m := fa.receive(10 * time.Second)
	require.Equal(t, id, m.JobID)
	require.Equal(t, 1, d.DeliveryCount, "nobody else received fa's dispatch")
}

// TestForgedControlMessageStopsNothing (issue 23 item 4): a control
// message is only a prompt. A forged preemption published on a running
// factory's subscription (here with the coordinator's own NATS secret:
// whoever could publish) makes the factory renew once; the coordinator
// asked for nothing, so the run goes on. A real cancel through the API
// still stops it at once, by message (the renewal cadence is a minute).
func TestForgedControlMessageStopsNothing(t *testing.T) {
	t.Parallel()
	const coordinator = "test-coordinator-nats-secret"
	s := busStack(t, "FLEET_NATS_TOKEN="+coordinator)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	dir := t.TempDir()
	f := startFactory(t, s, "fa", "demo", 1, repo, facEngine(t, stopEngineBody(dir)),
		"FLEET_TRANSPORT=nats", "FLEET_NATS_URL="+s.NATS, "FLEET_RENEW_INTERVAL=1m")

	id := s.Submit("demo", Manifest("Keep running", "app", "engine:fake"))
	pgid := waitEngineUp(t, dir, id)
	job := s.Job("demo", id)
	epoch := int64(job["leaseEpoch"].(float64))

	ctx := context.Background()
	c, err := natsbus.Open(ctx, s.NATS, natsbus.Options{Name: "test-forger", ConnOptions: []natsgo.Option{natsgo.Token(coordinator)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(ctx) })
	// A preemption, so the real cancel below (another message id) is not
	// dropped as its duplicate.
	require.NoError(t, bus.NewDispatcher(c, bus.DispatcherOptions{}).PublishControl(ctx, protocol.ControlMessage{
		Action: protocol.ControlPreempt, JobID: id, ProductID: "demo", TargetFactoryID: "fa", LeaseEpoch: epoch}))
	Eventually(t, 20*time.Second, "the factory handled the forged message", func() bool {
		out := f.Output()
		return strings.Contains(out, "control message the coordinator does not confirm") ||
			strings.Contains(out, "stopping the run at the coordinator's request")
	})
	require.NotContains(t, f.Output(), "stopping the run at the coordinator's request", "a forged preemption stopped the run")
	require.NotEmpty(t, liveGroup(t, pgid), "the engine still runs")
	require.Equal(t, "building", s.Job("demo", id)["stage"])

	start := time.Now()
	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/cancel", "demo", nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	facWaitStage(t, s, "demo", id, "cancelled", 30*time.Second)
	t.Logf("cancel -> acknowledged after a forged preemption: %s", time.Since(start).Round(time.Millisecond))
	// Only a control message the renewal confirms logs this; the lease
	// keeper (the next renewal, a minute away) stops a run silently.
	require.Contains(t, f.Output(), "stopping the run at the coordinator's request", "the real cancel came by message, not at the next renewal")
	types := eventTypesOf(t, s, "demo", id)
	require.Contains(t, types, "cancel_acknowledged")
	require.NotContains(t, types, "preempted")
}
