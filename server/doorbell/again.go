package doorbell

// Ring again. A todo rings one session, but the session it picks may never act on it: a client
// can leave a second session open that holds a GET stream and never reads it (mcp-remote keeps
// such a probe session). So the bell remembers each ring, and a todo still claimable
// ring_again_seconds after its ring went to a session that has made no tool call since is rung
// on the next session of its endpoint in turn (or the same one when it is alone). A session
// that made a tool call since the ring is draining its queue: it is neither rung again for
// the todo nor picked to take it over, since its own claims will reach the todo without another
// prompt in its context. At most againPerWindow todos per endpoint go out again per
// ring_again_seconds, the oldest first; one SQL call checks which of them are still claimable.
// The rings wait in one queue ordered by when they are due, so a check costs the rings that
// are due, not the endpoints with sessions here.

import (
	"container/heap"
	"context"
	"slices"
	"time"

	"switchboard/server/store"
)

const (
	againPerWindow = 3                      // todos rung again per endpoint per ring_again_seconds
	maxRings       = 256                    // rings remembered per endpoint (the oldest are forgotten first)
	againGap       = 200 * time.Millisecond // checks at most this often
)

// ring is one notification queued for a session, remembered until its session answers (makes
// a tool call) or it is rung again.
type ring struct {
	ep   *endpoint
	r    store.Ready
	s    *Session
	at   time.Time // when it was rung
	due  time.Time // when it may go out again: at+ring_again_seconds, later when the endpoint's budget is spent
	gone bool      // replaced by a newer ring of the same todo, forgotten, or its endpoint left
}

// ringQueue is every endpoint's remembered rings, the first due on top (container/heap), so a
// check touches the rings that are due and nothing else.
type ringQueue []*ring

func (q ringQueue) Len() int { return len(q) }
func (q ringQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].at.Before(q[j].at) // the oldest ring of an endpoint first
}
func (q ringQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *ringQueue) Push(x any)   { *q = append(*q, x.(*ring)) }
func (q *ringQueue) Pop() any {
	old := *q
	rg := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return rg
}

type againState struct {
	queue ringQueue
	timer *time.Timer
	at    time.Time // when timer fires (zero: not armed)
	busy  bool      // a check is running
}

// recordRingLocked remembers a ring for ring-again. b.mu must be held.
func (b *Bell) recordRingLocked(ep *endpoint, s *Session, r store.Ready) {
	// A newer ring of the same todo replaces the older one.
	for _, old := range ep.rings {
		if old.r.ID == r.ID {
			forgetLocked(old)
			break
		}
	}
	if len(ep.rings) >= maxRings {
		forgetLocked(ep.rings[0])
	}
	now := time.Now()
	rg := &ring{ep: ep, r: r, s: s, at: now, due: now.Add(b.ringAgain)}
	ep.rings = append(ep.rings, rg)
	heap.Push(&b.again.queue, rg)
	b.armAgainLocked(rg.due)
}

// retimeRingsLocked applies a changed ring_again_seconds to the rings already remembered: one
// rung before the change goes out again at its ring time plus the new value (not later than it
// was due). b.mu must be held.
func (b *Bell) retimeRingsLocked() {
	q := b.again.queue
	for _, rg := range q {
		if d := rg.at.Add(b.ringAgain); d.Before(rg.due) {
			rg.due = d
		}
	}
	heap.Init(&b.again.queue)
	if len(q) > 0 {
		b.armAgainLocked(b.again.queue[0].due)
	}
}

// forgetLocked drops a remembered ring from its endpoint; it leaves the queue when it comes up.
// Bell.mu must be held.
func forgetLocked(rg *ring) {
	rg.gone = true
	if i := slices.Index(rg.ep.rings, rg); i >= 0 {
		rg.ep.rings = slices.Delete(rg.ep.rings, i, i+1)
	}
}

// calledSince reports whether the session made a tool call after t.
func (s *Session) calledSince(t time.Time) bool {
	return s.lastCall.Load() > t.UnixNano()
}

