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

import (
	"context"
	"time"

	"switchboard/server/store"
)

const (
	againPerWindow = 3                      // todos rung again per endpoint per ring_again_seconds
	maxRings       = 256                    // rings remembered per endpoint (the oldest are forgotten first)
	againGap       = 200 * time.Millisecond // checks (a scan of the remembered rings) at most this often
)

// ring is one notification queued for a session.
type ring struct {
	r  store.Ready
	s  *Session
	at time.Time
}

type againState struct {
	timer *time.Timer
	at    time.Time // when timer fires (zero: not armed)
	busy  bool      // a check is running
}

// recordRingLocked remembers a ring for ring-again. b.mu must be held.
func (b *Bell) recordRingLocked(ep *endpoint, s *Session, r store.Ready) {
	// A newer ring of the same todo replaces the older one.
	for i := range ep.rings {
		if ep.rings[i].r.ID == r.ID {
			ep.rings = append(ep.rings[:i], ep.rings[i+1:]...)
			break
		}
	}
	if len(ep.rings) >= maxRings {
		ep.rings = ep.rings[1:]
	}
	now := time.Now()
	ep.rings = append(ep.rings, ring{r: r, s: s, at: now})
	b.armAgainLocked(now.Add(b.ringAgain))
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

// candidate is a ring due to go out again.
type candidate struct {
	ep *endpoint
	rg ring
}

// checkAgain rings again what is due, then re-arms for the next due ring.
func (b *Bell) checkAgain() {
	now := time.Now()
	b.mu.Lock()
	var due []candidate
	for _, ep := range b.eps {
		budget := againPerWindow
		for _, t := range ep.againAt {
			if now.Sub(t) < b.ringAgain {
				budget--
			}
		}
		keep := ep.rings[:0]
		for _, rg := range ep.rings {
			switch {
			case rg.s.calledSince(rg.at):
				// Draining: its own claims will reach the todo.
			case now.Sub(rg.at) >= b.ringAgain && budget > 0:
				due = append(due, candidate{ep, rg})
				budget--
			default:
				keep = append(keep, rg)
			}
		}
		clear(ep.rings[len(keep):])
		ep.rings = keep
	}
	b.mu.Unlock()

	var claimable map[string]bool
	if len(due) > 0 && b.st != nil {
		ids := make([]string, len(due))
		for i, c := range due {
			ids[i] = c.rg.r.ID
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
	for _, c := range due {
		if !claimable[c.rg.r.ID] || b.eps[c.ep.id] != c.ep {
			continue
		}
		if b.wakeLocked(c.ep, c.rg.r) {
			continue
		}
		if to := againTarget(c.ep, c.rg); to != nil && b.offerLocked(c.ep, to, c.rg.r) {
			c.ep.againAt = append(c.ep.againAt, now)
			if len(c.ep.againAt) > againPerWindow {
				c.ep.againAt = c.ep.againAt[1:]
			}
			b.m.DoorbellRungAgain.Inc()
		}
	}
	// Re-arm for the oldest ring left (or the end of a spent window).
	var next time.Time
	for _, ep := range b.eps {
		if len(ep.rings) == 0 {
			continue
		}
		t := ep.rings[0].at.Add(b.ringAgain)
		if n := len(ep.againAt); n >= againPerWindow {
			t = maxTime(t, ep.againAt[n-againPerWindow].Add(b.ringAgain))
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if !next.IsZero() {
		b.armAgainLocked(maxTime(next, now.Add(againGap)))
	}
}

// againTarget is the session to ring again: the next one in turn after the one first rung that
// has an open stream and made no tool call since that ring; the first one itself when it is
// the only session with a stream. nil when every other session is draining.
func againTarget(ep *endpoint, rg ring) *Session {
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
