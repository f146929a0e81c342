package lintest_test

import (
	"context"
	"errors"
	"sync"

	"github.com/gigafactory/fleet/shared/store"
)

// rendezvous makes the first two reads of each job document wait for each
// other after both have read it, so two claimers hold the same revision
// before either writes: the race the claim's CAS exists for happens on every
// job, not only when the scheduler happens to interleave it. It is shared
// by every coordinator's store (they are one race).
type rendezvous struct {
	mu    sync.Mutex
	meets map[string]*meeting
}

type meeting struct {
	n    int
	both chan struct{}
}

func newRendezvous() *rendezvous { return &rendezvous{meets: map[string]*meeting{}} }

// arrive returns the channel to wait on, or nil after the first two reads.
func (r *rendezvous) arrive(id string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.meets[id]
	if m == nil {
		m = &meeting{both: make(chan struct{})}
		r.meets[id] = m
	}
	m.n++
	switch m.n {
	case 1:
		return m.both
	case 2:
		close(m.both)
		return m.both
	}
	return nil
}

// rendezvousStore is a coordinator's store with the shared rendezvous.
type rendezvousStore struct {
	store.Store
	r *rendezvous
}

func (s rendezvousStore) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	it, err := s.Store.Read(ctx, container, pk, id)
	if container == store.Jobs {
		if ch := s.r.arrive(id); ch != nil {
			<-ch
		}
	}
	return it, err
}

// writes collects the job documents one operation wrote, so an operation
// that touches jobs it does not name (the reaper) can be split into one
// observed operation per job. The operation's context carries it.
type writes struct {
	mu   sync.Mutex
	jobs map[string][]byte // job id -> last body written
}

type writesKey struct{}

func withWrites(ctx context.Context) (context.Context, *writes) {
	w := &writes{jobs: map[string][]byte{}}
	return context.WithValue(ctx, writesKey{}, w), w
}

// observingStore records successful job writes into the context's writes.
type observingStore struct{ store.Store }

func (s observingStore) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	rev, err := s.Store.Replace(ctx, container, pk, id, body, ifRev)
	if w, ok := ctx.Value(writesKey{}).(*writes); ok && err == nil && container == store.Jobs {
		w.mu.Lock()
		w.jobs[id] = body
		w.mu.Unlock()
	}
	return rev, err
}

// blindStore is deliberately broken: it ignores the revision of a job's
// CAS write and overwrites whatever is there (a lost update), the bug
// exactly-once assignment rests on not having.
type blindStore struct{ store.Store }

func (s blindStore) Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (string, error) {
	if container != store.Jobs {
		return s.Store.Replace(ctx, container, pk, id, body, ifRev)
	}
	for {
		cur, err := s.Store.Read(ctx, container, pk, id)
		if err != nil {
			return "", err
		}
		rev, err := s.Store.Replace(ctx, container, pk, id, body, cur.Rev)
		if !errors.Is(err, store.ErrPrecondition) {
			return rev, err
		}
	}
}
