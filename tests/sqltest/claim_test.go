package sqltest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// 20 sessions race to claim one pending todo by id: exactly one wins, the rest get conflict.
// Then the same race over the winner's expired lease (takeover), and with claim_next.
func TestClaimRaceOneWinner(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	id := d.create(ep, "inbox", "contended")
	workers := d.conns(20)

	race := func(label string, wantAttempt int) {
		t.Helper()
		var wins, conflicts atomic.Int32
		var mu sync.Mutex
		var others []error
		together(len(workers), func(i int) {
			out, err := claim(workers[i], ep, id)
			switch {
			case err == nil:
				wins.Add(1)
				if out["id"] != id || out["state"] != "claimed" || num(out["attempt"]) != wantAttempt {
					t.Errorf("%s: winner got %v", label, out)
				}
			case sqlstate(err) == conflict:
				conflicts.Add(1)
			default:
				mu.Lock()
				others = append(others, err)
				mu.Unlock()
			}
		})
		if wins.Load() != 1 || conflicts.Load() != 19 || len(others) != 0 {
			t.Fatalf("%s: wins=%d conflicts=%d other errors=%v; want 1 winner and 19 SB409",
				label, wins.Load(), conflicts.Load(), others)
		}
		r := d.row(id)
		if r.State != "claimed" || r.Attempt != wantAttempt || r.Owner == nil || *r.Owner != d.ownerOf(ep) {
			t.Fatalf("%s: row after race %+v", label, r)
		}
	}
	race("pending", 1)

	d.expireLease(id)
	race("expired lease takeover", 2)

	// claim_next: one todo, 20 sessions: one gets it, the others get the normal empty answer.
	d.mustCall("SELECT switchboard.complete($1, $2)", ep, id)
	other := d.create(ep, "inbox", "single")
	var got, empty atomic.Int32
	together(len(workers), func(i int) {
		out, err := claimNext(workers[i], ep)
		if err != nil {
			t.Errorf("claim_next: %v", err)
			return
		}
		if out["empty"] == true {
			empty.Add(1)
			return
		}
		got.Add(1)
		if todo, _ := out["todo"].(map[string]any); todo["id"] != other {
			t.Errorf("claim_next returned %v, want %s", out, other)
		}
	})
	if got.Load() != 1 || empty.Load() != 19 {
		t.Fatalf("claim_next race: got=%d empty=%d, want 1 and 19", got.Load(), empty.Load())
	}
}

// 1,000 todos drained by 8 concurrent claim_next workers: each is claimed exactly once and done.
func TestDrainThousand(t *testing.T) {
	t.Parallel()
	const total, nworkers = 1000, 8
	d := fresh(t)
	ep := d.vend("alice", "drainer", "work", "other")
	d.exec("SELECT switchboard.create_todo($1, CASE WHEN g % 3 = 0 THEN 'other' ELSE 'work' END, 'job ' || g) FROM generate_series(1, $2::int) g",
		ep, total)

	workers := d.conns(nworkers)
	var mu sync.Mutex
	claims := map[string]int{}
	start := time.Now()
	together(nworkers, func(i int) {
		c := workers[i]
		for {
			out, err := claimNext(c, ep)
			if err != nil {
				t.Errorf("worker %d claim_next: %v", i, err)
				return
			}
			if out["empty"] == true {
				return
			}
			todo := out["todo"].(map[string]any)
			id := todo["id"].(string)
			if num(todo["attempt"]) != 1 {
				t.Errorf("worker %d: %s claimed with attempt %v", i, id, todo["attempt"])
			}
			mu.Lock()
			claims[id]++
			mu.Unlock()
			if _, err := call(c, `SELECT switchboard.complete($1, $2, '{"ok": true}')`, ep, id); err != nil {
				t.Errorf("worker %d complete %s: %v", i, id, err)
				return
			}
		}
	})
	t.Logf("drained %d todos with %d workers in %s", total, nworkers, time.Since(start))

	if len(claims) != total {
		t.Fatalf("claimed %d distinct todos, want %d", len(claims), total)
	}
	for id, n := range claims {
		if n != 1 {
			t.Errorf("todo %s claimed %d times", id, n)
		}
	}
	var done, attemptOne, notDone int
	if err := d.QueryRow(ctx(), `
		SELECT count(*) FILTER (WHERE state = 'done'),
		       count(*) FILTER (WHERE attempt = 1),
		       count(*) FILTER (WHERE state <> 'done')
		  FROM switchboard.todos WHERE endpoint_id = $1`, ep).Scan(&done, &attemptOne, &notDone); err != nil {
		t.Fatal(err)
	}
	if done != total || attemptOne != total || notDone != 0 {
		t.Fatalf("after drain: done=%d attempt=1:%d not done=%d; want %d, %d, 0", done, attemptOne, notDone, total, total)
	}
	if out, _ := claimNext(d.Pool, ep); out["empty"] != true {
		t.Fatalf("queue should be empty, claim_next gave %v", out)
	}
}

