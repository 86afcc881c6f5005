package sqltest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A todo outside the endpoint's granted queues is forbidden (and untouched); another tenant's todo
// is indistinguishable from one that does not exist.
func TestScopeRefusals(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "scoped", "inbox", "ops")
	other := d.vend("bob", "stranger", "inbox")
	secret := d.create(ep, "secret", "outside the grant")
	theirs := d.create(other, "inbox", "bob's work")
	before := d.row(secret)

	_, err := claim(d.Pool, ep, secret)
	wantCode(t, err, forbidden, "claim outside the grant")
	_, err = call(d.Pool, "SELECT switchboard.claim($1, $2, 60, true)", ep, secret)
	wantCode(t, err, forbidden, "fenced claim outside the grant")
	after := d.row(secret)
	if after.State != "pending" || after.Attempt != 0 || after.Owner != nil || after.LeaseExpiresAt != nil ||
		!after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("refused claim changed the row: %+v", after)
	}
	_, err = call(d.Pool, "SELECT switchboard.get_todo($1, $2)", ep, secret)
	wantCode(t, err, forbidden, "get_todo outside the grant")
	_, err = call(d.Pool, "SELECT switchboard.claim_next($1, 'secret')", ep)
	wantCode(t, err, forbidden, "claim_next with a queue outside the grant")
	_, err = call(d.Pool, "SELECT switchboard.list_todos($1, 'secret')", ep)
	wantCode(t, err, forbidden, "list_todos with a queue outside the grant")
	if out, err := claimNext(d.Pool, ep); err != nil || out["empty"] != true {
		t.Fatalf("claim_next over the grant picked an ungranted todo: %v, %v", out, err)
	}

	// Unknown id and another tenant's id: the same not_found, word for word.
	unknown := "00000000-0000-4000-8000-000000000000"
	_, errUnknown := claim(d.Pool, ep, unknown)
	_, errTheirs := claim(d.Pool, ep, theirs)
	wantCode(t, errUnknown, notFound, "claim of an unknown id")
	wantCode(t, errTheirs, notFound, "claim of another endpoint's todo")
	if pgMessage(errUnknown) != pgMessage(errTheirs) {
		t.Fatalf("messages differ: %q vs %q", pgMessage(errUnknown), pgMessage(errTheirs))
	}
	_, errUnknown = call(d.Pool, "SELECT switchboard.get_todo($1, $2)", ep, unknown)
	_, errTheirs = call(d.Pool, "SELECT switchboard.get_todo($1, $2)", ep, theirs)
	wantCode(t, errUnknown, notFound, "get_todo of an unknown id")
	wantCode(t, errTheirs, notFound, "get_todo of another endpoint's todo")
	if pgMessage(errUnknown) != pgMessage(errTheirs) {
		t.Fatalf("get_todo messages differ: %q vs %q", pgMessage(errUnknown), pgMessage(errTheirs))
	}
	if r := d.row(theirs); r.State != "pending" || r.Attempt != 0 {
		t.Fatalf("foreign todo touched: %+v", r)
	}

	// create_todo refusals.
	_, _, err = createKey(d.Pool, unknown, "inbox", "x", nil)
	wantCode(t, err, notFound, "create_todo for an unknown endpoint")
	_, _, err = createKey(d.Pool, ep, "-bad queue", "x", nil)
	wantCode(t, err, invalidArgument, "create_todo with an invalid queue")
}

// list_todos: granted queues only, newest first, limit default 50 and at most 200.
func TestListTodos(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "lister", "inbox", "ops")
	other := d.vend("bob", "other", "inbox")
	d.create(other, "inbox", "not mine")
	d.create(ep, "secret", "ungranted")
	var ids []string // creation order
	for i := 0; i < 205; i++ {
		q := "inbox"
		if i%5 == 0 {
			q = "ops"
		}
		ids = append(ids, d.create(ep, q, fmt.Sprintf("todo %d", i)))
	}
	d.create(ep, "secret", "ungranted, newest")

	list := func(sql string, args ...any) []map[string]any {
		t.Helper()
		out := d.mustCall(sql, args...)
		raw, _ := out["todos"].([]any)
		todos := make([]map[string]any, len(raw))
		for i, r := range raw {
			todos[i] = r.(map[string]any)
		}
		return todos
	}
	check := func(label string, got []map[string]any, want int) {
		t.Helper()
		if len(got) != want {
			t.Fatalf("%s: %d todos, want %d", label, len(got), want)
		}
		for i, td := range got {
			if td["id"] != ids[len(ids)-1-i] {
				t.Fatalf("%s: position %d is %v (%v), want %s: not newest first", label, i, td["id"], td["title"], ids[len(ids)-1-i])
			}
			if _, ok := td["payload"]; ok {
				t.Fatalf("%s: list rows must not carry the payload", label)
			}
		}
	}
	check("default limit", list("SELECT switchboard.list_todos($1)", ep), 50)
	check("limit 60", list("SELECT switchboard.list_todos($1, p_limit => 60)", ep), 60)
	check("limit 500 capped", list("SELECT switchboard.list_todos($1, p_limit => 500)", ep), 200)

	ops := list("SELECT switchboard.list_todos($1, 'ops', NULL, 200)", ep)
	if len(ops) != 41 {
		t.Fatalf("ops: %d todos, want 41", len(ops))
	}
	for _, td := range ops {
		if td["queue"] != "ops" {
			t.Fatalf("queue filter leaked %v", td)
		}
	}
	d.mustClaim(ep, ids[0])
	if claimed := list("SELECT switchboard.list_todos($1, NULL, 'claimed')", ep); len(claimed) != 1 || claimed[0]["id"] != ids[0] {
		t.Fatalf("state filter: %v", claimed)
	}
	_, err := call(d.Pool, "SELECT switchboard.list_todos($1, NULL, 'weird')", ep)
	wantCode(t, err, invalidArgument, "list_todos with an unknown state")
}

