package receiver

import (
	"sync"
	"time"
)

// hookCache keeps the webhooks the receiver has read, by ingest token, so that a delivery needs
// one database round trip (switchboard.ingest_if_current) instead of two. It is only a hint: that
// function checks the token and the rules version in the delivery's own transaction and refuses a stale view,
// after which the receiver forgets the entry (see Receiver.ServeHTTP). Entries older than
// hookTTL are read again, and the whole cache is dropped when it reaches hookMax entries, so
// neither memory nor the life of a forgotten secret in it grows without bound.
type hookCache struct {
	mu    sync.Mutex
	hooks map[string]cachedHook
}

type cachedHook struct {
	hook *webhook
	at   time.Time
}

const (
	hookTTL = time.Minute
	hookMax = 4096
)

func (c *hookCache) get(token string, now time.Time) *webhook {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.hooks[token]
	if !ok || now.Sub(e.at) > hookTTL {
		return nil
	}
	return e.hook
}

func (c *hookCache) put(token string, h *webhook, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hooks == nil || len(c.hooks) >= hookMax {
		c.hooks = map[string]cachedHook{}
	}
	c.hooks[token] = cachedHook{hook: h, at: now}
}

func (c *hookCache) forget(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.hooks, token)
}
