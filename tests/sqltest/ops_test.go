package sqltest

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// age moves a todo's completion (or an event's arrival) into the past.
func (d *DB) ageTodo(id string, days float64) {
	d.t.Helper()
	d.exec("UPDATE switchboard.todos SET completed_at = now() - make_interval(secs => $2 * 86400) WHERE id = $1", id, days)
}

func (d *DB) finish(ep, id string) {
	d.t.Helper()
	d.mustClaim(ep, id)
	d.mustCall("SELECT switchboard.complete($1, $2)", ep, id)
}

// deadLetter makes a dead letter: claim and fail on the last attempt.
func (d *DB) deadLetter(ep, id string) {
	d.t.Helper()
	d.exec("UPDATE switchboard.todos SET max_attempts = 1 WHERE id = $1", id)
	d.mustClaim(ep, id)
	d.mustCall(`SELECT switchboard.fail($1, $2, '{"error": "boom"}')`, ep, id)
	if r := d.row(id); r.State != "failed" || r.NextRetryAt != nil {
		d.t.Fatalf("todo %s is %s (retry %v), want a dead letter", id, r.State, r.NextRetryAt)
	}
}

// webhook makes a generic webhook of the endpoint straight in the table (no ceiling needed).
func (d *DB) webhook(ep string) string {
	d.t.Helper()
	var id string
	if err := d.QueryRow(ctx(), `INSERT INTO switchboard.webhooks (endpoint_id, source_type, trust_mode, target_queue, ingest_token)
		VALUES ($1, 'generic', 'token', 'inbox', $2) RETURNING id`, ep, randomHex(16)).Scan(&id); err != nil {
		d.t.Fatal(err)
	}
	return id
}

// event stores a delivery received days ago and returns its id.
func (d *DB) event(webhook string, days float64) int64 {
	d.t.Helper()
	var id int64
	if err := d.QueryRow(ctx(), `INSERT INTO switchboard.webhook_events
		  (webhook_id, source, trust_mode, verified, verify_detail, payload_size, payload, delivery_key, disposition, received_at)
		VALUES ($1, 'generic', 'token', false, 'token', 2, '{}', $2, 'delivered', now() - make_interval(secs => $3 * 86400))
		RETURNING id`, webhook, randomHex(8), days).Scan(&id); err != nil {
		d.t.Fatal(err)
	}
	return id
}

func (d *DB) todoFor(ep string, event int64) string {
	d.t.Helper()
	var id string
	if err := d.QueryRow(ctx(), `SELECT todo_id FROM switchboard.create_todo($1, 'inbox', 'from a webhook', '{}', NULL, 'webhook', NULL, NULL, $2)`,
		ep, event).Scan(&id); err != nil {
		d.t.Fatal(err)
	}
	return id
}

type purged struct {
	done, dead, events int64
	more               bool
}

func purge(t testing.TB, c querier, dry bool) purged {
	t.Helper()
	var p purged
	if err := c.QueryRow(ctx(), "SELECT todos_done, todos_dead, events, more FROM switchboard.purge($1)", dry).
		Scan(&p.done, &p.dead, &p.events, &p.more); err != nil {
		t.Fatalf("purge(%v): %v", dry, err)
	}
	return p
}

func (d *DB) exists(table, id string) bool {
	d.t.Helper()
	var ok bool
	if err := d.QueryRow(ctx(), "SELECT EXISTS (SELECT 1 FROM switchboard."+table+" WHERE id::text = $1)", id).Scan(&ok); err != nil {
		d.t.Fatal(err)
	}
	return ok
}

