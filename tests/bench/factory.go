package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/bus"
	natsbus "github.com/gigafactory/fleet/shared/bus/nats"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// heartbeatEvery is how often a factory heartbeats: well inside the 90s
// stale threshold, as a static factory must.
const heartbeatEvery = 15 * time.Second

// factoryCaps are what every simulated factory offers; jobs need the first
// two, and their repo, which only one factory has checked out.
var (
	factoryCaps = []string{"os:linux", "engine:claude", "has:git"}
	jobCaps     = []string{"os:linux", "engine:claude"}
)

// factory is one simulated factory: its token, its HTTP client, its
// subscription on the bus, and the one repo it has checked out.
type factory struct {
	id, product, repo string
	api               *client
	bus               *natsbus.Client

	inflight   atomic.Int64 // jobs between accept and their last PATCH
	heartbeats atomic.Int64 // heartbeats sent
}

// newFactory enrolls a factory serving product with repo checked out,
// heartbeats once (so it is routable), and subscribes it on the bus.
func newFactory(ctx context.Context, st *stack, op *client, id, product, repo string, seats, conns int) (*factory, error) {
	tok, err := op.enroll(ctx, id, product, seats)
	if err != nil {
		return nil, err
	}
	f := &factory{id: id, product: product, repo: repo, api: newClient(st.URL, tok, conns)}
	if err := f.heartbeat(ctx); err != nil {
		return nil, err
	}
	// As a factory connects: its fleet token, limited to its subscription.
	f.bus, err = natsbus.Open(ctx, st.NATS, natsbus.Options{Name: "bench-" + id, Bind: true,
		ConnOptions: natsbus.FactoryConnOptions(id, tok)})
	if err != nil {
		return nil, fmt.Errorf("factory %s: nats: %w", id, err)
	}
	if err := f.bus.EnsureSubscription(ctx, id); err != nil {
		_ = f.bus.Close(ctx)
		return nil, fmt.Errorf("factory %s: subscribe: %w", id, err)
	}
	return f, nil
}

func (f *factory) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.bus.Close(ctx)
	f.api.close()
}

// heartbeat reports the factory's capabilities, repo and load.
func (f *factory) heartbeat(ctx context.Context) error {
	f.heartbeats.Add(1)
	_, err := f.api.fleet.Heartbeat(ctx, api.HeartbeatRequest{Capabilities: factoryCaps, Repos: []string{f.repo},
		Load: int(f.inflight.Load()), Health: fleet.HealthOK})
	return err
}

// heartbeatLoop heartbeats every heartbeatEvery until ctx ends.
func (f *factory) heartbeatLoop(ctx context.Context) error {
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := f.heartbeat(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("factory %s: heartbeat: %w", f.id, err)
		}
	}
}

// handler handles one dispatch delivery received at `at`. It settles the
// delivery itself.
type handler func(ctx context.Context, at time.Time, d bus.Delivery, m protocol.DispatchMessage) error

// receiveLoop blocks in Receive on the factory's subscription and hands each
// dispatch to handle, until ctx ends. GC requests are completed and skipped.
func (f *factory) receiveLoop(ctx context.Context, handle handler) error {
	for ctx.Err() == nil {
		ds, err := f.bus.Receive(ctx, f.id, 32, 10*time.Second)
		at := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("factory %s: receive: %w", f.id, err)
		}
		for _, d := range ds {
			dec, err := bus.Decode(d)
			if err != nil {
				return fmt.Errorf("factory %s: %w", f.id, err)
			}
			if dec.Dispatch == nil {
				if err := f.bus.Complete(ctx, d); err != nil && ctx.Err() == nil {
					return fmt.Errorf("factory %s: complete a GC request: %w", f.id, err)
				}
				continue
			}
			if err := handle(ctx, at, d, *dec.Dispatch); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("factory %s: job %s: %w", f.id, dec.Dispatch.JobID, err)
			}
		}
	}
	return nil
}

// acceptAndComplete claims the dispatched job and completes the delivery
// (complete-on-claim). A 409 means the dispatch is stale or a duplicate:
// the delivery is completed and ok is false.
func (f *factory) acceptAndComplete(ctx context.Context, d bus.Delivery, m protocol.DispatchMessage) (epoch int64, ok bool, err error) {
	epoch, err = f.api.accept(ctx, m)
	switch {
	case err == nil:
		ok = true
	case statusOf(err) == http.StatusConflict:
		err = nil
	default:
		return 0, false, err
	}
	if cerr := f.bus.Complete(ctx, d); cerr != nil && !errors.Is(cerr, bus.ErrLockLost) {
		return 0, false, fmt.Errorf("complete: %w", cerr)
	}
	return epoch, ok, nil
}