// claim_next takes the oldest first (created_at, then id), honours a granted queue filter, and says
// {"empty": true} when there is nothing, which is not an error. Claim output carries the lease.
func TestClaimNextOrderAndShape(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "orderly", "a", "b")
	first := d.create(ep, "a", "first")
	second := d.create(ep, "b", "second")
	third := d.create(ep, "a", "third")

	out, now, err := callNow(d.Pool, "switchboard.claim_next($1, 'a', 120)", ep)
	if err != nil {
		t.Fatal(err)
	}
	todo := out["todo"].(map[string]any)
	if out["empty"] != false || todo["id"] != first {
		t.Fatalf("claim_next(a) = %v, want %s", out, first)
	}
	if _, ok := out["lease_token"]; ok {
		t.Fatalf("unfenced claim must not return a lease_token: %v", out)
	}
	if todo["owner"] != d.ownerOf(ep) || todo["state"] != "claimed" || todo["payload"] == nil {
		t.Fatalf("claim shape: %v", todo)
	}
	near(t, "lease_expires_at", parseTS(t, todo["lease_expires_at"]), now.Add(120*time.Second), time.Millisecond)

	if out, _ = claimNext(d.Pool, ep); out["todo"].(map[string]any)["id"] != second {
		t.Fatalf("claim_next() = %v, want the older %s", out, second)
	}
	if out, _ = claimNext(d.Pool, ep); out["todo"].(map[string]any)["id"] != third {
		t.Fatalf("claim_next() = %v, want %s", out, third)
	}
	if out, err = claimNext(d.Pool, ep); err != nil || out["empty"] != true || len(out) != 1 {
		t.Fatalf("empty queue: %v, %v; want {\"empty\": true}", out, err)
	}

	// Lease TTL is clamped to 1..lease_max_seconds.
	d.set("lease_max_seconds", 600)
	a := d.create(ep, "a", "clamp low")
	b := d.create(ep, "a", "clamp high")
	out, now, err = callNow(d.Pool, "switchboard.claim($1, $2, 0)", ep, a)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "ttl 0 clamps to 1 s", parseTS(t, out["lease_expires_at"]), now.Add(time.Second), time.Millisecond)
	out, now, err = callNow(d.Pool, "switchboard.claim($1, $2, 100000)", ep, b)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "ttl clamps to lease_max_seconds", parseTS(t, out["lease_expires_at"]), now.Add(600*time.Second), time.Millisecond)

	// Default lease: lease_default_seconds.
	d.set("lease_default_seconds", 42)
	c := d.create(ep, "b", "default ttl")
	out, now, err = callNow(d.Pool, "switchboard.claim($1, $2)", ep, c)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "default lease", parseTS(t, out["lease_expires_at"]), now.Add(42*time.Second), time.Millisecond)
}

// A todo released on its last attempt must be treated the same way by claim and claim_next, and
// no claim path may push attempt past max_attempts.
func TestReleasedLastAttemptConsistent(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	d.set("max_attempts", 1)
	ep := d.vend("alice", "releaser", "inbox")
	id := d.create(ep, "inbox", "last attempt")
	d.mustClaim(ep, id)
	d.mustCall("SELECT switchboard.release($1, $2)", ep, id)

	_, errByID := claim(d.Pool, ep, id)
	if errByID == nil {
		d.mustCall("SELECT switchboard.release($1, $2)", ep, id)
	}
	out, err := claimNext(d.Pool, ep)
	if err != nil {
		t.Fatal(err)
	}
	byNext := out["empty"] == false
	if (errByID == nil) != byNext {
		t.Errorf("claim by id (err %v) and claim_next (%v) disagree on a released last-attempt todo", errByID, out)
	}
	if r := d.row(id); r.Attempt > r.MaxAttempts {
		t.Errorf("attempt %d exceeds max_attempts %d", r.Attempt, r.MaxAttempts)
	}
}