// purge deletes exactly what is past each retention setting, in batches; the dry run counts the
// same; an event stays while any of its todos does.
func TestPurgeRetention(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	d.set("purge_batch_size", 10)
	ep := d.vend("alice", "worker", "inbox")
	hook := d.webhook(ep)

	var goneTodos, keptTodos []string
	mk := func(n int, days float64, finish func(string), gone bool) {
		for i := 0; i < n; i++ {
			id := d.create(ep, "inbox", fmt.Sprintf("t%.0f-%d", days, i))
			finish(id)
			if days > 0 {
				d.ageTodo(id, days)
			}
			if gone {
				goneTodos = append(goneTodos, id)
			} else {
				keptTodos = append(keptTodos, id)
			}
		}
	}
	done := func(id string) { d.finish(ep, id) }
	dead := func(id string) { d.deadLetter(ep, id) }
	cancelled := func(id string) { d.mustCall("SELECT switchboard.cancel($1)", id) }
	mk(22, 8, done, true)            // done, past 7 days: three batches of 10
	mk(3, 6, done, false)            // done, within 7 days
	mk(2, 8, cancelled, true)        // cancelled: retained like done
	mk(4, 31, dead, true)            // dead letters past 30 days
	mk(2, 29, dead, false)           // dead letters within 30 days
	mk(2, 0, func(string) {}, false) // pending: never purged
	// A parked retry, its completion time set by hand as if old: still live, kept.
	retry := d.create(ep, "inbox", "parked")
	d.mustClaim(ep, retry)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, retry)
	d.ageTodo(retry, 100)
	keptTodos = append(keptTodos, retry)

	oldAlone := d.event(hook, 15)    // past 14 days, no todo: purged
	young := d.event(hook, 13)       // within 14 days: kept
	oldWithKept := d.event(hook, 15) // past 14 days, its todo is pending: kept
	keptTodos = append(keptTodos, d.todoFor(ep, oldWithKept))
	oldWithGone := d.event(hook, 15) // past 14 days, its only todo is purged: purged after it
	t1 := d.todoFor(ep, oldWithGone)
	d.finish(ep, t1)
	d.ageTodo(t1, 8)
	goneTodos = append(goneTodos, t1)
	oldWithMixed := d.event(hook, 20) // one todo purged, one kept: kept
	t2, t3 := d.todoFor(ep, oldWithMixed), d.todoFor(ep, oldWithMixed)
	d.finish(ep, t2)
	d.ageTodo(t2, 8)
	d.finish(ep, t3)
	d.ageTodo(t3, 2)
	goneTodos, keptTodos = append(goneTodos, t2), append(keptTodos, t3)

	dry := purge(t, d.Pool, true)
	if dry.done != 22+2+2 || dry.dead != 4 || dry.events != 2 || dry.more {
		t.Fatalf("dry run %+v, want 26 done/cancelled, 4 dead, 2 events", dry)
	}
	before := len(goneTodos) + len(keptTodos)
	if n := count(t, d, "SELECT count(*) FROM switchboard.todos"); n != before {
		t.Fatalf("%d todos before purge, want %d", n, before)
	}
	if again := purge(t, d.Pool, true); again != dry {
		t.Fatalf("a dry run changed something: %+v then %+v", dry, again)
	}

	// One call is one bounded batch.
	first := purge(t, d.Pool, false)
	if first.done != 10 || first.dead != 4 || !first.more {
		t.Fatalf("first batch %+v, want 10 done, 4 dead, more", first)
	}
	// The procedure finishes it, committing after each batch.
	var pd, px, pe int64
	if err := d.QueryRow(ctx(), "CALL switchboard.purge_all()").Scan(&pd, &px, &pe); err != nil {
		t.Fatalf("CALL purge_all: %v", err)
	}
	if first.done+pd != 26 || first.dead+px != 4 || first.events+pe != 2 {
		t.Fatalf("purged %d+%d done, %d+%d dead, %d+%d events; want 26, 4, 2", first.done, pd, first.dead, px, first.events, pe)
	}
	for _, id := range goneTodos {
		if d.exists("todos", id) {
			t.Errorf("todo %s past retention was kept", id)
		}
	}
	for _, id := range keptTodos {
		if !d.exists("todos", id) {
			t.Errorf("todo %s within retention was purged", id)
		}
	}
	for ev, want := range map[int64]bool{oldAlone: false, young: true, oldWithKept: true, oldWithGone: false, oldWithMixed: true} {
		if got := d.exists("webhook_events", fmt.Sprint(ev)); got != want {
			t.Errorf("event %d exists=%v, want %v", ev, got, want)
		}
	}
	if p := purge(t, d.Pool, false); p != (purged{}) {
		t.Fatalf("second purge %+v, want nothing", p)
	}
}

