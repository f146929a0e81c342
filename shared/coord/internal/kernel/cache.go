package kernel

import (
	"container/list"
	"sync"

	"github.com/gigafactory/fleet/shared/store"
)

// ItemCache remembers the last version of documents this process wrote or
// read for writing, so the next CAS can skip a read. It is only ever an
// optimisation: a stale entry fails its CAS with ErrPrecondition and the
// caller re-reads, so correctness never depends on it.
type ItemCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recent
	items map[cacheKey]*list.Element
}

type cacheKey struct{ pk, id string }

type cacheEntry struct {
	key  cacheKey
	item store.Item
}

func NewItemCache(max int) *ItemCache {
	return &ItemCache{max: max, order: list.New(), items: make(map[cacheKey]*list.Element)}
}

func (c *ItemCache) Get(pk, id string) (store.Item, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[cacheKey{pk, id}]
	if !ok {
		return store.Item{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cacheEntry).item, true
}

func (c *ItemCache) Put(pk, id string, it store.Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{pk, id}
	if e, ok := c.items[k]; ok {
		e.Value.(*cacheEntry).item = it
		c.order.MoveToFront(e)
		return
	}
	c.items[k] = c.order.PushFront(&cacheEntry{key: k, item: it})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
}

// PutIfAbsent stores it unless the document is already cached: a copy this
// process wrote or read for writing is at least as new as one a change-feed
// batch carried (which may be a retried, older batch).
func (c *ItemCache) PutIfAbsent(pk, id string, it store.Item) {
	c.mu.Lock()
	_, ok := c.items[cacheKey{pk, id}]
	c.mu.Unlock()
	if !ok {
		c.Put(pk, id, it)
	}
}

func (c *ItemCache) Drop(pk, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[cacheKey{pk, id}]; ok {
		c.order.Remove(e)
		delete(c.items, cacheKey{pk, id})
	}
}
