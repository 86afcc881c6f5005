package doorbell

// Time-based rings. An expired lease or an elapsed retry window makes a todo claimable (claims
// take it over) without any transaction committing at that moment, so no NOTIFY announces it.
// The bell reads, in one SQL call (switchboard.due_todos and switchboard.next_due), the todos of
// its endpoints that time made claimable since the last read and the earliest such moment still
// to come before the next poll (later ones are read then), and arms one timer for that moment. It reads again when the timer fires, after a
// local tool call that may have set a lease or a retry (Session.SetLease), when an endpoint gets
// its first session here, and every duePoll otherwise (leases and retries set through another
// server process or psql); never more than once per dueMinGap. What it finds is announced like
// any ready todo (a waiting call, else one session) and remembered by attempt, so that the
// requeue that later makes the todo pending (a claim's takeover, the reaper) does not ring it
// again; a claim in between raises the attempt.

import (
	"context"
	"sync/atomic"
	"time"

	"switchboard/server/store"
)

const (
	dueMinGap = time.Second          // at most one time-based read per second per process
	duePoll   = 5 * time.Second      // fallback read interval while endpoints have sessions here
	dueKeep   = 2 * time.Minute      // how long a time-based ring is remembered (reaper interval and more)
	dueLimit  = 256                  // rows per read
	dueEarly  = 5 * time.Millisecond // the timer fires this much after the moment read
)

// dueMark is a time-based ring: the todo's attempt then, and when it rang (local clock).
type dueMark struct {
	attempt int
	at      time.Time
}

type dueState struct {
	timer   *time.Timer
	at      time.Time          // when timer fires (zero: not armed)
	last    time.Time          // when the last read started (local clock)
	cursor  time.Time          // database clock: moments before this were read (zero: the last second)
	seen    map[string]dueMark // todo id → the time-based ring that announced it
	running bool
	dirty   bool        // a hint arrived during a read
	hinted  atomic.Bool // a hint is pending (keeps Session.Called lock-free)
}

// hintDue asks for a time-based read soon (rate-limited).
func (b *Bell) hintDue() {
	if b.due.hinted.Swap(true) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scheduleDueLocked(time.Now())
}

// hintDueLocked is hintDue with b.mu held.
func (b *Bell) hintDueLocked() {
	b.due.hinted.Store(true)
	b.scheduleDueLocked(time.Now())
}

// scheduleDueLocked makes sure a read starts at t (or dueMinGap after the last one) at the
// latest. b.mu must be held.
func (b *Bell) scheduleDueLocked(t time.Time) {
	if b.closed || b.st == nil {
		return
	}
	if b.due.running {
		b.due.dirty = true
		return
	}
	if !b.due.last.IsZero() {
		t = maxTime(t, b.due.last.Add(dueMinGap))
	}
	if !b.due.at.IsZero() && !b.due.at.After(t) {
		return
	}
	if b.due.timer != nil {
		b.due.timer.Stop()
	}
	b.due.at = t
	b.due.timer = time.AfterFunc(time.Until(t), func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.due.at = time.Time{}
		if b.due.running || b.closed {
			return
		}
		b.due.running = true
		if !b.goTracked(b.dueRead) {
			b.due.running = false
		}
	})
}

// dueRead is one time-based read and what follows from it.
func (b *Bell) dueRead() {
	b.mu.Lock()
	ids := make([]string, len(b.list))
	for i, ep := range b.list {
		ids[i] = ep.id
	}
	since := b.due.cursor
	start := time.Now()
	b.due.last = start
	b.due.hinted.Store(false)
	b.due.dirty = false
	b.mu.Unlock()

	var res store.Due
	var err error
	if len(ids) > 0 {
		ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
		// A moment later than duePoll from now is not needed: the next read comes first.
		res, err = b.st.DueTodos(ctx, ids, since, dueLimit, duePoll)
		cancel()
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("doorbell time-based read failed", "endpoints", len(ids), "err", store.Classify(err).Unwrap())
		}
	}
	done := time.Now()

	b.mu.Lock()
	defer b.mu.Unlock()
	b.due.running = false
	if b.closed || len(ids) == 0 {
		return // the next endpoint to attach hints
	}
	next := start.Add(duePoll)
	if err == nil {
		total := 0
		var latest time.Time
		for epID, rows := range res.Rows {
			ep := b.eps[epID]
			total += len(rows)
			if n := len(rows); n > 0 && rows[n-1].ReadyAt.After(latest) {
				latest = rows[n-1].ReadyAt
			}
			if ep == nil {
				continue
			}
			for _, r := range rows {
				if d, ok := b.due.seen[r.ID]; ok && d.attempt == r.Attempt {
					continue
				}
				if b.passLocked(ep, r) {
					b.due.seen[r.ID] = dueMark{attempt: r.Attempt, at: done}
				}
			}
		}
		for id, d := range b.due.seen {
			if done.Sub(d.at) > dueKeep {
				delete(b.due.seen, id)
			}
		}
		// Moments are exact (set by the writing transaction), but one that committed late may
		// show up below the last read's clock: look back a second, the marks dedupe.
		c := res.Now.Add(-cursorSlack)
		full := total == dueLimit
		if full {
			c = latest // read on from the page's last moment
		}
		if c.After(b.due.cursor) {
			b.due.cursor = c
		}
		if !res.Next.IsZero() {
			if t := done.Add(res.Next.Sub(res.Now) + dueEarly); t.Before(next) {
				next = t
			}
		}
		if full {
			next = done
		}
	}
	if b.due.dirty {
		b.due.dirty = false
		next = done
	}
	b.scheduleDueLocked(next)
}

// stopTimersLocked stops the ring-again and time-based timers. b.mu must be held.
func (b *Bell) stopTimersLocked() {
	if b.again.timer != nil {
		b.again.timer.Stop()
	}
	if b.due.timer != nil {
		b.due.timer.Stop()
	}
}