func count(t testing.TB, d *DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := d.QueryRow(ctx(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Purge runs beside 8 claimers draining the queue and beside itself: no claim waits or fails,
// every todo is done exactly once, done rows disappear, and no event that a kept todo points
// to is deleted (the foreign key would refuse it: purge would fail).
func TestPurgeConcurrentWithClaimers(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	d.set("retain_done_days", 0) // everything done is past retention at once
	d.set("retain_events_days", 0)
	d.set("purge_batch_size", 25)
	ep := d.vend("alice", "worker", "inbox")
	hook := d.webhook(ep)
	const todos = 600
	events := map[string]int64{}
	for i := 0; i < todos; i++ {
		if i%3 == 0 {
			ev := d.event(hook, 1)
			events[d.todoFor(ep, ev)] = ev
			continue
		}
		d.create(ep, "inbox", fmt.Sprintf("w%d", i))
	}

	conns := d.conns(10)
	var claimed sync.Map
	var dupes, claims, purgedTodos, purgedEvents atomic.Int64
	stop := make(chan struct{})
	var purgers sync.WaitGroup
	for _, c := range conns[8:] {
		purgers.Add(1)
		go func() {
			defer purgers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := purge(t, c, false)
				purgedTodos.Add(p.done)
				purgedEvents.Add(p.events)
			}
		}()
	}
	together(8, func(i int) {
		c := conns[i]
		// A claim or completion that waited on purge's locks would hit this.
		if _, err := c.Exec(ctx(), "SET lock_timeout = '2s'"); err != nil {
			t.Error(err)
			return
		}
		for {
			out, err := claimNext(c, ep)
			if err != nil {
				t.Errorf("claim_next: %v", err)
				return
			}
			if out["empty"] == true {
				return
			}
			id := out["todo"].(map[string]any)["id"].(string)
			if _, loaded := claimed.LoadOrStore(id, true); loaded {
				dupes.Add(1)
			}
			claims.Add(1)
			if _, err := call(c, "SELECT switchboard.complete($1, $2)", ep, id); err != nil {
				t.Errorf("complete %s: %v", id, err)
				return
			}
		}
	})
	close(stop)
	purgers.Wait()
	if t.Failed() {
		return
	}
	p := purge(t, d.Pool, false)
	purgedTodos.Add(p.done)
	purgedEvents.Add(p.events)
	if claims.Load() != todos || dupes.Load() != 0 {
		t.Fatalf("%d claims, %d duplicates; want %d, 0", claims.Load(), dupes.Load(), todos)
	}
	if n := count(t, d, "SELECT count(*) FROM switchboard.todos"); n != 0 || purgedTodos.Load() != todos {
		t.Fatalf("%d todos left, %d purged; want 0, %d", n, purgedTodos.Load(), todos)
	}
	if n := count(t, d, "SELECT count(*) FROM switchboard.webhook_events"); n != 0 || purgedEvents.Load() != int64(len(events)) {
		t.Fatalf("%d events left, %d purged; want 0, %d", n, purgedEvents.Load(), len(events))
	}
}

// listenRevoked opens a session on the revocation channel.
func listenRevoked(t *testing.T, d *DB) *pgx.Conn {
	t.Helper()
	c := connect(t, d.URL)
	if _, err := c.Exec(ctx(), "LISTEN switchboard_revoked"); err != nil {
		t.Fatal(err)
	}
	return c
}

func nextNote(t *testing.T, c *pgx.Conn, wait time.Duration) (string, bool) {
	t.Helper()
	wctx, cancel := contextTimeout(wait)
	defer cancel()
	n, err := c.WaitForNotification(wctx)
	if err != nil {
		return "", false
	}
	return n.Payload, true
}

// redrive of one id and of a queue (optionally since a time): back to pending with a fresh
// attempt budget, recorded, each ringing the doorbell (a LISTEN session and ready_todos, what a
// server's bell reads, both see it).
func TestRedrive(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	d.set("doorbell_window_ms", 0)
	d.set("max_attempts", 3)
	ep := d.vend("alice", "worker", "inbox", "other")
	bell := listen(t, d)

	one := d.create(ep, "inbox", "one")
	d.deadLetter(ep, one)
	rings(t, bell, ep, 100*time.Millisecond, false) // what creating and failing rang
	since := d.clock()
	out := d.mustCall("SELECT switchboard.redrive(p_todo => $1, p_by => 'operator:ann')", one)
	if num(out["redriven"]) != 1 || out["by"] != "operator:ann" {
		t.Fatalf("redrive by id = %v", out)
	}
	if rings(t, bell, ep, 2*time.Second, true) != 1 {
		t.Fatal("redrive by id did not ring the doorbell")
	}
	if !d.ready(ep, since.Add(-time.Second))[one] {
		t.Fatal("the redriven todo is not among the ready todos the bell reads")
	}
	r := d.row(one)
	if r.State != "pending" || r.Attempt != 0 || r.MaxAttempts != 3 || r.CompletedAt != nil || r.Owner != nil {
		t.Fatalf("redriven row %+v", r)
	}
	var redrives int
	var by string
	if err := d.QueryRow(ctx(), "SELECT redrives, redriven_by FROM switchboard.todos WHERE id = $1", one).Scan(&redrives, &by); err != nil || redrives != 1 || by != "operator:ann" {
		t.Fatalf("redrive record: %d %q %v", redrives, by, err)
	}
	if got := d.mustClaim(ep, one); got["attempt"] == nil {
		t.Fatalf("claim after redrive: %v", got)
	}
	// Not a dead letter: conflict; unknown: not_found; both or neither selector: invalid.
	_, err := call(d.Pool, "SELECT switchboard.redrive(p_todo => $1)", one)
	wantCode(t, err, conflict, "redrive of a claimed todo")
	_, err = call(d.Pool, "SELECT switchboard.redrive(p_todo => gen_random_uuid())")
	wantCode(t, err, notFound, "redrive of an unknown todo")
	_, err = call(d.Pool, "SELECT switchboard.redrive()")
	wantCode(t, err, invalidArgument, "redrive without a selector")
	_, err = call(d.Pool, "SELECT switchboard.redrive(p_todo => $1, p_endpoint => $2, p_queue => 'inbox')", one, ep)
	wantCode(t, err, invalidArgument, "redrive with both selectors")

	// By queue, only those dead-lettered since a time; other queues and older ones stay.
	var recent, older []string
	for i := 0; i < 3; i++ {
		id := d.create(ep, "inbox", fmt.Sprint("q", i))
		d.deadLetter(ep, id)
		recent = append(recent, id)
	}
	old := d.create(ep, "inbox", "old")
	d.deadLetter(ep, old)
	d.exec("UPDATE switchboard.todos SET completed_at = now() - interval '2 hours' WHERE id = $1", old)
	older = append(older, old)
	elsewhere := d.create(ep, "other", "elsewhere")
	d.deadLetter(ep, elsewhere)
	rings(t, bell, ep, 100*time.Millisecond, false)
	out = d.mustCall("SELECT switchboard.redrive(p_endpoint => $1, p_queue => 'inbox', p_since => now() - interval '1 hour')", ep)
	if num(out["redriven"]) != 3 || out["by"] != "dba:postgres" {
		t.Fatalf("redrive by queue = %v, want 3 by dba:postgres", out)
	}
	if rings(t, bell, ep, 2*time.Second, true) != 1 {
		t.Fatal("redrive by queue did not ring the doorbell")
	}
	for _, id := range recent {
		if s := d.row(id).State; s != "pending" {
			t.Errorf("recent dead letter %s is %s", id, s)
		}
	}
	for _, id := range append(older, elsewhere) {
		if s := d.row(id).State; s != "failed" {
			t.Errorf("dead letter %s outside the selection is %s", id, s)
		}
	}
	// Without since: the older one too. Nothing left: redriven 0, no error, no ring.
	out = d.mustCall("SELECT switchboard.redrive(p_endpoint => $1, p_queue => 'inbox')", ep)
	if num(out["redriven"]) != 1 {
		t.Fatalf("redrive of the rest = %v", out)
	}
	rings(t, bell, ep, 100*time.Millisecond, false)
	out = d.mustCall("SELECT switchboard.redrive(p_endpoint => $1, p_queue => 'inbox')", ep)
	if num(out["redriven"]) != 0 || rings(t, bell, ep, 200*time.Millisecond, false) != 0 {
		t.Fatalf("empty redrive = %v, or it rang", out)
	}

	// A dead letter whose idempotency key a live todo holds again stays dead (never two live).
	key := "k1"
	first, _, err := createKey(d.Pool, ep, "inbox", "keyed", &key)
	if err != nil {
		t.Fatal(err)
	}
	d.deadLetter(ep, first)
	if _, created, err := createKey(d.Pool, ep, "inbox", "keyed again", &key); err != nil || !created {
		t.Fatalf("recreate with a freed key: %v %v", created, err)
	}
	_, err = call(d.Pool, "SELECT switchboard.redrive(p_todo => $1)", first)
	wantCode(t, err, conflict, "redrive of a dead letter whose key is live again")

	// A revoked endpoint's dead letters cannot run again.
	d.mustCall("SELECT switchboard.endpoint_revoke($1)", ep)
	_, err = call(d.Pool, "SELECT switchboard.redrive(p_endpoint => $1, p_queue => 'other')", ep)
	wantCode(t, err, conflict, "redrive on a revoked endpoint")
}

// cancel ends a pending or failed todo for good; a claimed one is a conflict; a cancelled todo
// is never claimed.
func TestCancel(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	pending := d.create(ep, "inbox", "pending")
	out := d.mustCall("SELECT switchboard.cancel($1, 'operator:ann')", pending)
	if out["state"] != "cancelled" || out["by"] != "operator:ann" {
		t.Fatalf("cancel = %v", out)
	}
	r := d.row(pending)
	if r.State != "cancelled" || r.CompletedAt == nil || r.Result["cancelled_by"] != "operator:ann" {
		t.Fatalf("cancelled row %+v", r)
	}
	if got, err := claimNext(d.Pool, ep); err != nil || got["empty"] != true {
		t.Fatalf("claim_next after cancel: %v %v", got, err)
	}
	if _, err := claim(d.Pool, ep, pending); sqlstate(err) != conflict && sqlstate(err) != notFound {
		t.Fatalf("claim of a cancelled todo: %v", err)
	}
	_, err := call(d.Pool, "SELECT switchboard.cancel($1)", pending)
	wantCode(t, err, conflict, "cancel twice")

	claimed := d.create(ep, "inbox", "claimed")
	d.mustClaim(ep, claimed)
	_, err = call(d.Pool, "SELECT switchboard.cancel($1)", claimed)
	wantCode(t, err, conflict, "cancel of a claimed todo")
	if s := d.row(claimed).State; s != "claimed" {
		t.Fatalf("refused cancel changed the todo to %s", s)
	}
	// Even with its lease expired, it is the holder's (or a claimer's) to settle.
	d.expireLease(claimed)
	_, err = call(d.Pool, "SELECT switchboard.cancel($1)", claimed)
	wantCode(t, err, conflict, "cancel of an expired claim")

	retry := d.create(ep, "inbox", "retry")
	d.mustClaim(ep, retry)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, retry)
	d.mustCall("SELECT switchboard.cancel($1)", retry)
	d.dueRetry(retry) // no-op now: a cancelled todo has no retry time
	if r := d.row(retry); r.State != "cancelled" || r.NextRetryAt != nil {
		t.Fatalf("cancelled retry %+v", r)
	}
	reap(t, d.Pool) // requeues the expired claim; the cancelled retry stays put
	if got, err := claimNext(d.Pool, ep); err != nil || got["todo"].(map[string]any)["id"] != claimed {
		t.Fatalf("claim_next after cancelling a retry: %v %v", got, err)
	}
	if got, err := claimNext(d.Pool, ep); err != nil || got["empty"] != true {
		t.Fatalf("claim_next found a cancelled todo: %v %v", got, err)
	}
	dead := d.create(ep, "inbox", "dead")
	d.deadLetter(ep, dead)
	d.mustCall("SELECT switchboard.cancel($1)", dead)
	_, err = call(d.Pool, "SELECT switchboard.cancel(gen_random_uuid())")
	wantCode(t, err, notFound, "cancel of an unknown todo")

	// Agents see the state in list_todos.
	list := d.mustCall("SELECT switchboard.list_todos($1, NULL, 'cancelled')::jsonb", ep)
	if n := len(list["todos"].([]any)); n != 3 {
		t.Fatalf("list_todos state=cancelled: %d todos, want 3", n)
	}
	// The queue gauge's view tells the states apart.
	var cancelled int
	if err := d.QueryRow(ctx(), "SELECT todos FROM switchboard.queue_depth WHERE endpoint_id = $1 AND state = 'cancelled'", ep).Scan(&cancelled); err != nil || cancelled != 3 {
		t.Fatalf("queue_depth cancelled = %d, %v", cancelled, err)
	}
}

// queue_depth (the /metrics gauge) tells dead letters from parked retries.
func TestQueueDepthSplitsFailed(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	retry := d.create(ep, "inbox", "retry")
	d.mustClaim(ep, retry)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, retry)
	for i := 0; i < 2; i++ {
		d.deadLetter(ep, d.create(ep, "inbox", "dead"))
	}
	got := map[string]int{}
	rows, err := d.Query(ctx(), "SELECT state, todos FROM switchboard.queue_depth WHERE endpoint_id = $1", ep)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		got[s] = n
	}
	if got["retry_wait"] != 1 || got["dead_letter"] != 2 || got["failed"] != 0 {
		t.Fatalf("queue_depth states %v, want retry_wait 1, dead_letter 2", got)
	}
}

