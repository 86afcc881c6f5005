package sqltest

import (
	"testing"
	"time"
)

// fail parks a retry at now + min(base·2^(attempt−1), cap), refuses claims inside the window, lets
// them through after it, and dead-letters on the last attempt.
func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	d.set("backoff_base_seconds", 10)
	d.set("backoff_cap_seconds", 25)
	d.set("max_attempts", 4)
	ep := d.vend("alice", "retrier", "inbox")
	id := d.create(ep, "inbox", "flaky")
	owner := d.ownerOf(ep)

	want := map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 25 * time.Second} // 3: 40 s capped at 25
	for attempt := 1; attempt <= 3; attempt++ {
		var out map[string]any
		var err error
		if attempt == 3 {
			out, err = claimNext(d.Pool, ep) // the due retry is taken by claim_next too
			out, _ = out["todo"].(map[string]any)
		} else {
			out, err = claim(d.Pool, ep, id)
		}
		if err != nil || out["id"] != id || num(out["attempt"]) != attempt {
			t.Fatalf("attempt %d: claim gave %v, %v", attempt, out, err)
		}
		failed, now, err := callNow(d.Pool, `switchboard.fail($1, $2, '{"error": "boom"}')`, ep, id)
		if err != nil {
			t.Fatalf("attempt %d: fail: %v", attempt, err)
		}
		if failed["state"] != "failed" || failed["dead_letter"] != false || failed["owner"] != owner {
			t.Fatalf("attempt %d: fail gave %v", attempt, failed)
		}
		r := d.row(id)
		if r.NextRetryAt == nil {
			t.Fatalf("attempt %d: next_retry_at is null, want a parked retry", attempt)
		}
		near(t, "next_retry_at", *r.NextRetryAt, now.Add(want[attempt]), 2*time.Millisecond)
		near(t, "next_retry_at (json)", parseTS(t, failed["next_retry_at"]), now.Add(want[attempt]), 2*time.Millisecond)
		if r.Result["error"] != "boom" || r.LeaseExpiresAt != nil || r.LeaseTokenHash != nil || r.CompletedAt != nil {
			t.Fatalf("attempt %d: parked row %+v", attempt, r)
		}

		// Inside the window nothing claims it, and the reaper leaves it parked.
		_, err = claim(d.Pool, ep, id)
		wantCode(t, err, conflict, "claim inside the retry window")
		if out, err := claimNext(d.Pool, ep); err != nil || out["empty"] != true {
			t.Fatalf("claim_next inside the retry window: %v, %v", out, err)
		}
		if _, _, released := reap(t, d.Pool); released != 0 {
			t.Fatalf("reap released a retry inside its window")
		}
		if r := d.row(id); r.State != "failed" || r.Attempt != attempt {
			t.Fatalf("refused claims changed the row: %+v", r)
		}
		d.dueRetry(id)
	}

	// Attempt 4 of 4 fails: dead letter.
	if _, err := claim(d.Pool, ep, id); err != nil {
		t.Fatal(err)
	}
	dead := d.mustCall(`SELECT switchboard.fail($1, $2, '{"error": "final"}')`, ep, id)
	if dead["state"] != "failed" || dead["dead_letter"] != true || dead["next_retry_at"] != nil || num(dead["attempt"]) != 4 {
		t.Fatalf("last fail: %v, want a dead letter", dead)
	}
	r := d.row(id)
	if r.NextRetryAt != nil || r.CompletedAt == nil || r.Result["error"] != "final" {
		t.Fatalf("dead letter row %+v", r)
	}
	_, err := claim(d.Pool, ep, id)
	wantCode(t, err, conflict, "claim of a dead letter")
	if out, _ := claimNext(d.Pool, ep); out["empty"] != true {
		t.Fatalf("claim_next found %v; dead letters are not claimable", out)
	}
	if q, dl, rr := reap(t, d.Pool); q+dl+rr != 0 {
		t.Fatalf("reap touched a dead letter: %d %d %d", q, dl, rr)
	}
	var inView int
	if err := d.QueryRow(ctx(), "SELECT count(*) FROM switchboard.dead_letters WHERE id = $1", id).Scan(&inView); err != nil || inView != 1 {
		t.Fatalf("dead_letters view: %d, %v", inView, err)
	}
	var backoff5 float64
	if err := d.QueryRow(ctx(), "SELECT extract(epoch FROM switchboard.backoff(5))").Scan(&backoff5); err != nil || backoff5 != 25 {
		t.Fatalf("backoff(5) = %v (%v), want the 25 s cap", backoff5, err)
	}
}

