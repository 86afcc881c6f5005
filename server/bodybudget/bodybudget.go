// Package bodybudget bounds what request bodies may cost the server: a budget of body bytes
// held at once across requests (the webhook receiver's), and a refusal that lets a client still
// writing an unwanted body read its answer instead of a connection reset (the receiver's and
// the MCP handler's).
package bodybudget

import (
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"
)

// Linger bounds how long, and how much, Refuse reads of a body it is throwing away, like
// nginx's lingering_timeout: long enough for a sender to finish writing a few MiB and read the
// refusal, short enough that holding connections open this way costs an attacker as much as us.
const (
	LingerTimeout = 5 * time.Second
	LingerMax     = 64 << 20
)

// Default is the default for body bytes in flight across the receiver.
const Default = 64 << 20

// Budget counts body bytes being held by requests in flight. Acquire before reading a body,
// Release when the request is done with it. When the budget drains after large bodies, the
// memory they took is handed back to the operating system (see Release).
type Budget struct {
	max     int64
	used    atomic.Int64
	since   atomic.Int64 // bytes released since the last hand-back
	pending atomic.Bool
}

// New makes a budget of max bytes (max <= 0: Default).
func New(max int64) *Budget {
	if max <= 0 {
		max = Default
	}
	return &Budget{max: max}
}

// Max is the budget's size in bytes.
func (b *Budget) Max() int64 { return b.max }

// InUse is the number of bytes held now.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Acquire reserves n bytes; false when they do not fit.
func (b *Budget) Acquire(n int64) bool {
	for {
		cur := b.used.Load()
		if cur+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// handBackAfter is how many released bytes make it worth returning memory to the OS once the
// budget is idle: a burst of big deliveries leaves a heap of garbage that, with the server's
// GOGC=400, would otherwise sit in RSS until the next forced collection (2 min).
const handBackAfter = 8 << 20

// Release returns n bytes reserved by Acquire.
func (b *Budget) Release(n int64) {
	left := b.used.Add(-n)
	if b.since.Add(n) < handBackAfter || left != 0 || !b.pending.CompareAndSwap(false, true) {
		return
	}
	// Shortly after, if the budget is still idle: a burst that goes on keeps its memory.
	time.AfterFunc(time.Second, func() {
		defer b.pending.Store(false)
		if b.used.Load() == 0 {
			b.since.Store(0)
			// Twice: buffers parked in a sync.Pool (pgx keeps its large message buffers in
			// one) survive the first collection as its victim cache and go in the second.
			debug.FreeOSMemory()
			debug.FreeOSMemory()
		}
	})
}

// Refuse answers a request whose body will not be read (write writes the answer), then reads
// and discards what the client still sends, for at most LingerTimeout and LingerMax bytes,
// before the connection closes. Without this, a client still writing a large body gets a
// reset instead of the answer. body must be the request's own body (not a MaxBytesReader).
func Refuse(w http.ResponseWriter, body io.Reader, write func()) {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // lets the handler read the body after answering
	w.Header().Set("Connection", "close")
	write()
	_ = rc.Flush()
	if body == nil || body == http.NoBody {
		return
	}
	_ = rc.SetReadDeadline(time.Now().Add(LingerTimeout))
	_, _ = io.CopyN(io.Discard, body, LingerMax)
}

// RetryAfter sets Retry-After to whole seconds.
func RetryAfter(w http.ResponseWriter, d time.Duration) {
	s := int64((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(max(s, 1), 10))
}
