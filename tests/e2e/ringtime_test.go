package e2e

// Rings that reach a working session (ring_again_seconds) and rings when time makes a todo
// claimable (an expired lease, an elapsed retry window), with the reaper off.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// A second session that holds a GET stream and never calls a tool (mcp-remote's probe session)
// does not keep the working session from being rung for every todo: what round robin gives the
// probe is rung again on the working session after ring_again_seconds.
func TestRingAgainReachesTheWorkingSession(t *testing.T) {
	e := newEnv(t)
	e.exec(`UPDATE switchboard.settings SET value = 2 WHERE key = 'ring_again_seconds'`)
	in := e.startServer() // reads the setting as its listener connects
	ep := e.vend("ann", []string{"inbox"}, nil)
	active := in.connect(t, ep, nil)
	probe := in.connect(t, ep, nil)
	for i := 0; i < 6; i++ {
		pushed := time.Now()
		id := e.push(ep, "inbox", fmt.Sprint("todo ", i))
		ctx, cancel := context.WithTimeout(context.Background(), soon)
		n, err := active.WaitNotification(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("todo %d: the active session was not rung within %v", i, soon)
		}
		t.Logf("todo %d rang the active session %v after its push", i, n.At.Sub(pushed))
		call[todo](t, active, "claim", map[string]any{"id": id})
		call[todo](t, active, "complete", map[string]any{"id": id})
	}
	// Counted by the server, not guessed from how late a ring came (a loaded machine is late).
	again := metricValue(t, in.base, "switchboard_doorbell_rung_again_total")
	if again == 0 || len(probe.Notifications()) == 0 {
		t.Fatalf("rung again %v times, probe rung %d times: round-robin never picked the probe?", again, len(probe.Notifications()))
	}
}