// The retry window in real time, with fractional seconds.
func TestBackoffWindowRealTime(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	d.set("backoff_base_seconds", 0.2)
	d.set("backoff_cap_seconds", 0.3)
	ep := d.vend("alice", "patient", "inbox")
	id := d.create(ep, "inbox", "soon")

	d.mustClaim(ep, id)
	_, now, err := callNow(d.Pool, "switchboard.fail($1, $2)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "next_retry_at", *d.row(id).NextRetryAt, now.Add(200*time.Millisecond), 2*time.Millisecond)
	_, err = claim(d.Pool, ep, id)
	wantCode(t, err, conflict, "claim before the 0.2 s window")
	if out, _ := claimNext(d.Pool, ep); out["empty"] != true {
		t.Fatalf("claim_next before the window: %v", out)
	}
	time.Sleep(300 * time.Millisecond)
	out, err := claim(d.Pool, ep, id)
	if err != nil || num(out["attempt"]) != 2 || out["next_retry_at"] != nil {
		t.Fatalf("claim after the window: %v, %v", out, err)
	}

	// Second failure: 0.4 s capped at 0.3 s; claim_next picks it up once due.
	_, now, err = callNow(d.Pool, "switchboard.fail($1, $2)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "capped next_retry_at", *d.row(id).NextRetryAt, now.Add(300*time.Millisecond), 2*time.Millisecond)
	if out, _ := claimNext(d.Pool, ep); out["empty"] != true {
		t.Fatalf("claim_next before the capped window: %v", out)
	}
	time.Sleep(400 * time.Millisecond)
	out, err = claimNext(d.Pool, ep)
	if err != nil || out["empty"] != false {
		t.Fatalf("claim_next after the window: %v, %v", out, err)
	}
	if todo := out["todo"].(map[string]any); todo["id"] != id || num(todo["attempt"]) != 3 {
		t.Fatalf("claim_next after the window: %v", todo)
	}
}

// release_retries and reap put due retries back to pending (owner cleared); not-yet-due ones stay.
func TestReleaseRetries(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "parker", "inbox")
	a := d.create(ep, "inbox", "a")
	b := d.create(ep, "inbox", "b")
	for _, id := range []string{a, b} {
		d.mustClaim(ep, id)
		d.mustCall("SELECT switchboard.fail($1, $2)", ep, id)
	}

	var n int
	if err := d.QueryRow(ctx(), "SELECT switchboard.release_retries($1)", ep).Scan(&n); err != nil || n != 0 {
		t.Fatalf("release_retries with nothing due = %d, %v", n, err)
	}
	d.dueRetry(a)
	if err := d.QueryRow(ctx(), "SELECT switchboard.release_retries($1)", ep).Scan(&n); err != nil || n != 1 {
		t.Fatalf("release_retries = %d, %v; want 1", n, err)
	}
	if r := d.row(a); r.State != "pending" || r.Owner != nil || r.NextRetryAt != nil || r.Attempt != 1 {
		t.Fatalf("released retry %+v", r)
	}
	if r := d.row(b); r.State != "failed" || r.NextRetryAt == nil {
		t.Fatalf("not-yet-due retry was touched: %+v", r)
	}

	d.dueRetry(b)
	if q, dl, rr := reap(t, d.Pool); q != 0 || dl != 0 || rr != 1 {
		t.Fatalf("reap = (%d, %d, %d), want (0, 0, 1)", q, dl, rr)
	}
	if r := d.row(b); r.State != "pending" || r.Owner != nil || r.NextRetryAt != nil {
		t.Fatalf("reaped retry %+v", r)
	}
}

// A todo takes max_attempts when it is created; later changes do not reach it.
func TestMaxAttemptsTakenAtCreate(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "counter", "inbox")
	d.set("max_attempts", 4)
	a := d.create(ep, "inbox", "four")
	d.set("max_attempts", 2)
	b := d.create(ep, "inbox", "two")
	if ra, rb := d.row(a), d.row(b); ra.MaxAttempts != 4 || rb.MaxAttempts != 2 {
		t.Fatalf("max_attempts a=%d b=%d, want 4 and 2", ra.MaxAttempts, rb.MaxAttempts)
	}
	// b dead-letters on its second failure, a does not.
	for i := 0; i < 2; i++ {
		for _, id := range []string{a, b} {
			d.mustClaim(ep, id)
			d.mustCall("SELECT switchboard.fail($1, $2)", ep, id)
			d.dueRetry(id)
		}
	}
	if ra, rb := d.row(a), d.row(b); ra.NextRetryAt == nil || rb.NextRetryAt != nil || rb.State != "failed" {
		t.Fatalf("after two failures: a=%+v b=%+v", ra, rb)
	}
}
