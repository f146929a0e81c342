package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// drain reads container's feed from cont until an empty page and returns
// the items and the continuation to resume from.
func drain(t *testing.T, s store.Store, container, cont string, max int) ([]store.Item, string) {
	t.Helper()
	var items []store.Item
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10000, "change feed does not end")
		page, err := s.ReadChanges(t.Context(), container, cont, max)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Items), max, "feed page larger than max")
		if len(page.Items) > 0 {
			require.NotEmpty(t, page.Continuation, "a page with items must carry a checkpoint")
		}
		if page.Continuation != "" {
			cont = page.Continuation
		}
		if len(page.Items) == 0 {
			return items, cont
		}
		items = append(items, page.Items...)
	}
}

func feedIDs(items []store.Item) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids
}

// requireLatest checks that feed items are the documents' current versions.
func requireLatest(t *testing.T, s store.Store, container string, items []store.Item) {
	t.Helper()
	for _, it := range items {
		cur := mustRead(t, s, container, it.PartitionKey, it.ID)
		require.Equal(t, cur.Rev, it.Rev, "feed item %s/%s is not the latest revision", it.PartitionKey, it.ID)
		require.JSONEq(t, string(cur.Body), string(it.Body))
	}
}

func testChangeFeedOrder(t *testing.T, s store.Store) {
	ctx := t.Context()
	const c, pk = store.Jobs, "p1"
	body := func(id string, n int) []byte { return doc(t, c, pk, id, fields{"n": n}) }

	page, err := s.ReadChanges(ctx, c, "", 100)
	require.NoError(t, err)
	require.Empty(t, page.Items, "feed of an empty container")
	cont := page.Continuation

	revs := map[string]string{}
	for _, id := range []string{"a", "b", "c"} {
		revs[id] = mustCreate(t, s, c, pk, id, body(id, 0))
	}
	items, cp1 := drain(t, s, c, cont, 100)
	require.Equal(t, []string{"a", "b", "c"}, feedIDs(items))
	requireLatest(t, s, c, items)

	// Nothing new: an empty page, and its continuation still works.
	page, err = s.ReadChanges(ctx, c, cp1, 100)
	require.NoError(t, err)
	require.Empty(t, page.Items)
	if page.Continuation != "" {
		cp1 = page.Continuation
	}

	// Ordered by last change, not by creation.
	_, err = s.Replace(ctx, c, pk, "b", body("b", 1), revs["b"])
	require.NoError(t, err)
	_, err = s.Upsert(ctx, c, pk, "a", body("a", 1))
	require.NoError(t, err)
	items, cp2 := drain(t, s, c, cp1, 100)
	require.Equal(t, []string{"b", "a"}, feedIDs(items))
	requireLatest(t, s, c, items)
	items, _ = drain(t, s, c, "", 100)
	require.Equal(t, []string{"c", "b", "a"}, feedIDs(items), "from the beginning, each document once, in order of last change")
	requireLatest(t, s, c, items)

	// Latest version: three changes after the checkpoint, one item.
	cur := mustRead(t, s, c, pk, "c")
	_, err = s.Replace(ctx, c, pk, "c", body("c", 1), cur.Rev)
	require.NoError(t, err)
	_, err = s.Upsert(ctx, c, pk, "c", body("c", 2))
	require.NoError(t, err)
	n, err := s.Increment(ctx, c, pk, "c", "n", 10)
	require.NoError(t, err)
	require.Equal(t, int64(12), n)
	items, cp3 := drain(t, s, c, cp2, 100)
	require.Equal(t, []string{"c"}, feedIDs(items))
	requireLatest(t, s, c, items)
	require.Equal(t, float64(12), decode(t, items[0].Body)["n"])

	// Deleted documents do not appear, even when changed before the delete.
	mustCreate(t, s, c, pk, "d", body("d", 0))
	require.NoError(t, s.Delete(ctx, c, pk, "d", ""))
	_, err = s.Upsert(ctx, c, pk, "b", body("b", 2))
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, c, pk, "b", ""))
	items, cp4 := drain(t, s, c, cp3, 100)
	require.Empty(t, items, "deleted documents appeared in the feed")
	items, _ = drain(t, s, c, "", 100)
	require.Equal(t, []string{"a", "c"}, feedIDs(items))

	// The checkpoint of an empty read resumes exactly after it.
	mustCreate(t, s, c, pk, "e", body("e", 0))
	items, _ = drain(t, s, c, cp4, 100)
	require.Equal(t, []string{"e"}, feedIDs(items))
	requireLatest(t, s, c, items)
}

