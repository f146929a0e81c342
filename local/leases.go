package main

import (
	"context"
	"errors"

	"github.com/gigafactory/fleet/shared/store"
)

// hostLeasesFile is the SQLite file of the host's leases, in the data dir.
const hostLeasesFile = "host-leases.db"

// hostLeases is the store the host emulator runs on with SQLite: its
// leases container (the change-feed triggers' checkpoints, the timers'
// status) in a file of its own, everything else in the fleet's. In Azure
// the lease container is a container apart, whose writes never wait for the
// jobs'; in one SQLite file every checkpoint would take the file's one
// write lock from the handler's job writes, and a write that finds the lock
// held by another process sleeps 1, 2, 5 ms… before it retries (issue 25:
// a checkpoint after every change-feed batch, so hundreds a second under
// load, put those sleeps into the dispatch path's submit and stamp writes).
type hostLeases struct {
	store.Store // the fleet's file
	leases      store.Store
}

// Read reads a lease from the leases file, or, when it is not there yet,
// from the fleet's file, where checkpoints lived before they moved: a
// restarted host resumes where it was instead of replaying the feed.
func (h hostLeases) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	if container != store.Leases {
		return h.Store.Read(ctx, container, pk, id)
	}
	it, err := h.leases.Read(ctx, container, pk, id)
	if errors.Is(err, store.ErrNotFound) {
		return h.Store.Read(ctx, container, pk, id)
	}
	return it, err
}

func (h hostLeases) Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	return h.of(container).Upsert(ctx, container, pk, id, body)
}

func (h hostLeases) Create(ctx context.Context, container, pk, id string, body []byte) (string, error) {
	return h.of(container).Create(ctx, container, pk, id, body)
}

func (h hostLeases) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	return h.of(container).Replace(ctx, container, pk, id, body, ifRev)
}

func (h hostLeases) Delete(ctx context.Context, container, pk, id, ifRev string) error {
	return h.of(container).Delete(ctx, container, pk, id, ifRev)
}

func (h hostLeases) Query(ctx context.Context, container string, q store.Query) (store.Page, error) {
	return h.of(container).Query(ctx, container, q)
}

// of is the file holding container's documents.
func (h hostLeases) of(container string) store.Store {
	if container == store.Leases {
		return h.leases
	}
	return h.Store
}