// Idempotent create: a live todo (pending, claimed, parked retry) keeps its key; done and dead
// letters free it; a null key never dedups; concurrent creates make exactly one todo.
func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "deduper", "inbox")
	other := d.vend("bob", "deduper", "inbox")
	key := "order-17"

	mk := func(ep string, key *string) (string, bool) {
		t.Helper()
		id, created, err := createKey(d.Pool, ep, "inbox", "order", key)
		if err != nil {
			t.Fatalf("create_todo: %v", err)
		}
		return id, created
	}
	same := func(label, want string) {
		t.Helper()
		if id, created := mk(ep, &key); id != want || created {
			t.Fatalf("%s: create gave (%s, created=%v), want (%s, false)", label, id, created, want)
		}
	}

	first, created := mk(ep, &key)
	if !created {
		t.Fatal("first create: created=false")
	}
	same("pending", first)
	d.mustClaim(ep, first)
	same("claimed", first)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, first)
	same("parked retry", first)
	if id, created := mk(other, &key); !created || id == first {
		t.Fatalf("same key on another endpoint must not dedup: (%s, %v)", id, created)
	}

	d.dueRetry(first)
	d.mustClaim(ep, first)
	d.mustCall("SELECT switchboard.complete($1, $2)", ep, first)
	d.set("max_attempts", 1) // so that the next todo dead-letters on its first failure
	second, created := mk(ep, &key)
	if !created || second == first {
		t.Fatalf("after done: (%s, %v), want a new todo", second, created)
	}
	same("new live todo", second)

	// Dead letter frees the key too.
	d.mustClaim(ep, second)
	if out := d.mustCall("SELECT switchboard.fail($1, $2)", ep, second); out["dead_letter"] != true {
		t.Fatalf("want a dead letter, got %v", out)
	}
	third, created := mk(ep, &key)
	if !created || third == second || third == first {
		t.Fatalf("after dead letter: (%s, %v), want a new todo", third, created)
	}

	// Null key never dedups.
	a, ca := mk(ep, nil)
	b, cb := mk(ep, nil)
	if !ca || !cb || a == b {
		t.Fatalf("null keys deduped: (%s, %v) (%s, %v)", a, ca, b, cb)
	}

	// Ten concurrent creates with one key: exactly one created, all see the same id.
	conns := d.conns(10)
	race := "race-key"
	var mu sync.Mutex
	seen := map[string]int{}
	var made atomic.Int32
	together(len(conns), func(i int) {
		id, created, err := createKey(conns[i], ep, "inbox", "race", &race)
		if err != nil {
			t.Errorf("concurrent create %d: %v", i, err)
			return
		}
		if created {
			made.Add(1)
		}
		mu.Lock()
		seen[id]++
		mu.Unlock()
	})
	var rows int
	if err := d.QueryRow(ctx(), "SELECT count(*) FROM switchboard.todos WHERE endpoint_id = $1 AND idempotency_key = $2", ep, race).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if made.Load() != 1 || len(seen) != 1 || rows != 1 {
		t.Fatalf("concurrent creates: created=%d distinct ids=%d rows=%d, want 1, 1, 1", made.Load(), len(seen), rows)
	}
}