func testChangeFeedPagination(t *testing.T, s store.Store) {
	ctx := t.Context()
	const c, pk, total = store.Jobs, "p1", 25
	revs := map[string]string{}
	var created []string
	for i := range total {
		id := fmt.Sprintf("d%02d", i)
		revs[id] = mustCreate(t, s, c, pk, id, doc(t, c, pk, id, fields{"n": 0}))
		created = append(created, id)
	}
	// Update every third document, last first: they move to the end of the
	// feed in update order.
	var updated []string
	for i := total - 1; i >= 0; i-- {
		if i%3 != 0 {
			continue
		}
		id := created[i]
		_, err := s.Replace(ctx, c, pk, id, doc(t, c, pk, id, fields{"n": 1}), revs[id])
		require.NoError(t, err)
		updated = append(updated, id)
	}
	var want []string
	for _, id := range created {
		if !slices.Contains(updated, id) {
			want = append(want, id)
		}
	}
	want = append(want, updated...)

	var (
		got     []string
		cont    string
		mid     string
		midSeen int
	)
	for pages := 0; ; pages++ {
		require.Less(t, pages, total+2, "change feed does not end")
		page, err := s.ReadChanges(ctx, c, cont, 4)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Items), 4)
		if len(page.Items) == 0 {
			break
		}
		requireLatest(t, s, c, page.Items)
		got = append(got, feedIDs(page.Items)...)
		cont = page.Continuation
		if pages == 1 {
			mid, midSeen = cont, len(got)
		}
	}
	require.Equal(t, want, got, "pages lost, duplicated or reordered changes")
	require.NotEmpty(t, mid)

	// A checkpoint taken mid-way resumes exactly after it...
	items, _ := drain(t, s, c, mid, 100)
	require.Equal(t, want[midSeen:], feedIDs(items))
	// ...and keeps doing so as more is written.
	mustCreate(t, s, c, pk, "z", doc(t, c, pk, "z", nil))
	items, _ = drain(t, s, c, mid, 3)
	require.Equal(t, append(slices.Clone(want[midSeen:]), "z"), feedIDs(items))
}

func testChangeFeedPartitions(t *testing.T, s store.Store) {
	ctx := t.Context()
	const c = store.Jobs
	var log []string // keys in write order
	revs := map[string]string{}
	for round := range 4 {
		for p := range 4 {
			pk, id := fmt.Sprintf("p%d", p), fmt.Sprintf("x%d", round)
			revs[key(pk, id)] = mustCreate(t, s, c, pk, id, doc(t, c, pk, id, fields{"n": 0}))
			log = append(log, key(pk, id))
		}
	}
	for i, k := range []string{key("p2", "x0"), key("p0", "x3"), key("p2", "x1"), key("p1", "x0"), key("p2", "x0")} {
		pk, id := splitKey(k)
		it := mustRead(t, s, c, pk, id)
		_, err := s.Replace(ctx, c, it.PartitionKey, it.ID, doc(t, c, it.PartitionKey, it.ID, fields{"n": i + 1}), it.Rev)
		require.NoError(t, err)
		log = append(log, k)
	}
	// Expected: each document once, at the position of its last write.
	last := map[string]int{}
	for i, k := range log {
		last[k] = i
	}
	var order []string
	for i, k := range log {
		if last[k] == i {
			order = append(order, k)
		}
	}

	items, _ := drain(t, s, c, "", 5)
	requireLatest(t, s, c, items)
	var got []string
	for _, it := range items {
		got = append(got, key(it.PartitionKey, it.ID))
	}
	require.ElementsMatch(t, order, got, "each changed document exactly once")
	// Cosmos orders its feed within a partition key only: check that.
	for p := range 4 {
		pk := fmt.Sprintf("p%d", p)
		inPK := func(ks []string) []string {
			var out []string
			for _, k := range ks {
				if p, _ := splitKey(k); p == pk {
					out = append(out, k)
				}
			}
			return out
		}
		require.Equal(t, inPK(order), inPK(got), "feed order within partition %s", pk)
	}
}

