package doorbell

// Waiting claim_next calls (wait_seconds). A waiting call holds no database connection: it
// parks on a Waiter, which the bell wakes when it finds a todo the call could claim — the same
// reads that ring sessions (a new or requeued todo, a time-based ring). Each ready todo wakes
// ONE waiting call of its endpoint, the longest-waiting one whose queue filter matches, and is
// then not rung on any session: the call that was woken announces it by returning it. The woken
// call tries the claim once (one SQL call); when it lost the race it waits again in its old
// place for the rest of its time, and when its claim took another todo the wake passes on to
// the next waiting call (or rings a session), so no ready todo is left unannounced.

import (
	"errors"
	"slices"
	"time"

	"switchboard/server/store"
)

const (
	// DefaultMaxWaiting caps the waiting calls of one endpoint in one process (Config.MaxWaiting);
	// past it a call answers at once (Wait returns ErrTooManyWaiting).
	DefaultMaxWaiting = 16
	defaultWaitMax    = 50 * time.Second
	defaultRingAgain  = 15 * time.Second
)

var (
	// ErrTooManyWaiting: Config.MaxWaiting calls of the endpoint already wait here.
	ErrTooManyWaiting = errors.New("too many waiting calls")
	// ErrWaitEnded: the session closed or the server is shutting down.
	ErrWaitEnded = errors.New("wait ended")
	// ErrRevoked: the endpoint was revoked.
	ErrRevoked = errors.New("endpoint revoked")
)

type waitState struct {
	seq      uint64 // arrival order
	draining bool   // shutting down: no new waits
}

// Waiter is one waiting call. Use: w, err := s.Wait(queue); defer w.Leave(); then loop
// { w.Begin(); claim; w.After(id); select on w.Woken(), w.Ended(), the deadline }.
type Waiter struct {
	b      *Bell
	ep     *endpoint
	s      *Session
	seq    uint64
	queue  string // "" any granted queue
	wake   chan struct{}
	end    chan struct{}
	reason error // why it ended; guarded by b.mu

	queued bool         // in ep.waiters
	woken  *store.Ready // the todo that woke it, not yet tried
	taken  *store.Ready // the todo the claim in progress is for
	left   bool         // Leave was called
}

// WaitMax is the longest wait a call may ask for (claim_wait_max_seconds; 0: waiting is off).
func (b *Bell) WaitMax() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waitMax
}

// Wait registers a waiting call of the session, for todos of queue ("" any). Call it before
// the first claim attempt, so that nothing committed after that attempt goes unnoticed.
func (s *Session) Wait(queue string) (*Waiter, error) {
	b := s.bell
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.closed || b.closed || b.waits.draining {
		return nil, ErrWaitEnded
	}
	ep := b.eps[s.endpoint]
	if ep == nil {
		return nil, ErrWaitEnded
	}
	if len(ep.allWaiters) >= b.cfg.MaxWaiting {
		return nil, ErrTooManyWaiting
	}
	b.waits.seq++
	w := &Waiter{b: b, ep: ep, s: s, seq: b.waits.seq, queue: queue,
		wake: make(chan struct{}, 1), end: make(chan struct{})}
	ep.allWaiters = append(ep.allWaiters, w)
	b.m.DoorbellWaiting.Inc()
	w.queueLocked()
	return w, nil
}

// Woken receives when a todo the call could claim became ready.
func (w *Waiter) Woken() <-chan struct{} { return w.wake }

// Ended is closed when the wait must end: Err says why.
func (w *Waiter) Ended() <-chan struct{} { return w.end }

// Err is ErrWaitEnded or ErrRevoked once Ended is closed, else nil.
func (w *Waiter) Err() error {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.reason
}

// Begin is called right before a claim attempt: the wake it answers is consumed.
func (w *Waiter) Begin() {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	select {
	case <-w.wake:
	default:
	}
	if w.woken != nil {
		w.taken, w.woken = w.woken, nil
	}
}

// After reports the attempt's outcome: the id of the todo it claimed, "" for none. With none,
// the call waits again in its place; a wake for another todo than the one claimed passes on.
func (w *Waiter) After(claimed string) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := w.taken; t != nil {
		w.taken = nil
		// Claimed nothing: the todo that woke it was taken by someone else (the claim ran
		// after it was found ready). Claimed another one (an older todo): this one is still
		// there for the next call.
		if claimed != "" && claimed != t.ID {
			b.passLocked(w.ep, *t)
		}
	}
	if claimed == "" && !w.left && w.woken == nil && !w.ended() {
		w.queueLocked()
	}
}

