package sqltest

import (
	"crypto/sha256"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// An expired lease goes back to pending through reap() while attempts remain, and is
// dead-lettered (result lease_expired) when they are spent.
func TestReapExpiredLease(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "sleepy", "inbox")
	id := d.create(ep, "inbox", "short lease")

	out, now, err := callNow(d.Pool, "switchboard.claim($1, $2, 1)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "1 s lease", parseTS(t, out["lease_expires_at"]), now.Add(time.Second), time.Millisecond)
	if q, dl, _ := reap(t, d.Pool); q != 0 || dl != 0 {
		t.Fatalf("reap before expiry: requeued=%d dead=%d", q, dl)
	}
	time.Sleep(1100 * time.Millisecond) // let the lease run out for real
	if q, dl, rr := reap(t, d.Pool); q != 1 || dl != 0 || rr != 0 {
		t.Fatalf("reap = (%d, %d, %d), want requeued=1", q, dl, rr)
	}
	r := d.row(id)
	if r.State != "pending" || r.Owner != nil || r.LeaseExpiresAt != nil || r.LeaseTokenHash != nil || r.Attempt != 1 {
		t.Fatalf("requeued row %+v", r)
	}
	if q, dl, rr := reap(t, d.Pool); q+dl+rr != 0 {
		t.Fatalf("second reap did work: %d %d %d", q, dl, rr)
	}

	// Attempts spent: dead letter.
	d.set("max_attempts", 1)
	last := d.create(ep, "inbox", "one shot")
	d.mustClaim(ep, last)
	d.expireLease(last)
	if q, dl, _ := reap(t, d.Pool); q != 0 || dl != 1 {
		t.Fatalf("reap = requeued %d, dead_lettered %d; want 0, 1", q, dl)
	}
	r = d.row(last)
	if r.State != "failed" || r.NextRetryAt != nil || r.CompletedAt == nil || r.Result["error"] != "lease_expired" {
		t.Fatalf("dead-lettered row %+v", r)
	}
	got := d.mustCall("SELECT switchboard.get_todo($1, $2)", ep, last)
	if got["dead_letter"] != true || got["result"].(map[string]any)["error"] != "lease_expired" {
		t.Fatalf("get_todo of the dead letter: %v", got)
	}
}

// A dead letter from an expired lease must say so even when an earlier attempt failed with a result.
func TestReapDeadLetterAfterEarlierFail(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	d.set("max_attempts", 2)
	ep := d.vend("alice", "flaky", "inbox")
	id := d.create(ep, "inbox", "fails then stalls")
	d.mustClaim(ep, id)
	d.mustCall(`SELECT switchboard.fail($1, $2, '{"error": "boom"}')`, ep, id)
	d.dueRetry(id)
	d.mustClaim(ep, id)
	d.expireLease(id)
	if _, dl, _ := reap(t, d.Pool); dl != 1 {
		t.Fatalf("dead_lettered = %d, want 1", dl)
	}
	if r := d.row(id); r.Result["error"] != "lease_expired" {
		t.Fatalf("dead letter result %v, want {\"error\": \"lease_expired\"}", r.Result)
	}
}

// Without the reaper, claim (by id) and claim_next take over expired leases themselves; the old
// holder's fence token stops working.
func TestClaimTakesOverExpiredLease(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "crew", "inbox")
	id := d.create(ep, "inbox", "abandoned")

	first := d.mustCall("SELECT switchboard.claim($1, $2, 300, true)", ep, id)
	oldToken := first["lease_token"].(string)
	_, err := claim(d.Pool, ep, id)
	wantCode(t, err, conflict, "claim of a live lease")

	d.expireLease(id)
	second := d.mustCall("SELECT switchboard.claim($1, $2, 300, true)", ep, id)
	if num(second["attempt"]) != 2 || second["lease_token"] == oldToken {
		t.Fatalf("takeover by id: %v", second)
	}
	_, err = call(d.Pool, "SELECT switchboard.complete($1, $2, NULL, $3)", ep, id, oldToken)
	wantCode(t, err, conflict, "complete with the token of the taken-over lease")
	_, err = call(d.Pool, "SELECT switchboard.heartbeat($1, $2, NULL, $3)", ep, id, oldToken)
	wantCode(t, err, conflict, "heartbeat with the token of the taken-over lease")

	// claim_next takes over too.
	d.expireLease(id)
	out, err := claimNext(d.Pool, ep)
	if err != nil {
		t.Fatal(err)
	}
	if todo, _ := out["todo"].(map[string]any); todo["id"] != id || num(todo["attempt"]) != 3 {
		t.Fatalf("takeover by claim_next: %v", out)
	}
	if r := d.row(id); r.State != "claimed" || r.LeaseTokenHash != nil || !r.LeaseExpiresAt.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("row after claim_next takeover %+v", r)
	}

	// No attempts left: claim by id refuses the expired lease, claim_next dead-letters it.
	d.set("max_attempts", 1)
	last := d.create(ep, "inbox", "one shot")
	d.mustClaim(ep, last)
	d.expireLease(last)
	_, err = claim(d.Pool, ep, last)
	wantCode(t, err, conflict, "takeover with no attempts left")
	d.mustCall("SELECT switchboard.complete($1, $2)", ep, id)
	if out, _ := claimNext(d.Pool, ep); out["empty"] != true {
		t.Fatalf("claim_next over an exhausted expired lease: %v", out)
	}
	if r := d.row(last); r.State != "failed" || r.NextRetryAt != nil || r.Attempt != 1 {
		t.Fatalf("exhausted lease after claim_next: %+v", r)
	}
}