func testChangeFeedContainerIsolation(t *testing.T, s store.Store) {
	for _, id := range []string{"j1", "j2"} {
		mustCreate(t, s, store.Jobs, "p1", id, doc(t, store.Jobs, "p1", id, fields{"kind": "job"}))
		mustCreate(t, s, store.Runs, "p1", id, doc(t, store.Runs, "p1", id, fields{"kind": "run"}))
	}
	jobs, jobsCont := drain(t, s, store.Jobs, "", 100)
	require.Equal(t, []string{"j1", "j2"}, feedIDs(jobs))
	for _, it := range jobs {
		require.Equal(t, "job", decode(t, it.Body)["kind"])
	}
	runs, _ := drain(t, s, store.Runs, "", 100)
	require.Equal(t, []string{"j1", "j2"}, feedIDs(runs))
	for _, it := range runs {
		require.Equal(t, "run", decode(t, it.Body)["kind"])
	}
	events, _ := drain(t, s, store.Events, "", 100)
	require.Empty(t, events)

	// Later writes to another container leave this feed empty.
	mustCreate(t, s, store.Runs, "p1", "j3", doc(t, store.Runs, "p1", "j3", nil))
	_, err := s.Upsert(t.Context(), store.Runs, "p1", "j1", doc(t, store.Runs, "p1", "j1", fields{"kind": "run2"}))
	require.NoError(t, err)
	jobs, _ = drain(t, s, store.Jobs, jobsCont, 100)
	require.Empty(t, jobs, "another container's changes appeared in this feed")
}

