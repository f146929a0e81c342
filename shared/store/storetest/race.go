package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// casWin is one successful compare-and-swap.
type casWin struct {
	old, new string
	n        int64 // the counter value the winner wrote
}

// testCASRace: 64 goroutines update the same documents with read → modify
// → Replace(ifRev), retrying on ErrPrecondition. No update may be lost, and
// each revision may have exactly one successor: the winners form a single
// chain from the created revision to the current one.
func testCASRace(t *testing.T, s store.Store) {
	const (
		workers     = 64
		maxAttempts = 1_000_000 // only guards against a livelock
		c, pk       = store.Jobs, "p1"
	)
	each := 6
	if testing.Short() {
		each = 2
	}
	docs := []string{"r0", "r1"}
	pkf := pkField(t, c)
	initial := map[string]string{}
	for _, id := range docs {
		initial[id] = mustCreate(t, s, c, pk, id, doc(t, c, pk, id, fields{"n": 0}))
	}

	var (
		mu   sync.Mutex
		wins = map[string][]casWin{}
		errs = newFirstErr()
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			ctx := context.Background()
			for k := range each * len(docs) {
				id := docs[(w+k)%len(docs)]
				for attempt := 0; ; attempt++ {
					if errs.failed() {
						return
					}
					if attempt == maxAttempts {
						errs.set("worker %d: no CAS success on %s in %d attempts", w, id, attempt)
						return
					}
					it, err := s.Read(ctx, c, pk, id)
					if err != nil {
						errs.set("worker %d: read %s: %v", w, id, err)
						return
					}
					var b struct {
						N int64 `json:"n"`
					}
					if err := json.Unmarshal(it.Body, &b); err != nil {
						errs.set("worker %d: body %s: %v", w, it.Body, err)
						return
					}
					body, err := json.Marshal(map[string]any{"id": id, pkf: pk, "n": b.N + 1, "by": w})
					if err != nil {
						errs.set("marshal: %v", err)
						return
					}
					rev, err := s.Replace(ctx, c, pk, id, body, it.Rev)
					if errors.Is(err, store.ErrPrecondition) {
						continue // lost the race: read again
					}
					if err != nil {
						errs.set("worker %d: replace %s: %v", w, id, err)
						return
					}
					mu.Lock()
					wins[id] = append(wins[id], casWin{old: it.Rev, new: rev, n: b.N + 1})
					mu.Unlock()
					break
				}
			}
		})
	}
	wg.Wait()
	errs.check(t)

	total := workers * each
	for _, id := range docs {
		cur := mustRead(t, s, c, pk, id)
		require.Equal(t, float64(total), decode(t, cur.Body)["n"], "%s: lost updates", id)
		ws := wins[id]
		require.Len(t, ws, total)
		next := map[string]string{}
		newRevs := map[string]bool{}
		var ns []int64
		for _, w := range ws {
			_, dup := next[w.old]
			require.False(t, dup, "%s: revision %s has two winners", id, w.old)
			next[w.old] = w.new
			require.False(t, newRevs[w.new], "%s: revision %s issued twice", id, w.new)
			newRevs[w.new] = true
			ns = append(ns, w.n)
		}
		slices.Sort(ns)
		for i, n := range ns {
			require.Equal(t, int64(i+1), n, "%s: winners wrote counter values with a gap or a repeat", id)
		}
		rev := initial[id]
		for i := range total {
			nr, ok := next[rev]
			require.True(t, ok, "%s: chain of winners breaks after %d writes", id, i)
			rev = nr
		}
		require.Equal(t, cur.Rev, rev, "%s: chain of winners does not end at the current revision", id)
	}
}

// raceGate starts n goroutines at once and collects their errors.
func raceGate(n int, fn func(w int) error) []error {
	var (
		wg    sync.WaitGroup
		ready sync.WaitGroup
		start = make(chan struct{})
		out   = make([]error, n)
	)
	ready.Add(n)
	for w := range n {
		wg.Go(func() {
			ready.Done()
			<-start
			out[w] = fn(w)
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	return out
}

func testCreateRace(t *testing.T, s store.Store) {
	const n, c, pk = 32, store.Jobs, "p1"
	pkf := pkField(t, c)
	body := func(id string, w int) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, pkf: pk, "by": w})
		return b
	}
	// Racing creates: exactly one wins.
	errs := raceGate(n, func(w int) error {
		_, err := s.Create(context.Background(), c, pk, "x", body("x", w))
		return err
	})
	winner := -1
	for w, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two creates of one id succeeded")
			winner = w
			continue
		}
		require.ErrorIs(t, err, store.ErrExists)
	}
	require.NotEqual(t, -1, winner, "no create succeeded")
	require.Equal(t, float64(winner), decode(t, mustRead(t, s, c, pk, "x").Body)["by"])

	// Racing claims from one read revision: exactly one wins.
	rev := mustCreate(t, s, c, pk, "claim", body("claim", -1))
	errs = raceGate(n, func(w int) error {
		_, err := s.Replace(context.Background(), c, pk, "claim", body("claim", w), rev)
		return err
	})
	winner = -1
	for w, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two replaces from one revision succeeded")
			winner = w
			continue
		}
		require.ErrorIs(t, err, store.ErrPrecondition)
	}
	require.NotEqual(t, -1, winner, "no replace succeeded")
	require.Equal(t, float64(winner), decode(t, mustRead(t, s, c, pk, "claim").Body)["by"])
}

func testDeleteRace(t *testing.T, s store.Store) {
	const n, c, pk = 32, store.Jobs, "p1"
	rev := mustCreate(t, s, c, pk, "x", doc(t, c, pk, "x", nil))
	errs := raceGate(n, func(int) error { return s.Delete(context.Background(), c, pk, "x", rev) })
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		require.True(t, errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrPrecondition),
			"a losing delete must report not found or precondition, got %v", err)
	}
	require.Equal(t, 1, ok, "exactly one conditional delete from one revision must succeed")
	requireAbsent(t, s, c, pk, "x")
}