// Leave ends the wait (idempotent). A wake not yet tried passes on.
func (w *Waiter) Leave() {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.left {
		return
	}
	w.left = true
	w.unqueueLocked()
	if i := slices.Index(w.ep.allWaiters, w); i >= 0 {
		w.ep.allWaiters = slices.Delete(w.ep.allWaiters, i, i+1)
	}
	b.m.DoorbellWaiting.Dec()
	for _, t := range []*store.Ready{w.woken, w.taken} {
		if t != nil && !b.closed {
			b.passLocked(w.ep, *t)
		}
	}
	w.woken, w.taken = nil, nil
}

func (w *Waiter) ended() bool {
	select {
	case <-w.end:
		return true
	default:
		return false
	}
}

// queueLocked puts the waiter back in arrival order. b.mu must be held.
func (w *Waiter) queueLocked() {
	if w.queued {
		return
	}
	ws := w.ep.waiters
	i, _ := slices.BinarySearchFunc(ws, w.seq, func(x *Waiter, seq uint64) int {
		switch {
		case x.seq < seq:
			return -1
		case x.seq > seq:
			return 1
		}
		return 0
	})
	w.ep.waiters = slices.Insert(ws, i, w)
	w.queued = true
}

func (w *Waiter) unqueueLocked() {
	if !w.queued {
		return
	}
	if i := slices.Index(w.ep.waiters, w); i >= 0 {
		w.ep.waiters = slices.Delete(w.ep.waiters, i, i+1)
	}
	w.queued = false
}

// wakeLocked hands a ready todo to the longest-waiting call that could claim it; false when
// there is none. b.mu must be held.
func (b *Bell) wakeLocked(ep *endpoint, r store.Ready) bool {
	for _, w := range ep.waiters {
		if w.queue != "" && w.queue != r.Queue {
			continue
		}
		w.unqueueLocked()
		t := r
		w.woken = &t
		select {
		case w.wake <- struct{}{}:
		default:
		}
		return true
	}
	return false
}

// passLocked announces a ready todo: to a waiting call, else by ringing a session. It reports
// whether someone was told (see offerLocked). b.mu must be held.
func (b *Bell) passLocked(ep *endpoint, r store.Ready) bool {
	if b.onReady != nil {
		b.onReady(ep.id, r.Queue) // resource subscribers hear of every one (coalesced there)
	}
	if b.wakeLocked(ep, r) {
		return true
	}
	return b.offerLocked(ep, nil, r)
}

// endWaitersLocked ends the waiting calls of ep (of session s only, when set). b.mu must be held.
func (b *Bell) endWaitersLocked(ep *endpoint, s *Session, reason error) {
	for _, w := range ep.allWaiters {
		if s == nil || w.s == s {
			w.unqueueLocked()
			w.endLocked(reason)
		}
	}
}

func (w *Waiter) endLocked(reason error) {
	if w.reason == nil {
		w.reason = reason
		close(w.end)
	}
}

// EndWaits answers every waiting call at once and refuses new waits: the start of a graceful
// shutdown, so that in-flight requests can finish.
func (b *Bell) EndWaits() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waits.draining = true
	for _, ep := range b.eps {
		b.endWaitersLocked(ep, nil, ErrWaitEnded)
	}
}

// Waiting is the number of waiting calls of an endpoint here.
func (b *Bell) Waiting(endpointID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ep := b.eps[endpointID]; ep != nil {
		return len(ep.allWaiters)
	}
	return 0
}

// Revoked ends the waiting calls of an endpoint whose credential was revoked.
func (b *Bell) Revoked(endpointID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ep := b.eps[endpointID]; ep != nil {
		b.endWaitersLocked(ep, nil, ErrRevoked)
	}
}

// Called records a tool call of the session: a session that makes calls is draining its queue
// (again.go). It is on every tool call's path: one atomic store.
func (s *Session) Called() {
	if s == nil {
		return
	}
	s.lastCall.Store(time.Now().UnixNano())
}

// SetLease tells the time-based reads (due.go) that a call of the session may have set a lease
// or a retry window (claim, claim_next, fail, or next on complete/release): one atomic swap,
// and a lock only once per read.
func (s *Session) SetLease() {
	if s == nil {
		return
	}
	s.bell.hintDue()
}