// testChangeFeedTail reads the feed while writers write. A reader that
// checkpoints past a change that commits later (a revision handed out
// before an earlier one committed) would miss it for good: the final state
// it reconstructs must equal the store's.
func testChangeFeedTail(t *testing.T, s store.Store) {
	writers, writes := 6, 40
	if testing.Short() {
		writes = 15
	}
	const c = store.Jobs
	done := make(chan struct{})
	errs := newFirstErr()
	type seen struct {
		n   float64
		rev string
	}
	last := map[string]seen{}
	var tail sync.WaitGroup
	tail.Go(func() {
		cont := ""
		delivered := 0
		for !errs.failed() {
			var finished bool
			select {
			case <-done:
				finished = true // observed before the read: an empty page now means drained
			default:
			}
			page, err := s.ReadChanges(context.Background(), c, cont, 7)
			if err != nil {
				errs.set("read changes: %v", err)
				return
			}
			if page.Continuation != "" {
				cont = page.Continuation
			}
			// Every item is a distinct write's latest version, so there can
			// never be more items than writes (this also ends a feed that
			// never drains).
			if delivered += len(page.Items); delivered > writers*writes {
				errs.set("feed delivered %d items for %d writes", delivered, writers*writes)
				return
			}
			for _, it := range page.Items {
				var b struct{ N float64 }
				if err := json.Unmarshal(it.Body, &b); err != nil {
					errs.set("feed body %s: %v", it.Body, err)
					return
				}
				k := key(it.PartitionKey, it.ID)
				if prev, ok := last[k]; ok && b.N < prev.n {
					errs.set("feed went back in time for %s: n %v after %v", k, b.N, prev.n)
					return
				}
				last[k] = seen{n: b.N, rev: it.Rev}
			}
			if len(page.Items) == 0 {
				if finished {
					return
				}
				runtime.Gosched()
			}
		}
	})

	var wg sync.WaitGroup
	for w := range writers {
		pk := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for i := range writes {
				id := fmt.Sprintf("d%d", i%3)
				body := doc(t, c, pk, id, fields{"n": i})
				var err error
				if i < 3 {
					_, err = s.Create(context.Background(), c, pk, id, body)
				} else {
					_, err = s.Upsert(context.Background(), c, pk, id, body)
				}
				if err != nil {
					errs.set("write %s/%s: %v", pk, id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	tail.Wait()
	errs.check(t)

	require.Len(t, last, writers*3)
	for w := range writers {
		pk := fmt.Sprintf("w%d", w)
		for d := range 3 {
			id := fmt.Sprintf("d%d", d)
			cur := mustRead(t, s, c, pk, id)
			got := last[key(pk, id)]
			require.Equal(t, cur.Rev, got.rev, "tailing reader missed the last change of %s/%s", pk, id)
			require.Equal(t, decode(t, cur.Body)["n"], got.n)
		}
	}
}

// testChangesHead: a reader starting at the head sees every change made
// after it and none of the history, except, on a backend that starts by
// time, changes of the same instant (at least once).
func testChangesHead(t *testing.T, s store.Store) {
	ctx := t.Context()
	const c, pk = store.Events, "j1"
	for _, id := range []string{"old1", "old2"} {
		mustCreate(t, s, c, pk, id, doc(t, c, pk, id, nil))
	}
	head, err := s.ChangesHead(ctx, c)
	require.NoError(t, err)
	require.NotEmpty(t, head)
	for _, id := range []string{"new1", "new2"} {
		mustCreate(t, s, c, pk, id, doc(t, c, pk, id, nil))
	}
	items, _ := drain(t, s, c, head, 10)
	ids := feedIDs(items)
	require.Subset(t, ids, []string{"new1", "new2"}, "a change after the head is missing")
	require.Subset(t, []string{"old1", "old2", "new1", "new2"}, ids)
	require.Less(t, slices.Index(ids, "new1"), slices.Index(ids, "new2"))

	_, err = s.ChangesHead(ctx, "no_such_container")
	require.Error(t, err)
}

// testChangeFeedBadContinuation: a continuation the backend never issued
// is ErrBadContinuation (clients hand them back), not an outage.
func testChangeFeedBadContinuation(t *testing.T, s store.Store) {
	for _, cont := range []string{"garbage!", "-5", "eyJ2Ijo5fQ"} {
		_, err := s.ReadChanges(t.Context(), store.Events, cont, 10)
		require.ErrorIs(t, err, store.ErrBadContinuation, "continuation %q", cont)
	}
}

// testChangeFeedCorruptContinuation: a continuation the backend issued,
// altered inside (truncated, a byte flipped, a part replaced by garbage or
// by the same part of another container's continuation), is either read or
// refused as ErrBadContinuation: never an outage or an unclassified error,
// which the API would answer 500 and a cache would never recover from.
func testChangeFeedCorruptContinuation(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, store.Events, "j1", "e1", doc(t, store.Events, "j1", "e1", nil))
	mustCreate(t, s, store.Runs, "j1", "r1", doc(t, store.Runs, "j1", "r1", nil))
	_, events := drain(t, s, store.Events, "", 10)
	_, runs := drain(t, s, store.Runs, "", 10)
	variants := corrupted(events, runs)
	require.NotEmpty(t, variants)
	for name, cont := range variants {
		_, err := s.ReadChanges(ctx, store.Events, cont, 10)
		if err != nil {
			require.ErrorIs(t, err, store.ErrBadContinuation, "%s: %s", name, cont)
		}
	}
}
