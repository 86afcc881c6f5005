package rules

import (
	"container/list"
	"sync"
)

// DefaultCacheSize is used by NewCache for a non-positive size.
const DefaultCacheSize = 1024

type cacheKey struct {
	webhookID string
	version   int64
}

type cacheEntry struct {
	key   cacheKey
	ready chan struct{} // closed once prog/err are set
	prog  *Program
	err   error
}

// Cache keeps compiled Programs keyed by (webhook id, rules version), so a
// saved list is compiled once and not per delivery. It is a bounded LRU and
// safe for concurrent use; concurrent misses on one key share a single build.
type Cache struct {
	mu      sync.Mutex
	size    int
	order   *list.List // front = most recently used; values are *cacheEntry
	entries map[cacheKey]*list.Element
}

// NewCache returns a cache holding at most size programs.
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Cache{size: size, order: list.New(), entries: make(map[cacheKey]*list.Element)}
}

// Get returns the program for (webhookID, version), calling build on a miss.
// A failed build is not cached: the error goes to every caller waiting on
// that build, and the next Get tries again.
func (c *Cache) Get(webhookID string, version int64, build func() (*Program, error)) (*Program, error) {
	k := cacheKey{webhookID, version}
	c.mu.Lock()
	if el, ok := c.entries[k]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		<-e.ready
		return e.prog, e.err
	}
	e := &cacheEntry{key: k, ready: make(chan struct{})}
	c.entries[k] = c.order.PushFront(e)
	for c.order.Len() > c.size {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).key)
	}
	c.mu.Unlock()

	func() {
		defer func() {
			if r := recover(); r != nil {
				e.prog, e.err = nil, &Error{Code: "internal", Message: "rule compilation failed"}
			}
			if e.err == nil && e.prog == nil {
				e.err = &Error{Code: "internal", Message: "rule compilation returned no program"}
			}
			if e.err != nil {
				c.mu.Lock()
				if el, ok := c.entries[k]; ok && el.Value.(*cacheEntry) == e {
					c.order.Remove(el)
					delete(c.entries, k)
				}
				c.mu.Unlock()
			}
			close(e.ready)
		}()
		e.prog, e.err = build()
	}()
	return e.prog, e.err
}

// Forget drops every cached version of a webhook (e.g. when it is deleted).
func (c *Cache) Forget(webhookID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, el := range c.entries {
		if k.webhookID == webhookID {
			c.order.Remove(el)
			delete(c.entries, k)
		}
	}
}

// Len reports the number of cached entries.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