// finish_and_claim_next: the transition and the next claim in one call. A refused transition
// claims nothing; a claim that fails unexpectedly leaves the transition standing and reports
// "internal" without echoing the cause.
func TestFinishAndClaimNext(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "drainer", "inbox")
	first := d.create(ep, "inbox", "first")
	second := d.create(ep, "inbox", "second")
	third := d.create(ep, "inbox", "boom")
	d.mustClaim(ep, first)

	if _, err := call(d.Pool, "SELECT switchboard.finish_and_claim_next($1, $2, 'complete', NULL, 'sbl_wrong')", ep, first); sqlstate(err) != "SB409" {
		t.Fatalf("complete with a wrong fence: %v, want conflict", err)
	}
	if r := d.row(second); r.State != "pending" {
		t.Fatalf("a refused transition claimed the next todo: %+v", r)
	}

	out := d.mustCall(`SELECT switchboard.finish_and_claim_next($1, $2, 'complete', '{"ok": true}')`, ep, first)
	next := out["next"].(map[string]any)
	if out["state"] != "done" || next["empty"] != false || next["todo"].(map[string]any)["id"] != second {
		t.Fatalf("complete + next = %v", out)
	}

	// The next claim hits an unexpected error (an injected trigger): the completion stands.
	d.exec(`CREATE FUNCTION pg_temp_boom() RETURNS trigger LANGUAGE plpgsql AS $$
	        BEGIN RAISE EXCEPTION 'secret detail' USING ERRCODE = 'XX123'; END $$`)
	d.exec(`CREATE TRIGGER boom BEFORE UPDATE ON switchboard.todos FOR EACH ROW
	        WHEN (OLD.title = 'boom' AND NEW.state = 'claimed') EXECUTE FUNCTION pg_temp_boom()`)
	out = d.mustCall("SELECT switchboard.finish_and_claim_next($1, $2, 'complete')", ep, second)
	if out["state"] != "done" || out["next"].(map[string]any)["error"] != "internal: internal error" {
		t.Fatalf("complete + failing next = %v", out)
	}
	if r := d.row(second); r.State != "done" {
		t.Fatalf("the completion did not stand: %+v", r)
	}
	if r := d.row(third); r.State != "pending" || r.Attempt != 0 {
		t.Fatalf("the failed claim left a trace: %+v", r)
	}
}

// The table itself refuses a todo of the wrong shape, whoever writes it (a DBA's UPDATE
// included): a bad queue name (the queue_name domain), an unknown state, a lease outside
// "claimed", a claim without owner or lease, a retry time outside "failed", max_attempts < 1.
// Each is check_violation (23514) and changes nothing.
func TestTodoShapeIsEnforced(t *testing.T) {
	d := fresh(t)
	ep := d.vend("ann", "a1", "inbox")
	id := d.create(ep, "inbox", "shaped")
	cases := []struct{ what, sql string }{
		{"bad queue on insert", `INSERT INTO switchboard.todos (endpoint_id, queue, max_attempts) VALUES ($1, 'no spaces', 1)`},
		{"bad queue on update", `UPDATE switchboard.todos SET queue = '-x' WHERE endpoint_id = $1`},
		{"unknown state", `UPDATE switchboard.todos SET state = 'lost' WHERE endpoint_id = $1`},
		{"pending with a lease", `UPDATE switchboard.todos SET lease_expires_at = now() WHERE endpoint_id = $1`},
		{"claimed without a lease", `UPDATE switchboard.todos SET state = 'claimed', owner = 'agent:x' WHERE endpoint_id = $1`},
		{"claimed without an owner", `UPDATE switchboard.todos SET state = 'claimed', lease_expires_at = now() WHERE endpoint_id = $1`},
		{"done with a retry time", `UPDATE switchboard.todos SET state = 'done', next_retry_at = now() WHERE endpoint_id = $1`},
		{"failed with a lease", `UPDATE switchboard.todos SET state = 'failed', lease_expires_at = now() WHERE endpoint_id = $1`},
		{"max_attempts 0", `UPDATE switchboard.todos SET max_attempts = 0 WHERE endpoint_id = $1`},
	}
	for _, c := range cases {
		_, err := d.Exec(ctx(), c.sql, ep)
		if got := sqlstate(err); got != "23514" {
			t.Errorf("%s: SQLSTATE %q (%v), want 23514", c.what, got, err)
		}
	}
	var state, queue string
	if err := d.QueryRow(ctx(), `SELECT state, queue FROM switchboard.todos WHERE id = $1`, id).Scan(&state, &queue); err != nil ||
		state != "pending" || queue != "inbox" {
		t.Fatalf("row changed: %s %s %v", state, queue, err)
	}
	// The shapes the verbs produce still pass: a parked retry, then a dead letter.
	d.exec(`UPDATE switchboard.todos SET state = 'failed', next_retry_at = now() + interval '1 minute' WHERE id = $1`, id)
	d.exec(`UPDATE switchboard.todos SET next_retry_at = NULL WHERE id = $1`, id)
}
