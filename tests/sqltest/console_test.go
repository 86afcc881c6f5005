package sqltest

import (
	"testing"
)

// The console's SQL (db/code/console_queues.sql, console_webhooks.sql): each function takes the
// signed-in human and reaches only that human's rows.

func (d *DB) humanID(name string) string {
	d.t.Helper()
	var id string
	if err := d.QueryRow(ctx(), "SELECT id FROM switchboard.humans WHERE name = $1", name).Scan(&id); err != nil {
		d.t.Fatal(err)
	}
	return id
}

func ids(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(map[string]any)["id"].(string))
	}
	return out
}

// Bob sees none of alice's todos or webhooks; her ids, malformed ids and unknown ids are one
// not_found with one message; an operator sees both.
func TestConsoleScoping(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	aep := d.vend("alice", "worker", "inbox")
	bep := d.vend("bob", "worker", "inbox")
	alice, bob := d.humanID("alice"), d.humanID("bob")
	atodo := d.create(aep, "inbox", "alice's")
	btodo := d.create(bep, "inbox", "bob's")
	ahook := d.signedHook(aep, "stripe")

	list := d.mustCall("SELECT switchboard.console_todos($1, false)", bob)
	if got := ids(list["todos"]); len(got) != 1 || got[0] != btodo {
		t.Fatalf("bob's list: %v", got)
	}
	list = d.mustCall("SELECT switchboard.console_todos($1, true)", bob)
	if got := ids(list["todos"]); len(got) != 2 {
		t.Fatalf("operator's list: %v", got)
	}

	for i, q := range []string{
		"SELECT switchboard.console_todo($1, false, $2)",
		"SELECT switchboard.console_todo_act($1, false, 'human:bob', 'cancel', $2)",
		"SELECT switchboard.console_webhook($1, false, $2)",
		"SELECT switchboard.console_deliveries($1, false, $2)",
		"SELECT switchboard.console_webhook_set_secret($1, false, $2, 'whsec_oZ8nus9PHnoltEtWZ3pGITZdeHWHoqnL')",
	} {
		foreign := atodo
		if i >= 2 {
			foreign = ahook
		}
		for _, id := range []string{foreign, "00000000-0000-4000-8000-000000000000", "not-a-uuid", ""} {
			_, err := call(d.Pool, q, bob, id)
			wantCode(t, err, notFound, q+" "+id)
			if i < 2 && pgMessage(err) != "todo not found" || i >= 2 && pgMessage(err) != "webhook not found" {
				t.Fatalf("%s %q: message %q", q, id, pgMessage(err))
			}
		}
	}
	// Alice reaches her own; nothing of bob's changed.
	if got := d.mustCall("SELECT switchboard.console_todo($1, false, $2)", alice, atodo); got["title"] != "alice's" {
		t.Fatalf("alice's todo: %v", got)
	}
	if d.row(atodo).State != "pending" {
		t.Fatal("bob cancelled alice's todo")
	}
	var queues []map[string]any
	if err := d.QueryRow(ctx(), "SELECT switchboard.console_queues($1, false)", bob).Scan(&queues); err != nil ||
		len(queues) != 1 || queues[0]["endpoint_id"] != bep || num(queues[0]["pending"]) != 1 {
		t.Fatalf("bob's queues: %v %v", queues, err)
	}
	var hooks []map[string]any
	if err := d.QueryRow(ctx(), "SELECT switchboard.console_webhooks($1, false)", bob).Scan(&hooks); err != nil || len(hooks) != 0 {
		t.Fatalf("bob's webhooks: %v %v", hooks, err)
	}
	if err := d.QueryRow(ctx(), "SELECT switchboard.console_webhooks($1, false)", alice).Scan(&hooks); err != nil ||
		len(hooks) != 1 || hooks[0]["webhook_id"] != ahook || hooks[0]["secret_issuer"] != "provider" {
		t.Fatalf("alice's webhooks: %v %v", hooks, err)
	}
	// Bob's bulk action over alice's ids takes nothing; a push into alice's endpoint is not found.
	out := d.mustCall("SELECT switchboard.console_act($1, false, 'human:bob', 'cancel', $2)", bob, []string{atodo})
	if num(out["count"]) != 0 {
		t.Fatalf("bob's bulk cancel: %v", out)
	}
	_, err := call(d.Pool, "SELECT switchboard.console_push($1, false, $2, 'inbox', 'x', NULL)", bob, aep)
	wantCode(t, err, notFound, "push into alice's endpoint")

	// Alice sets the Stripe secret through the function set-secret uses; it never comes back.
	out = d.mustCall("SELECT switchboard.console_webhook_set_secret($1, false, $2, 'whsec_oZ8nus9PHnoltEtWZ3pGITZdeHWHoqnL', '1 hour')", alice, ahook)
	if out["secret_source"] != "provider" || out["previous_secret_until"] == nil || out["signing_secret"] != nil {
		t.Fatalf("set secret: %v", out)
	}
	_, err = call(d.Pool, "SELECT switchboard.console_webhook_set_secret($1, false, $2, 'sk_live_nope')", alice, ahook)
	wantCode(t, err, invalidArgument, "a malformed secret")
}