// Revoking an endpoint: open todos (pending, claimed, parked) are dead-lettered and counted, done
// and dead ones are left alone, the credential stops resolving, and every call is forbidden.
func TestRevokeEndpoint(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep, hash := d.vendCred("alice", "doomed", "inbox")
	bystander := d.vend("alice", "survivor", "inbox")

	pending := d.create(ep, "inbox", "pending")
	claimed := d.create(ep, "inbox", "claimed")
	d.mustClaim(ep, claimed)
	parked := d.create(ep, "inbox", "parked")
	d.mustClaim(ep, parked)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, parked)
	done := d.create(ep, "inbox", "done")
	d.mustClaim(ep, done)
	d.mustCall(`SELECT switchboard.complete($1, $2, '{"ok": true}')`, ep, done)
	d.set("max_attempts", 1)
	dead := d.create(ep, "inbox", "dead")
	d.mustClaim(ep, dead)
	d.mustCall(`SELECT switchboard.fail($1, $2, '{"error": "own"}')`, ep, dead)
	safe := d.create(bystander, "inbox", "other endpoint")

	var resolved int
	if err := d.QueryRow(ctx(), "SELECT count(*) FROM switchboard.endpoint_resolve($1)", hash).Scan(&resolved); err != nil || resolved != 1 {
		t.Fatalf("endpoint_resolve before revoke: %d, %v", resolved, err)
	}
	listener := connect(t, d.URL)
	if _, err := listener.Exec(ctx(), "LISTEN switchboard_revoked"); err != nil {
		t.Fatal(err)
	}

	out := d.mustCall("SELECT switchboard.endpoint_revoke($1)", ep)
	if num(out["todos_dead_lettered"]) != 3 || out["state"] != "revoked" {
		t.Fatalf("endpoint_revoke = %v, want 3 todos dead-lettered", out)
	}
	for _, id := range []string{pending, claimed, parked} {
		r := d.row(id)
		if r.State != "failed" || r.NextRetryAt != nil || r.LeaseExpiresAt != nil || r.CompletedAt == nil ||
			r.Result["error"] != "endpoint_revoked" {
			t.Fatalf("revoked todo %s: %+v", id, r)
		}
	}
	if r := d.row(done); r.State != "done" || r.Result["ok"] != true {
		t.Fatalf("done todo touched by revoke: %+v", r)
	}
	if r := d.row(dead); r.Result["error"] != "own" {
		t.Fatalf("dead letter touched by revoke: %+v", r)
	}
	if err := d.QueryRow(ctx(), "SELECT count(*) FROM switchboard.endpoint_resolve($1)", hash).Scan(&resolved); err != nil || resolved != 0 {
		t.Fatalf("endpoint_resolve after revoke: %d rows, %v; want none", resolved, err)
	}
	wctx, cancel := contextTimeout(2 * time.Second)
	n, err := listener.WaitForNotification(wctx)
	cancel()
	if err != nil || n.Channel != "switchboard_revoked" || n.Payload != ep {
		t.Fatalf("switchboard_revoked notification: %+v, %v", n, err)
	}

	for label, sql := range map[string]string{
		"claim_next": "SELECT switchboard.claim_next($1)",
		"list_todos": "SELECT switchboard.list_todos($1)",
	} {
		_, err := call(d.Pool, sql, ep)
		wantCode(t, err, forbidden, label+" by a revoked endpoint")
	}
	_, err = claim(d.Pool, ep, pending)
	wantCode(t, err, forbidden, "claim by a revoked endpoint")
	_, err = call(d.Pool, "SELECT switchboard.heartbeat($1, $2)", ep, claimed)
	wantCode(t, err, forbidden, "heartbeat by a revoked endpoint")
	_, _, err = createKey(d.Pool, ep, "inbox", "late", nil)
	wantCode(t, err, forbidden, "create_todo for a revoked endpoint")

	if r := d.row(safe); r.State != "pending" {
		t.Fatalf("other endpoint's todo touched: %+v", r)
	}
	if out, err := claimNext(d.Pool, bystander); err != nil || out["empty"] != false {
		t.Fatalf("bystander claim_next: %v, %v", out, err)
	}
	if again := d.mustCall("SELECT switchboard.endpoint_revoke($1)", ep); num(again["todos_dead_lettered"]) != 0 {
		t.Fatalf("second revoke: %v", again)
	}
	_, err = call(d.Pool, "SELECT switchboard.endpoint_revoke($1)", "00000000-0000-4000-8000-000000000000")
	wantCode(t, err, notFound, "revoke of an unknown endpoint")
}

// Times in answers are RFC 3339 in UTC with the row's exact instant, whatever the session's
// TimeZone and DateStyle (a DBA's psql may set both).
func TestTimesAreRFC3339UTC(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "a", "inbox")
	id := d.create(ep, "inbox", "t")
	conn := connect(t, d.URL)
	if _, err := conn.Exec(ctx(), "SET TimeZone = 'America/New_York'; SET DateStyle = 'SQL, DMY'"); err != nil {
		t.Fatal(err)
	}
	got, err := call(conn, "SELECT switchboard.get_todo($1, $2)", ep, id)
	if err != nil {
		t.Fatal(err)
	}
	var stored time.Time
	if err := conn.QueryRow(ctx(), "SELECT created_at FROM switchboard.todos WHERE id = $1", id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	s, _ := got["created_at"].(string)
	if !strings.HasSuffix(s, "Z") || !parseTS(t, s).Equal(stored) {
		t.Fatalf("created_at %q, want the stored instant %s in UTC", s, stored.UTC().Format(time.RFC3339Nano))
	}
	for in, want := range map[string]string{
		"2026-01-01 00:00:00+00":        "2026-01-01T00:00:00Z",
		"2026-07-01 12:34:56.5+02":      "2026-07-01T10:34:56.5Z",
		"2026-07-01 23:59:59.123456-03": "2026-07-02T02:59:59.123456Z",
	} {
		var s string
		if err := conn.QueryRow(ctx(), "SELECT switchboard.rfc3339($1::text::timestamptz)", in).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s != want {
			t.Fatalf("rfc3339(%s) = %q, want %q", in, s, want)
		}
	}
}