// A session alone is rung again for a todo it did nothing about, and not once it made a call.
func TestRingAgainAloneAndDraining(t *testing.T) {
	e := newEnv(t)
	e.exec(`UPDATE switchboard.settings SET value = 1 WHERE key = 'ring_again_seconds'`)
	in := e.startServer()
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := in.connect(t, ep, nil)
	id := e.push(ep, "inbox", "ignored")
	first, err := c.WaitNotification(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.WaitNotification(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	// Not before ring_again_seconds; late only by the machine's load (the default would be 15 s).
	if d := second.At.Sub(first.At); d < 900*time.Millisecond || d > soon {
		t.Fatalf("rung again after %v, want about 1 s", d)
	}
	// A tool call since the ring: the session is draining, no more rings for it.
	call[json.RawMessage](t, c, "list_todos", nil)
	select {
	case n := <-c.Notifications():
		t.Fatalf("rung again while draining: %v", n.Meta)
	case <-time.After(2500 * time.Millisecond):
	}
}

func (e *env) moment(sql, id string) time.Time {
	e.t.Helper()
	var at time.Time
	if err := e.pool.QueryRow(context.Background(), sql, id).Scan(&at); err != nil {
		e.t.Fatal(err)
	}
	return at
}

// With the reaper off, a failed todo rings within 1 s of its next_retry_at.
func TestDoorbellRingsWhenRetryWindowElapses(t *testing.T) {
	e := newEnv(t) // ReaperInterval 0
	e.exec(`UPDATE switchboard.settings SET value = 2 WHERE key = 'backoff_base_seconds'`)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	id := e.push(ep, "inbox", "flaky")
	if _, err := c.WaitNotification(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	call[todo](t, c, "claim", map[string]any{"id": id})
	call[todo](t, c, "fail", map[string]any{"id": id, "result": map[string]any{"error": "try again"}})
	retryAt := e.moment(`SELECT next_retry_at FROM switchboard.todos WHERE id = $1`, id)
	n, err := c.WaitNotification(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	lag := n.At.Sub(retryAt)
	t.Logf("rang %v after next_retry_at", lag)
	if lag < 0 || lag > soon { // within 1 s on a quiet machine (contract §10); never with no ring
		t.Fatalf("rang %v after next_retry_at", lag)
	}
	if got := call[claimNext](t, c, "claim_next", nil); got.Todo == nil || got.Todo.ID != id {
		t.Fatalf("claim_next %+v", got)
	}
}

// With the reaper off, an expired lease rings within 1 s of its expiry, once: the requeue
// that follows (here the reaper, run by hand) does not ring it again.
func TestDoorbellRingsWhenLeaseExpires(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	id := e.push(ep, "inbox", "abandoned")
	if _, err := c.WaitNotification(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	call[todo](t, c, "claim", map[string]any{"id": id, "lease_ttl_seconds": 2})
	expires := e.moment(`SELECT lease_expires_at FROM switchboard.todos WHERE id = $1`, id)
	n, err := c.WaitNotification(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	lag := n.At.Sub(expires)
	t.Logf("rang %v after lease_expires_at", lag)
	if lag < 0 || lag > soon { // within 1 s on a quiet machine (contract §10); never with no ring
		t.Fatalf("rang %v after the lease expired", lag)
	}
	e.exec(`SELECT switchboard.reap()`)
	if e.state(id) != "pending" {
		t.Fatalf("state %s after reap", e.state(id))
	}
	select {
	case n := <-c.Notifications():
		t.Fatalf("rang again after the requeue: %v", n.Meta)
	case <-time.After(500 * time.Millisecond):
	}
}

// A waiting claim_next is woken by a lease that expires.
func TestClaimWaitWokenByExpiredLease(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	holder := e.connect(t, ep, &agentclientOptionsNoStream)
	waiter := e.connect(t, ep, &agentclientOptionsNoStream)
	id := e.push(ep, "inbox", "abandoned")
	call[todo](t, holder, "claim", map[string]any{"id": id, "lease_ttl_seconds": 2})
	expires := e.moment(`SELECT lease_expires_at FROM switchboard.todos WHERE id = $1`, id)
	got := call[waitAnswer](t, waiter, "claim_next", map[string]any{"wait_seconds": 5})
	lag := time.Since(expires)
	if got.Todo == nil || got.Todo.ID != id || got.Todo.Attempt != 2 {
		t.Fatalf("answer %+v", got)
	}
	t.Logf("claimed %v after the lease expired", lag)
	if lag > soon { // within 1 s on a quiet machine; the wait would run to its end unwoken
		t.Fatalf("claimed %v after the lease expired", lag)
	}
}

// At most 3 todos per endpoint go out again per window, the oldest first.
func TestRingAgainAtMostThreePerWindow(t *testing.T) {
	e := newEnv(t)
	// Windows far apart, so that a loaded machine, which only makes rings late, cannot blur them.
	const again = 5 * time.Second
	e.exec(`UPDATE switchboard.settings SET value = 5 WHERE key = 'ring_again_seconds'`)
	in := e.startServer()
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := in.connect(t, ep, nil)
	e.exec(`SELECT switchboard.create_todo($1, 'inbox', 'batch ' || i) FROM generate_series(1, 5) i`, ep.ID)
	var firsts, agains []string // a todo's first ring, and its rings after that
	rung := map[string]bool{}
	deadline := time.After(again + soon)
	for len(firsts) < 5 || len(agains) < 3 {
		select {
		case n := <-c.Notifications():
			if id := n.Meta["todo_id"]; rung[id] {
				agains = append(agains, id)
			} else {
				rung[id] = true
				firsts = append(firsts, id)
			}
		case <-deadline:
			t.Fatalf("rings: %d first, %d again (want 5 and 3)", len(firsts), len(agains))
		}
	}
	// The other two go out again a whole ring_again_seconds after these three.
	select {
	case n := <-c.Notifications():
		t.Fatalf("a fourth ring again within the window: %v", n.Meta)
	case <-time.After(again / 2):
	}
	if fmt.Sprint(agains) != fmt.Sprint(firsts[:3]) {
		t.Fatalf("first rings %v, again %v: want the 3 oldest again", firsts, agains)
	}
}

// A waiting call on one server process is woken by a todo pushed anywhere.
func TestClaimWaitAcrossServers(t *testing.T) {
	e := newEnv(t)
	other := e.startServer()
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := other.connect(t, ep, &agentclientOptionsNoStream)
	done := make(chan waitAnswer, 1)
	go func() {
		var w waitAnswer
		if err := c.CallInto(ctxT(t), "claim_next", map[string]any{"wait_seconds": 5}, &w); err != nil {
			t.Error(err)
		}
		done <- w
	}()
	other.waitingAt(t, 1)
	id := e.push(ep, "inbox", "from elsewhere")
	select {
	case w := <-done:
		if w.Todo == nil || w.Todo.ID != id {
			t.Fatalf("answer %+v", w)
		}
	case <-time.After(soon):
		t.Fatal("the waiting call on the other server was not woken")
	}
}