// Redrive and cancel: one, the selected, or all matching a filter, with the count first.
func TestConsoleBulkActions(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox", "other")
	alice := d.humanID("alice")
	var dead []string
	for i := 0; i < 4; i++ {
		id := d.create(ep, "inbox", "dead")
		d.deadLetter(ep, id)
		dead = append(dead, id)
	}
	otherDead := d.create(ep, "other", "dead too")
	d.deadLetter(ep, otherDead)
	pending := d.create(ep, "inbox", "waiting")

	count := func(action string, sel []string, queue, state any) int {
		t.Helper()
		var n int
		if err := d.QueryRow(ctx(), "SELECT switchboard.console_action_count($1, false, $2, $3, $4, $5)",
			alice, action, sel, queue, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("redrive", nil, "inbox", nil); n != 4 {
		t.Fatalf("redrive count in inbox: %d", n)
	}
	if n := count("redrive", nil, nil, nil); n != 5 {
		t.Fatalf("redrive count: %d", n)
	}
	if n := count("cancel", nil, "inbox", nil); n != 5 {
		t.Fatalf("cancel count in inbox (4 dead + 1 pending): %d", n)
	}
	if n := count("redrive", []string{dead[0], pending, "junk"}, nil, nil); n != 1 {
		t.Fatalf("redrive count of a selection: %d", n)
	}
	_, err := call(d.Pool, "SELECT switchboard.console_action_count($1, false, 'redrive', NULL, NULL, 'nonsense')::text::jsonb", alice)
	wantCode(t, err, invalidArgument, "an unknown state")

	// One: a dead letter goes back; a pending todo is a conflict.
	out := d.mustCall("SELECT switchboard.console_todo_act($1, false, 'human:alice', 'redrive', $2)", alice, dead[0])
	if num(out["redriven"]) != 1 || d.row(dead[0]).State != "pending" {
		t.Fatalf("redrive one: %v", out)
	}
	_, err = call(d.Pool, "SELECT switchboard.console_todo_act($1, false, 'human:alice', 'redrive', $2)", alice, pending)
	wantCode(t, err, conflict, "redrive a pending todo")

	// The selected: two of the rest.
	out = d.mustCall("SELECT switchboard.console_act($1, false, 'human:alice', 'redrive', $2)", alice, dead[1:3])
	if num(out["count"]) != 2 || len(out["ids"].([]any)) != 2 {
		t.Fatalf("redrive selected: %v", out)
	}
	var by string
	if err := d.QueryRow(ctx(), "SELECT redriven_by FROM switchboard.todos WHERE id = $1", dead[1]).Scan(&by); err != nil || by != "human:alice" {
		t.Fatalf("redriven_by %q %v", by, err)
	}
	// All matching a filter: the dead letters of the queue other; inbox's last one stays.
	out = d.mustCall("SELECT switchboard.console_act($1, false, 'human:alice', 'redrive', NULL, 'other', 'dead_letter')", alice)
	if num(out["count"]) != 1 || d.row(otherDead).State != "pending" || d.row(dead[3]).State != "failed" {
		t.Fatalf("redrive by filter: %v", out)
	}
	// Cancel all pending with "waiting" in the title: one.
	out = d.mustCall("SELECT switchboard.console_act($1, false, 'human:alice', 'cancel', NULL, 'inbox', 'pending', 'WAIT')", alice)
	if num(out["count"]) != 1 || d.row(pending).State != "cancelled" {
		t.Fatalf("cancel by filter: %v", out)
	}

	// The list's filters and pages.
	list := d.mustCall("SELECT switchboard.console_todos($1, false, 'inbox', 'pending', NULL, NULL, NULL, NULL, 2)", alice)
	if len(list["todos"].([]any)) != 2 || list["next"] == nil {
		t.Fatalf("first page: %v", list)
	}
	next := list["next"].(map[string]any)
	list2 := d.mustCall("SELECT switchboard.console_todos($1, false, 'inbox', 'pending', NULL, NULL, $2, $3, 2)",
		alice, parseTS(t, next["at"]), next["id"])
	if len(list2["todos"].([]any)) != 1 || list2["next"] != nil {
		t.Fatalf("second page: %v", list2)
	}
	seen := map[string]bool{}
	for _, id := range append(ids(list["todos"]), ids(list2["todos"])...) {
		seen[id] = true
	}
	if !seen[dead[0]] || !seen[dead[1]] || !seen[dead[2]] {
		t.Fatalf("pages miss a redriven todo: %v", seen)
	}

	// Push: into a granted queue; a queue outside the grant is refused with nothing written.
	out = d.mustCall("SELECT switchboard.console_push($1, false, $2, 'inbox', 'from the console', '{\"a\": 1}')", alice, ep)
	if out["created"] != true {
		t.Fatalf("push: %v", out)
	}
	_, err = call(d.Pool, "SELECT switchboard.console_push($1, false, $2, 'elsewhere', 'x', NULL)", alice, ep)
	wantCode(t, err, invalidArgument, "push outside the grant")
	detail := d.mustCall("SELECT switchboard.console_todo($1, false, $2)", alice, out["id"])
	if detail["source"] != "console" || detail["payload"].(map[string]any)["a"] != float64(1) {
		t.Fatalf("pushed todo: %v", detail)
	}
}

// The rollup counts what finished past its watermark once, without scanning the history, and
// the chart and the queue rows read it.
func TestConsoleRollup(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	bep := d.vend("bob", "worker", "inbox")
	alice, bob := d.humanID("alice"), d.humanID("bob")
	rollup := func() (counted int) {
		t.Helper()
		for {
			var n int
			var more bool
			if err := d.QueryRow(ctx(), "SELECT counted, more FROM switchboard.console_rollup()").Scan(&n, &more); err != nil {
				t.Fatal(err)
			}
			counted += n
			if !more {
				return counted
			}
		}
	}
	rollup() // catch up on the empty day
	for i := 0; i < 3; i++ {
		id := d.create(ep, "inbox", "ok")
		d.mustClaim(ep, id)
		d.mustCall("SELECT switchboard.complete($1, $2)", ep, id)
	}
	d.deadLetter(ep, d.create(ep, "inbox", "bad"))
	retry := d.create(ep, "inbox", "again")
	d.mustClaim(ep, retry)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, retry) // a parked retry: one failed attempt
	d.mustCall("SELECT switchboard.console_todo_act($1, false, 'human:alice', 'cancel', $2)", alice, d.create(ep, "inbox", "no"))
	id := d.create(bep, "inbox", "bob's")
	d.mustClaim(bep, id)
	d.mustCall("SELECT switchboard.complete($1, $2)", bep, id)

	if n := rollup(); n != 7 {
		t.Fatalf("rollup counted %d, want 7 (4 done, 1 failed, 1 dead, 1 cancelled)", n)
	}
	if n := rollup(); n != 0 {
		t.Fatalf("second rollup counted %d again", n)
	}
	chart := d.mustCall("SELECT switchboard.console_chart($1, false)", alice)
	sum := func(key, field string) (s int) {
		for _, b := range chart[key].([]any) {
			s += num(b.(map[string]any)[field])
		}
		return
	}
	if len(chart["minutes"].([]any)) != 60 || len(chart["hours"].([]any)) != 24 {
		t.Fatalf("chart buckets: %d minutes, %d hours", len(chart["minutes"].([]any)), len(chart["hours"].([]any)))
	}
	if sum("minutes", "done") != 3 || sum("minutes", "failed") != 1 || sum("minutes", "dead") != 1 ||
		sum("hours", "done") != 3 {
		t.Fatalf("alice's chart: done %d failed %d dead %d (hours done %d)",
			sum("minutes", "done"), sum("minutes", "failed"), sum("minutes", "dead"), sum("hours", "done"))
	}
	var queues []map[string]any
	if err := d.QueryRow(ctx(), "SELECT switchboard.console_queues($1, false)", bob).Scan(&queues); err != nil ||
		len(queues) != 1 || num(queues[0]["done_24h"]) != 1 {
		t.Fatalf("bob's queues: %v %v", queues, err)
	}

	// A transaction still open that finished a todo holds the watermark back until it commits.
	tx, err := d.Begin(ctx())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx())
	late := d.create(ep, "inbox", "late")
	d.mustClaim(ep, late)
	if _, err := tx.Exec(ctx(), "SELECT switchboard.complete($1, $2)", ep, late); err != nil {
		t.Fatal(err)
	}
	rollup()
	if err := tx.Commit(ctx()); err != nil {
		t.Fatal(err)
	}
	if n := rollup(); n != 1 {
		t.Fatalf("the late commit was counted %d times", n)
	}
}
