package sqltest

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen opens a session that LISTENs on the doorbell channel.
func listen(t *testing.T, d *DB) *pgx.Conn {
	t.Helper()
	c := connect(t, d.URL)
	if _, err := c.Exec(ctx(), "LISTEN switchboard_doorbell"); err != nil {
		t.Fatal(err)
	}
	return c
}

// rings counts doorbell notifications (payload '*': switchboard.ring coalesces per database, and
// each test has a database of its own) arriving within the wait. It stops early after the first
// one when first is set. ep names the endpoint the caller expects to be rung, for the reader.
func rings(t *testing.T, c *pgx.Conn, _ string, wait time.Duration, first bool) int {
	t.Helper()
	deadline := time.Now().Add(wait)
	n := 0
	for {
		wctx, cancel := contextTimeout(time.Until(deadline))
		note, err := c.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if time.Now().Before(deadline) {
				t.Fatalf("WaitForNotification: %v", err)
			}
			return n
		}
		if note.Channel != "switchboard_doorbell" {
			t.Fatalf("notification on unexpected channel %q", note.Channel)
		}
		if note.Payload == "*" {
			n++
			if first {
				return n
			}
		}
	}
}

func (d *DB) clock() time.Time {
	d.t.Helper()
	var now time.Time
	if err := d.QueryRow(ctx(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		d.t.Fatal(err)
	}
	return now
}

func (d *DB) ready(ep string, since time.Time) map[string]bool {
	d.t.Helper()
	rows, err := d.Query(ctx(), "SELECT id FROM switchboard.ready_todos_since($2, 10000) WHERE endpoint_id = $1", ep, since)
	if err != nil {
		d.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		d.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// create_todo signals switchboard_doorbell; ready_todos says what is new for the endpoint.
func TestDoorbellSignal(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "ringer", "inbox")
	l := listen(t, d)

	since := d.clock()
	id := d.create(ep, "inbox", "ding")
	if n := rings(t, l, ep, 3*time.Second, true); n != 1 {
		t.Fatalf("create_todo: %d doorbell notifications, want 1", n)
	}
	if got := d.ready(ep, since); len(got) != 1 || !got[id] {
		t.Fatalf("ready_todos since the create = %v, want just %s", got, id)
	}
	if got := d.ready(ep, d.clock()); len(got) != 0 {
		t.Fatalf("ready_todos since now = %v, want none", got)
	}

	// Returning work to pending rings too: release, reap of an expired lease, due retry.
	d.set("doorbell_window_ms", 0)
	d.mustClaim(ep, id)
	rings(t, l, ep, 50*time.Millisecond, false) // drop anything pending
	d.mustCall("SELECT switchboard.release($1, $2)", ep, id)
	if n := rings(t, l, ep, 3*time.Second, true); n != 1 {
		t.Fatal("release did not ring the doorbell")
	}
	d.mustClaim(ep, id)
	d.expireLease(id)
	reap(t, d.Pool)
	if n := rings(t, l, ep, 3*time.Second, true); n != 1 {
		t.Fatal("reap of an expired lease did not ring the doorbell")
	}
	d.mustClaim(ep, id)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, id)
	d.dueRetry(id)
	since = d.clock()
	reap(t, d.Pool)
	if n := rings(t, l, ep, 3*time.Second, true); n != 1 {
		t.Fatal("release of a due retry did not ring the doorbell")
	}
	if got := d.ready(ep, since); !got[id] {
		t.Fatalf("ready_todos after the retry was released = %v, want %s", got, id)
	}

	// Todos outside the grant never show as ready.
	since = d.clock()
	d.create(ep, "ungranted", "hidden")
	if got := d.ready(ep, since); len(got) != 0 {
		t.Fatalf("ready_todos lists an ungranted queue: %v", got)
	}
}

// A burst of creates inside the coalescing window rings far fewer times than there are todos, but
// at least once; ready_todos still lists them all.
func TestDoorbellCoalesces(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	l := listen(t, d)

	burst := func(ep string) (map[string]bool, time.Time) {
		since := d.clock()
		ids := map[string]bool{}
		for i := 0; i < 50; i++ {
			ids[d.create(ep, "inbox", "burst")] = true
		}
		return ids, since
	}

	// Default window (40 ms): 50 separate transactions in a row ring at most once per window
	// (plus one for the window the burst started in), however slow the machine is.
	ep := d.vend("alice", "busy", "inbox")
	start := time.Now()
	ids, since := burst(ep)
	took := time.Since(start)
	n := rings(t, l, ep, 500*time.Millisecond, false)
	t.Logf("default window: 50 creates in %s rang %d times", took, n)
	if limit := int(took/(40*time.Millisecond)) + 1; n < 1 || n > limit || n >= 50 {
		t.Fatalf("50 creates in %s rang %d times, want 1..%d (one per 40 ms window)", took, n, limit)
	}
	got := d.ready(ep, since)
	for id := range ids {
		if !got[id] {
			t.Fatalf("%s missing from ready_todos", id)
		}
	}
	if len(got) != 50 {
		t.Fatalf("ready_todos after the burst: %d, want 50", len(got))
	}

	// A window that covers the whole burst: exactly one ring. Once the window has passed, the
	// next create rings again.
	d.set("doorbell_window_ms", 10000)
	d.exec(`UPDATE switchboard.doorbell SET signalled_at = '-infinity'`) // the window starts now
	ep2 := d.vend("alice", "busier", "inbox")
	_, since = burst(ep2)
	if n := rings(t, l, ep2, 300*time.Millisecond, false); n != 1 {
		t.Fatalf("50 creates inside one window rang %d times, want 1", n)
	}
	if got := d.ready(ep2, since); len(got) != 50 {
		t.Fatalf("ready_todos: %d, want 50", len(got))
	}
	d.create(ep2, "inbox", "still inside the window")
	other := d.vend("bob", "elsewhere", "inbox")
	d.create(other, "inbox", "another endpoint, same window")
	if n := rings(t, l, ep2, 200*time.Millisecond, false); n != 0 {
		t.Fatalf("creates inside the window (also on another endpoint) rang %d times", n)
	}
	d.set("doorbell_window_ms", 100) // read at call time: the last ring is now older than the window
	d.create(ep2, "inbox", "after the window")
	if n := rings(t, l, ep2, 3*time.Second, true); n != 1 {
		t.Fatal("no ring for the first create after the window")
	}

	// Disabled: silence, yet the todos are there.
	d.set("doorbell_enabled", 0)
	d.set("doorbell_window_ms", 0)
	ep3 := d.vend("alice", "muted", "inbox")
	_, since = burst(ep3)
	if n := rings(t, l, ep3, 300*time.Millisecond, false); n != 0 {
		t.Fatalf("doorbell_enabled=0 still rang %d times", n)
	}
	if got := d.ready(ep3, since); len(got) != 50 {
		t.Fatalf("ready_todos with the doorbell off: %d, want 50", len(got))
	}
}
