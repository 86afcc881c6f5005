package e2e

import (
	"context"
	"testing"
	"time"
)

// A redrive (by id, then by queue) rings the agent's session through the doorbell, and the
// redriven todos are claimable again with a fresh attempt budget; a cancelled todo is not.
func TestRedriveRingsTheSession(t *testing.T) {
	e := newEnv(t)
	e.exec(`UPDATE switchboard.settings SET value = 0 WHERE key = 'doorbell_window_ms'`)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	dead := func(title string) string {
		id := e.push(ep, "inbox", title)
		e.exec(`UPDATE switchboard.todos SET max_attempts = 1 WHERE id = $1`, id)
		if got := call[todo](t, c, "claim", map[string]any{"id": id}); got.State != "claimed" {
			t.Fatalf("claim %s: %+v", id, got)
		}
		if got := call[todo](t, c, "fail", map[string]any{"id": id}); !got.DeadLetter {
			t.Fatalf("fail %s: %+v", id, got)
		}
		return id
	}
	wait := func(id, what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.WaitNotification(ctx, id); err != nil {
			t.Fatalf("%s: no doorbell for %s: %v", what, id, err)
		}
	}

	// What pushing the todos rang is drained first: only the redrive can ring them again.
	drain := func() {
		for {
			select {
			case <-c.Notifications():
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	one := dead("one")
	drain()
	// The queue gauge tells the dead letter from a parked retry.
	retry := e.push(ep, "inbox", "retry")
	call[todo](t, c, "claim", map[string]any{"id": retry})
	call[todo](t, c, "fail", map[string]any{"id": retry})
	gauge := func(state string) float64 {
		return metricValue(t, e.base, `switchboard_queue_todos{endpoint="`+ep.Slug+`",queue="inbox",state="`+state+`"}`)
	}
	if d, r := gauge("dead_letter"), gauge("retry_wait"); d != 1 || r != 1 {
		t.Fatalf("/metrics queue gauge: dead_letter %v, retry_wait %v; want 1 and 1", d, r)
	}
	e.exec(`SELECT switchboard.cancel($1)`, retry)
	e.exec(`SELECT switchboard.redrive(p_todo => $1)`, one)
	wait(one, "redrive by id")
	a, b := dead("a"), dead("b")
	drain()
	e.exec(`SELECT switchboard.redrive(p_endpoint => $1, p_queue => 'inbox')`, ep.ID)
	wait(a, "redrive by queue")
	wait(b, "redrive by queue")

	cancelled := e.push(ep, "inbox", "cancelled")
	e.exec(`SELECT switchboard.cancel($1)`, cancelled)
	got := map[string]bool{}
	for {
		n := call[claimNext](t, c, "claim_next", nil)
		if n.Empty {
			break
		}
		if n.Todo.Attempt != 1 || n.Todo.MaxAttempts != 5 {
			t.Errorf("redriven todo %s: attempt %d of %d, want 1 of 5", n.Todo.ID, n.Todo.Attempt, n.Todo.MaxAttempts)
		}
		got[n.Todo.ID] = true
	}
	if len(got) != 3 || !got[one] || !got[a] || !got[b] || got[cancelled] {
		t.Fatalf("claimed %v, want the three redriven todos and not the cancelled one", got)
	}
}