// armAgainLocked makes sure a check runs at t at the latest. b.mu must be held.
func (b *Bell) armAgainLocked(t time.Time) {
	if b.closed || b.again.busy {
		return // a running check re-arms when it ends
	}
	if !b.again.at.IsZero() && !b.again.at.After(t) {
		return
	}
	if b.again.timer != nil {
		b.again.timer.Stop()
	}
	b.again.at = t
	b.again.timer = time.AfterFunc(time.Until(t), func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.again.at = time.Time{}
		if b.again.busy {
			return
		}
		b.again.busy = true
		if !b.goTracked(b.checkAgain) {
			b.again.busy = false
		}
	})
}

// budgetLocked is how many more todos the endpoint may ring again now, besides the picked ones
// of the running check, and when the spent window frees one. b.mu must be held.
func (b *Bell) budgetLocked(ep *endpoint, picked int, now time.Time) (int, time.Time) {
	n := againPerWindow - picked
	for _, t := range ep.againAt {
		if now.Sub(t) < b.ringAgain {
			n--
		}
	}
	var free time.Time
	if k := len(ep.againAt); k > 0 {
		free = ep.againAt[max(0, k-againPerWindow)].Add(b.ringAgain)
	}
	return n, maxTime(free, now.Add(againGap))
}

// checkAgain rings again what is due, then re-arms for the next due ring.
func (b *Bell) checkAgain() {
	now := time.Now()
	b.mu.Lock()
	var due []*ring
	picked := map[*endpoint]int{}
	for q := &b.again.queue; q.Len() > 0 && !(*q)[0].due.After(now); {
		rg := heap.Pop(q).(*ring)
		if rg.gone {
			continue
		}
		if rg.s.calledSince(rg.at) {
			forgetLocked(rg) // draining: its own claims will reach the todo
			continue
		}
		if n, free := b.budgetLocked(rg.ep, picked[rg.ep], now); n <= 0 {
			rg.due = free // the oldest first once the window frees one
			heap.Push(q, rg)
			continue
		}
		forgetLocked(rg)
		picked[rg.ep]++
		due = append(due, rg)
	}
	b.mu.Unlock()

	var claimable map[string]bool
	if len(due) > 0 && b.st != nil {
		ids := make([]string, len(due))
		for i, rg := range due {
			ids[i] = rg.r.ID
		}
		ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
		var err error
		claimable, err = b.st.Claimable(ctx, ids)
		cancel()
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("doorbell ring-again read failed", "todos", len(ids), "err", store.Classify(err).Unwrap())
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	b.again.busy = false
	if b.closed {
		return
	}
	for _, rg := range due {
		ep := rg.ep
		if !claimable[rg.r.ID] || b.eps[ep.id] != ep {
			continue
		}
		if b.wakeLocked(ep, rg.r) {
			continue
		}
		if to := againTarget(ep, rg); to != nil && b.offerLocked(ep, to, rg.r) {
			ep.againAt = append(ep.againAt, now)
			if len(ep.againAt) > againPerWindow {
				ep.againAt = ep.againAt[1:]
			}
			b.m.DoorbellRungAgain.Inc()
		}
	}
	if q := b.again.queue; q.Len() > 0 {
		b.armAgainLocked(maxTime(q[0].due, now.Add(againGap)))
	}
}

// againTarget is the session to ring again: the next one in turn after the one first rung that
// has an open stream and made no tool call since that ring; the first one itself when it is
// the only session with a stream. nil when every other session is draining.
func againTarget(ep *endpoint, rg *ring) *Session {
	n := len(ep.sessions)
	start := 0
	for i, s := range ep.sessions {
		if s == rg.s {
			start = i + 1
			break
		}
	}
	withStream := 0
	for i := 0; i < n; i++ {
		s := ep.sessions[(start+i)%n]
		if s.closed || s.streams == 0 {
			continue
		}
		withStream++
		if s != rg.s && !s.calledSince(rg.at) {
			return s
		}
	}
	if withStream == 1 && !rg.s.closed && rg.s.streams > 0 {
		return rg.s
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