// rotate keeps the endpoint (id, slug, todos), the old credential stops resolving at once, or
// after the grace; the servers hear rotated:<id> on switchboard_revoked.
func TestRotateCredential(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep, oldHash := d.vendCred("alice", "worker", "inbox")
	todo := d.create(ep, "inbox", "kept")
	var slug string
	if err := d.QueryRow(ctx(), "SELECT slug FROM switchboard.endpoints WHERE id = $1", ep).Scan(&slug); err != nil {
		t.Fatal(err)
	}
	resolves := func(hash []byte) bool {
		var id string
		err := d.QueryRow(ctx(), "SELECT endpoint_id FROM switchboard.endpoint_resolve($1)", hash).Scan(&id)
		if err == pgx.ErrNoRows {
			return false
		}
		if err != nil || id != ep {
			t.Fatalf("endpoint_resolve: %s %v", id, err)
		}
		return true
	}
	hash := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	revoked := listenRevoked(t, d)

	newHash := hash("sbk_new")
	out := d.mustCall("SELECT switchboard.endpoint_rotate($1, $2, 'sbk_new')", ep, newHash)
	if out["endpoint_id"] != ep || out["slug"] != slug || out["state"] != "active" || out["old_credential_until"] != nil {
		t.Fatalf("rotate = %v", out)
	}
	if resolves(oldHash) || !resolves(newHash) {
		t.Fatal("after rotate without grace: the old credential resolves, or the new one does not")
	}
	if p, ok := nextNote(t, revoked, 2*time.Second); !ok || p != "rotated:"+ep {
		t.Fatalf("revocation channel: %q %v, want rotated:%s", p, ok, ep)
	}
	if !d.exists("todos", todo) || d.row(todo).State != "pending" {
		t.Fatal("rotation touched the endpoint's todos")
	}

	// With a grace: both work until it ends, then expire_credentials forgets the old one and
	// tells the servers; nothing is said at rotation time.
	graceHash := hash("sbk_grace")
	out = d.mustCall("SELECT switchboard.endpoint_rotate($1, $2, 'sbk_grace', interval '10 minutes')", ep, graceHash)
	if out["old_credential_until"] == nil {
		t.Fatalf("rotate with grace = %v", out)
	}
	if !resolves(newHash) || !resolves(graceHash) {
		t.Fatal("within the grace both credentials must resolve")
	}
	if p, ok := nextNote(t, revoked, 200*time.Millisecond); ok {
		t.Fatalf("rotation with grace notified %q", p)
	}
	if n := count(t, d, "SELECT switchboard.expire_credentials()"); n != 0 {
		t.Fatalf("expire_credentials within the grace = %d", n)
	}
	d.exec("UPDATE switchboard.endpoints SET old_credential_until = now() - interval '1 second' WHERE id = $1", ep)
	if resolves(newHash) || !resolves(graceHash) {
		t.Fatal("after the grace the old credential must not resolve")
	}
	if n := count(t, d, "SELECT switchboard.expire_credentials()"); n != 1 {
		t.Fatalf("expire_credentials after the grace = %d", n)
	}
	if p, ok := nextNote(t, revoked, 2*time.Second); !ok || p != "rotated:"+ep {
		t.Fatalf("after the grace: %q %v", p, ok)
	}

	_, err := call(d.Pool, "SELECT switchboard.endpoint_rotate($1, $2, 'x', interval '-1 minute')", ep, hash("a"))
	wantCode(t, err, invalidArgument, "negative grace")
	_, err = call(d.Pool, "SELECT switchboard.endpoint_rotate(gen_random_uuid(), $1, 'x')", hash("b"))
	wantCode(t, err, notFound, "rotate of an unknown endpoint")
	d.mustCall("SELECT switchboard.endpoint_revoke($1)", ep)
	_, err = call(d.Pool, "SELECT switchboard.endpoint_rotate($1, $2, 'x')", ep, hash("c"))
	wantCode(t, err, conflict, "rotate of a revoked endpoint")
}