// Heartbeat sets lease_expires_at = now + ttl: reset from now, not added to the old deadline.
func TestHeartbeatResetsLease(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "beater", "inbox")
	id := d.create(ep, "inbox", "long job")
	d.mustCall("SELECT switchboard.claim($1, $2, 100)", ep, id)

	out, now, err := callNow(d.Pool, "switchboard.heartbeat($1, $2, 10)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "heartbeat 10 s", parseTS(t, out["lease_expires_at"]), now.Add(10*time.Second), time.Millisecond)
	near(t, "stored lease", *d.row(id).LeaseExpiresAt, now.Add(10*time.Second), time.Millisecond)

	out, now, err = callNow(d.Pool, "switchboard.heartbeat($1, $2, 100)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "heartbeat 100 s", parseTS(t, out["lease_expires_at"]), now.Add(100*time.Second), time.Millisecond)
	out, now, err = callNow(d.Pool, "switchboard.heartbeat($1, $2, 100)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "repeated heartbeat is not cumulative", parseTS(t, out["lease_expires_at"]), now.Add(100*time.Second), time.Millisecond)

	d.set("lease_default_seconds", 77)
	out, now, err = callNow(d.Pool, "switchboard.heartbeat($1, $2)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "heartbeat default ttl", parseTS(t, out["lease_expires_at"]), now.Add(77*time.Second), time.Millisecond)
	if r := d.row(id); r.Attempt != 1 || r.State != "claimed" {
		t.Fatalf("heartbeat changed attempt/state: %+v", r)
	}
}

// Only the holder may heartbeat, complete, fail or release: another tenant's endpoint gets
// not_found, the right endpoint on a todo it does not hold gets conflict, and a fenced claim
// needs its token.
func TestHolderChecks(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	mine := d.vend("alice", "worker-a", "inbox")
	foreign := d.vend("bob", "worker-b", "inbox")   // another human's agent
	sibling := d.vend("alice", "worker-a", "inbox") // another endpoint of the same agent
	held := d.create(mine, "inbox", "held")
	d.mustClaim(mine, held)
	before := d.row(held)

	verbs := map[string]string{
		"heartbeat": "SELECT switchboard.heartbeat($1, $2)",
		"complete":  "SELECT switchboard.complete($1, $2)",
		"fail":      "SELECT switchboard.fail($1, $2)",
		"release":   "SELECT switchboard.release($1, $2)",
	}
	for verb, sql := range verbs {
		for who, ep := range map[string]string{"foreign endpoint": foreign, "sibling endpoint": sibling} {
			_, err := call(d.Pool, sql, ep, held)
			wantCode(t, err, notFound, verb+" by "+who)
			if pgMessage(err) != "todo not found" {
				t.Fatalf("%s by %s: message %q", verb, who, pgMessage(err))
			}
		}
	}
	if after := d.row(held); after.State != "claimed" || !after.UpdatedAt.Equal(before.UpdatedAt) || !after.LeaseExpiresAt.Equal(*before.LeaseExpiresAt) {
		t.Fatalf("refused calls changed the todo: %+v -> %+v", before, after)
	}

	// Not claimed (pending), and finished (done): conflict for the owning endpoint.
	pending := d.create(mine, "inbox", "pending")
	for verb, sql := range verbs {
		_, err := call(d.Pool, sql, mine, pending)
		wantCode(t, err, conflict, verb+" of a pending todo")
	}
	d.mustCall("SELECT switchboard.complete($1, $2)", mine, held)
	for verb, sql := range verbs {
		_, err := call(d.Pool, sql, mine, held)
		wantCode(t, err, conflict, verb+" of a done todo")
	}

	// Fence.
	fenced := d.create(mine, "inbox", "fenced")
	out := d.mustCall("SELECT switchboard.claim($1, $2, NULL, true)", mine, fenced)
	token, _ := out["lease_token"].(string)
	if !strings.HasPrefix(token, "sbl_") || len(token) < 40 {
		t.Fatalf("fenced claim returned lease_token %q", token)
	}
	sum := sha256.Sum256([]byte(token))
	if r := d.row(fenced); string(r.LeaseTokenHash) != string(sum[:]) {
		t.Fatalf("stored lease_token_hash is not sha256(token)")
	}
	var leaked bool
	if err := d.QueryRow(ctx(), "SELECT strpos(t::text, $2) > 0 FROM switchboard.todos t WHERE id = $1", fenced, token).Scan(&leaked); err != nil || leaked {
		t.Fatalf("the plaintext lease token is stored in the row (%v)", err)
	}
	fencedVerbs := map[string]string{
		"heartbeat": "SELECT switchboard.heartbeat($1, $2, NULL, $3)",
		"complete":  "SELECT switchboard.complete($1, $2, NULL, $3)",
		"fail":      "SELECT switchboard.fail($1, $2, NULL, $3)",
		"release":   "SELECT switchboard.release($1, $2, $3)",
	}
	for verb, sql := range fencedVerbs {
		_, err := call(d.Pool, sql, mine, fenced, nil)
		wantCode(t, err, conflict, verb+" without the fence token")
		_, err = call(d.Pool, sql, mine, fenced, token+"x")
		wantCode(t, err, conflict, verb+" with a wrong fence token")
		_, err = call(d.Pool, sql, foreign, fenced, token)
		wantCode(t, err, notFound, verb+" with the right token from a foreign endpoint")
	}
	if _, err := call(d.Pool, fencedVerbs["heartbeat"], mine, fenced, token); err != nil {
		t.Fatalf("heartbeat with the right token: %v", err)
	}
	done, err := call(d.Pool, `SELECT switchboard.complete($1, $2, '{"answer": 42}', $3)`, mine, fenced, token)
	if err != nil || done["state"] != "done" {
		t.Fatalf("complete with the right token: %v, %v", done, err)
	}
	if r := d.row(fenced); r.LeaseTokenHash != nil || r.CompletedAt == nil || num(r.Result["answer"]) != 42 {
		t.Fatalf("completed fenced row %+v", r)
	}

	// Release: back to pending, owner and lease cleared, attempt unchanged.
	rel := d.create(mine, "inbox", "give back")
	d.mustClaim(mine, rel)
	d.mustCall("SELECT switchboard.release($1, $2)", mine, rel)
	if r := d.row(rel); r.State != "pending" || r.Owner != nil || r.LeaseExpiresAt != nil || r.Attempt != 1 {
		t.Fatalf("released row %+v", r)
	}
}

// Four reapers at once over 2,000 expired leases: each lease is requeued exactly once.
func TestReapConcurrent(t *testing.T) {
	t.Parallel()
	const total = 2000
	d := fresh(t)
	ep := d.vend("alice", "mass", "inbox")
	d.exec("SELECT switchboard.create_todo($1, 'inbox', 'lease ' || g) FROM generate_series(1, $2::int) g", ep, total)
	d.exec("SELECT switchboard.claim($1, id, 60) FROM switchboard.todos WHERE endpoint_id = $1", ep)
	d.exec("UPDATE switchboard.todos SET lease_expires_at = now() - interval '1 second' WHERE endpoint_id = $1", ep)

	reapers := d.conns(4)
	var requeued, dead atomic.Int32
	together(len(reapers), func(i int) {
		var q, dl, rr int
		if err := reapers[i].QueryRow(ctx(), "SELECT * FROM switchboard.reap()").Scan(&q, &dl, &rr); err != nil {
			t.Errorf("reaper %d: %v", i, err)
			return
		}
		requeued.Add(int32(q))
		dead.Add(int32(dl))
	})
	if requeued.Load() != total || dead.Load() != 0 {
		t.Fatalf("concurrent reapers requeued %d (dead-lettered %d), want %d", requeued.Load(), dead.Load(), total)
	}
	var pending, ok int
	if err := d.QueryRow(ctx(), `
		SELECT count(*) FILTER (WHERE state = 'pending'),
		       count(*) FILTER (WHERE state = 'pending' AND attempt = 1 AND owner IS NULL AND lease_expires_at IS NULL)
		  FROM switchboard.todos WHERE endpoint_id = $1`, ep).Scan(&pending, &ok); err != nil {
		t.Fatal(err)
	}
	if pending != total || ok != total {
		t.Fatalf("after reaping: pending=%d clean=%d, want %d", pending, ok, total)
	}
}

// The holder verbs (complete, fail, heartbeat, release) find their todo through the primary key
// in the generic plan PL/pgSQL caches, never by walking the lease index: with a lease index
// partial on state = 'claimed', holds()'s own state = 'claimed' made that index look cheaper,
// and each completion walked every lease entry since the last vacuum.
func TestHolderVerbsUsePrimaryKey(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	d.exec(`INSERT INTO switchboard.todos (endpoint_id, queue, title, max_attempts)
	        SELECT $1, 'inbox', 'todo ' || g, 5 FROM generate_series(1, 500) g`, ep)
	var held string
	for i := 0; i < 50; i++ { // leave lease-index entries behind, and one live lease
		held = d.mustCall("SELECT switchboard.claim_next($1)", ep)["todo"].(map[string]any)["id"].(string)
		if i < 49 {
			d.mustCall("SELECT switchboard.complete($1, $2)", ep, held)
		}
	}
	d.exec("ANALYZE switchboard.todos")

	c := connect(t, d.URL)
	if _, err := c.Exec(ctx(), `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx(), `PREPARE holder(uuid, uuid, text) AS
		UPDATE switchboard.todos u SET updated_at = now()
		  FROM switchboard.scope($1) g
		 WHERE u.id = $2 AND u.endpoint_id = $1 AND switchboard.holds(u, g.queues, g.owner, $3)`); err != nil {
		t.Fatal(err)
	}
	// EXPLAIN takes no bind parameters: pgx interpolates them (simple protocol).
	rows, err := c.Query(ctx(), `EXPLAIN EXECUTE holder($1, $2, NULL)`, pgx.QueryExecModeSimpleProtocol, ep, held)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "todos_pkey") || strings.Contains(text, "todos_leases") {
		t.Fatalf("holder verb plan does not look the todo up by primary key:\n%s", text)
	}
}
