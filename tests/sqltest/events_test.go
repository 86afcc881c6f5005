package sqltest

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// poll calls events_poll and decodes the answer.
func (d *DB) poll(c querier, ep, name string, args any, cursor *string) (out struct {
	Events []struct {
		EventID string         `json:"eventId"`
		Name    string         `json:"name"`
		Data    map[string]any `json:"data"`
	} `json:"events"`
	Cursor    string `json:"cursor"`
	Truncated bool   `json:"truncated"`
	HasMore   bool   `json:"hasMore"`
}) {
	d.t.Helper()
	a, _ := json.Marshal(args)
	var raw []byte
	if err := c.QueryRow(ctx(), `SELECT switchboard.events_poll($1, $2, $3, $4)`, ep, name, a, cursor).Scan(&raw); err != nil {
		d.t.Fatalf("events_poll: %v", err)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		d.t.Fatal(err)
	}
	return out
}

func (d *DB) record() {
	d.t.Helper()
	d.exec(`SELECT switchboard.events_record()`)
	d.settle()
}

// settle waits until every transaction that committed so far is below the cluster's oldest
// transaction in flight: readers bound by the snapshot's xmin see their rows. Transaction ids
// are cluster-wide, so other tests' databases count.
func (d *DB) settle() {
	d.t.Helper()
	var x string
	if err := d.QueryRow(ctx(), `SELECT pg_current_xact_id()::text`).Scan(&x); err != nil {
		d.t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var past bool
		if err := d.QueryRow(ctx(), `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, x).Scan(&past); err != nil {
			d.t.Fatal(err)
		}
		if past {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatal("a transaction in the cluster stayed open for 20 s")
		}
	}
}

// outboxMessages lists the outbox's webhook-ids (one per row, group rows once) in the order given.
func (d *DB) outboxMessages(order string) []string {
	d.t.Helper()
	rows, err := d.Query(ctx(), `SELECT message_id FROM switchboard.event_outbox ORDER BY `+order)
	if err != nil {
		d.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		d.t.Fatal(err)
	}
	return ids
}

// A todo becomes a todo.claimable occurrence once the recorder ran; a poll from a null cursor
// starts at now; the next poll from the returned cursor has nothing again.
func TestEventsPollTodoClaimable(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox", "other")
	first := d.poll(d.Pool, ep, "todo.claimable", map[string]any{}, nil)
	if len(first.Events) != 0 || first.Cursor == "" {
		t.Fatalf("null cursor: %+v", first)
	}
	id := d.create(ep, "inbox", "hello")
	d.create(ep, "other", "not this queue")
	d.record()
	got := d.poll(d.Pool, ep, "todo.claimable", map[string]any{"queue": "inbox"}, &first.Cursor)
	if len(got.Events) != 1 || got.Events[0].Data["todo"].(map[string]any)["id"] != id {
		t.Fatalf("after a push: %+v", got)
	}
	if !strings.HasPrefix(got.Events[0].EventID, "todo_"+id) {
		t.Fatalf("eventId %q", got.Events[0].EventID)
	}
	// Recording again writes nothing new (one event per todo and attempt).
	d.record()
	again := d.poll(d.Pool, ep, "todo.claimable", map[string]any{}, &first.Cursor)
	if len(again.Events) != 2 {
		t.Fatalf("unfiltered: %+v", again)
	}
	// The same cursor replays the same event ids.
	replay := d.poll(d.Pool, ep, "todo.claimable", map[string]any{"queue": "inbox"}, &first.Cursor)
	if len(replay.Events) != 1 || replay.Events[0].EventID != got.Events[0].EventID {
		t.Fatalf("replay: %+v", replay)
	}

	// A lease that expires makes the todo claimable again: a new event (attempt 1).
	d.mustClaim(ep, id)
	d.expireLease(id)
	d.record()
	exp := d.poll(d.Pool, ep, "todo.claimable", map[string]any{"queue": "inbox"}, &got.Cursor)
	if len(exp.Events) != 1 || exp.Events[0].EventID != "todo_"+id+"_1" {
		t.Fatalf("expired lease: %+v", exp)
	}
}

// Refusals: scope and cursors. A crafted cursor cannot widen scope (it holds a position only).
func TestEventsRefusals(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	cases := []struct {
		name, args string
		cursor     *string
		want       string
	}{
		{"todo.claimable", `{"queue": "elsewhere"}`, nil, forbidden},
		{"todo.claimable", `{"bogus": 1}`, nil, invalidArgument},
		{"todo.claimable", `{"queue": 5}`, nil, invalidArgument},
		{"nope.event", `{}`, nil, notFound},
		{"webhook.delivery", `{"webhook_id": "00000000-0000-0000-0000-000000000000"}`, nil, notFound},
		{"todo.claimable", `{}`, ptr("not a cursor"), invalidArgument},
		{"todo.claimable", `{}`, ptr(base64.RawURLEncoding.EncodeToString([]byte("1|webhook.delivery|5|0|1700000000"))), invalidArgument},
		{"todo.claimable", `{}`, ptr(base64.RawURLEncoding.EncodeToString([]byte("1|todo.claimable|99999999999|0|1700000000"))), invalidArgument},
	}
	for _, c := range cases {
		_, err := d.Exec(ctx(), `SELECT switchboard.events_poll($1, $2, $3::jsonb, $4)`, ep, c.name, c.args, c.cursor)
		if sqlstate(err) != c.want {
			t.Errorf("%s %s cursor=%v: %v, want %s", c.name, c.args, c.cursor, err, c.want)
		}
	}
	// Without list_todos in the allowlist: not offered, and refused.
	d.exec(`UPDATE switchboard.endpoints SET verbs = array_remove(verbs, 'list_todos') WHERE id = $1`, ep)
	var types string
	if err := d.QueryRow(ctx(), `SELECT switchboard.events_types($1)::text`, ep).Scan(&types); err != nil || strings.Contains(types, "todo.claimable") {
		t.Fatalf("events_types without list_todos: %s %v", types, err)
	}
	if _, err := d.Exec(ctx(), `SELECT switchboard.events_poll($1, 'todo.claimable', '{}', NULL)`, ep); sqlstate(err) != forbidden {
		t.Fatalf("poll without list_todos: %v", err)
	}
}

// The must-show: a producer holds its transaction open after it took its sequence
// value while a later one commits; a poll in between must not step past the held event.
func TestEventsHeldTransactionIsNotSkipped(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "owner", "inbox")
	d.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{github}', webhook_queues = '{inbox}' WHERE id = $1`, ep)
	var hook string
	if err := d.QueryRow(ctx(), `SELECT switchboard.webhook_create($1, 'github', 'inbox', $2, $3)->>'webhook_id'`,
		ep, strings.Repeat("t", 40), "whsec_"+randomHex(32)).Scan(&hook); err != nil {
		t.Fatal(err)
	}
	start := d.poll(d.Pool, ep, "webhook.delivery", map[string]any{}, nil)
	ingest := `SELECT switchboard.ingest($1, $2, 'push', true, 'ok', 'application/json', 2, '{}', '{}', 'title', 'delivered', NULL)`

	cs := d.conns(2)
	held, err := cs[0].Begin(ctx())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx())
	if _, err := held.Exec(ctx(), ingest, hook, "held"); err != nil { // takes the smaller id
		t.Fatal(err)
	}
	if _, err := cs[1].Exec(ctx(), ingest, hook, "later"); err != nil { // commits first
		t.Fatal(err)
	}
	between := d.poll(d.Pool, ep, "webhook.delivery", map[string]any{}, &start.Cursor)
	if len(between.Events) != 0 {
		t.Fatalf("poll while the held transaction is open returned %d events (would step past it)", len(between.Events))
	}
	if err := held.Commit(ctx()); err != nil {
		t.Fatal(err)
	}
	d.settle()
	after := d.poll(d.Pool, ep, "webhook.delivery", map[string]any{}, &between.Cursor)
	if len(after.Events) != 2 || after.Events[0].Data["delivery_id"] != "held" || after.Events[1].Data["delivery_id"] != "later" {
		t.Fatalf("after commit: %+v, want held then later", after.Events)
	}
	if after.Events[0].Data["webhook_id"] != hook || len(after.Events[0].Data["todo_ids"].([]any)) != 1 {
		t.Fatalf("data: %+v", after.Events[0].Data)
	}
	// maxEvents pages with hasMore.
	var raw []byte
	if err := d.QueryRow(ctx(), `SELECT switchboard.events_poll($1, 'webhook.delivery', '{}', $2, 1)`, ep, between.Cursor).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var page struct {
		Events  []any `json:"events"`
		HasMore bool  `json:"hasMore"`
	}
	_ = json.Unmarshal(raw, &page)
	if len(page.Events) != 1 || !page.HasMore {
		t.Fatalf("maxEvents 1: %s", raw)
	}
}

// Webhook subscriptions: verification first, then the outbox; a row taken by one sender is not
// taken by another; retries back off; 2xx removes it.
func TestEventsSubscribeAndOutbox(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	sub := `SELECT switchboard.events_subscribe($1, 'todo.claimable', '{}', 'https://example.com/hook', $2, NULL, NULL, NULL, $3)`
	var raw []byte
	if err := d.QueryRow(ctx(), sub, ep, secret, false).Scan(&raw); err != nil || !strings.Contains(string(raw), `"verify": true`) {
		t.Fatalf("unverified subscribe: %s %v", raw, err)
	}
	if _, err := d.Exec(ctx(), sub, ep, "whsec_short", true); sqlstate(err) != invalidArgument {
		t.Fatalf("bad secret: %v", err)
	}
	if _, err := d.Exec(ctx(), sub, ep, "not-whsec", true); sqlstate(err) != invalidArgument {
		t.Fatalf("bad secret: %v", err)
	}
	var res struct {
		ID            string `json:"id"`
		RefreshBefore string `json:"refreshBefore"`
		Cursor        string `json:"cursor"`
	}
	if err := d.QueryRow(ctx(), sub, ep, secret, true).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(raw, &res)
	if !strings.HasPrefix(res.ID, "sub_") || res.RefreshBefore == "" || res.Cursor == "" {
		t.Fatalf("subscribe: %s", raw)
	}
	// Idempotent: the same key, the same id, now with deliveryStatus.
	if err := d.QueryRow(ctx(), sub, ep, secret, false).Scan(&raw); err != nil || !strings.Contains(string(raw), res.ID) || !strings.Contains(string(raw), "deliveryStatus") {
		t.Fatalf("refresh: %s %v", raw, err)
	}

	id := d.create(ep, "inbox", "hello")
	d.record()
	d.exec(`SELECT switchboard.events_fanout()`)
	type taken struct {
		ID      int64
		Message string
		Body    map[string]any
	}
	take := func(c querier) []taken {
		rows, err := c.Query(ctx(), `SELECT id, message_id, body FROM switchboard.events_outbox_take(10)`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []taken
		for rows.Next() {
			var x taken
			if err := rows.Scan(&x.ID, &x.Message, &x.Body); err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		return out
	}
	cs := d.conns(2)
	got := take(cs[0])
	if len(got) != 1 || !strings.HasPrefix(got[0].Message, "todo_"+id) || got[0].Body["cursor"] == nil {
		t.Fatalf("take: %+v", got)
	}
	if other := take(cs[1]); len(other) != 0 {
		t.Fatalf("a second sender took %d rows already taken", len(other))
	}
	d.exec(`SELECT switchboard.events_outbox_done($1, 'retry', 'http_5xx')`, got[0].ID)
	var status string
	if err := d.QueryRow(ctx(), `SELECT last_error FROM switchboard.event_subscriptions WHERE id = $1`, res.ID).Scan(&status); err != nil || status != "http_5xx" {
		t.Fatalf("view: %q %v", status, err)
	}
	d.exec(`UPDATE switchboard.event_outbox SET next_at = now()`)
	again := take(cs[1])
	if len(again) != 1 || again[0].Message != got[0].Message {
		t.Fatalf("retry: %+v", again)
	}
	d.exec(`SELECT switchboard.events_outbox_done($1, 'ok')`, again[0].ID)
	var n int
	if err := d.QueryRow(ctx(), `SELECT count(*) FROM switchboard.event_outbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("outbox after ok: %d %v", n, err)
	}
	// Fan-out again sends nothing twice.
	d.record()
	d.exec(`SELECT switchboard.events_fanout()`)
	if got := take(cs[0]); len(got) != 0 {
		t.Fatalf("second fan-out: %+v", got)
	}
	if _, err := d.Exec(ctx(), `SELECT switchboard.events_unsubscribe($1, 'todo.claimable', '{}', 'https://example.com/hook')`, ep); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(ctx(), `SELECT switchboard.events_unsubscribe($1, 'todo.claimable', '{}', 'https://example.com/hook')`, ep); sqlstate(err) != notFound {
		t.Fatalf("second unsubscribe: %v", err)
	}
}

// A lapsed subscription refreshed with the client's last cursor replays what it missed, in
// order; a cursor older than retention is answered truncated (the SEP's gap on subscribe).
func TestEventsRefreshAfterLapseReplays(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	sub := `SELECT switchboard.events_subscribe($1, 'todo.claimable', '{}', 'https://example.com/hook', $2, $3, NULL, NULL, true)`
	var raw []byte
	if err := d.QueryRow(ctx(), sub, ep, secret, nil).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Cursor    string `json:"cursor"`
		Truncated bool   `json:"truncated"`
	}
	_ = json.Unmarshal(raw, &res)
	cursor := res.Cursor
	// The subscription lapses (the client stopped refreshing); todos arrive meanwhile.
	d.exec(`UPDATE switchboard.event_hooks SET refresh_before = now() - interval '1 minute'`)
	var ids []string
	for _, title := range []string{"a", "b", "c"} {
		ids = append(ids, d.create(ep, "inbox", title))
		d.record()
	}
	d.exec(`SELECT switchboard.events_fanout()`)
	if err := d.QueryRow(ctx(), sub, ep, secret, cursor).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	d.exec(`SELECT switchboard.events_fanout()`)
	got := d.outboxMessages("xact, seq")
	if len(got) != 3 || got[0] != "todo_"+ids[0]+"_0" || got[1] != "todo_"+ids[1]+"_0" || got[2] != "todo_"+ids[2]+"_0" {
		t.Fatalf("replayed %v, want a, b, c", got)
	}
	// Older than retention: truncated.
	var old string
	if err := d.QueryRow(ctx(), `SELECT switchboard.events_cursor('todo.claimable', pg_current_xact_id(), 0, now() - interval '30 days')`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	d.exec(`DELETE FROM switchboard.event_hooks`)
	if err := d.QueryRow(ctx(), sub, ep, secret, old).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(raw, &res)
	if !res.Truncated {
		t.Fatalf("cursor older than retention: %s", raw)
	}
	if p := d.poll(d.Pool, ep, "todo.claimable", map[string]any{}, &old); !p.Truncated {
		t.Fatalf("poll from a cursor older than retention: %+v", p)
	}
}

// A subscription that starts from a cursor older than retention (a lapsed one refreshed with an
// old cursor) sends the SEP's gap envelope, {"type":"gap","cursor"}, before anything else; the
// events still kept after the cursor follow once it is out, and its cursor replays them.
func TestEventsGapEnvelope(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	var old string
	if err := d.QueryRow(ctx(), `SELECT switchboard.events_cursor('todo.claimable', pg_current_xact_id(), 0, now() - interval '30 days')`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	d.poll(d.Pool, ep, "todo.claimable", map[string]any{}, nil) // the endpoint uses events: recorded
	id := d.create(ep, "inbox", "kept")
	d.record()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	var raw []byte
	if err := d.QueryRow(ctx(), `SELECT switchboard.events_subscribe($1, 'todo.claimable', '{}', 'https://example.com/hook', $2, $3, NULL, NULL, true)`,
		ep, secret, old).Scan(&raw); err != nil || !strings.Contains(string(raw), `"truncated": true`) {
		t.Fatalf("subscribe: %s %v", raw, err)
	}
	outbox := func() []string { return d.outboxMessages("id") }
	d.exec(`SELECT switchboard.events_fanout()`) // waits for the gap envelope
	if got := outbox(); len(got) != 1 || !strings.HasPrefix(got[0], "msg_gap_") {
		t.Fatalf("outbox before the gap went out: %v", got)
	}
	var rowID int64
	var body map[string]any
	if err := d.QueryRow(ctx(), `SELECT id, body FROM switchboard.events_outbox_take(10)`).Scan(&rowID, &body); err != nil {
		t.Fatal(err)
	}
	cursor, _ := body["cursor"].(string)
	if body["type"] != "gap" || cursor == "" || len(body) != 2 {
		t.Fatalf("gap envelope: %v", body)
	}
	d.exec(`SELECT switchboard.events_outbox_done($1, 'ok')`, rowID)
	d.exec(`SELECT switchboard.events_fanout()`)
	if got := outbox(); len(got) != 1 || got[0] != "todo_"+id+"_0" {
		t.Fatalf("outbox after the gap: %v, want the kept todo", got)
	}
	// The gap's cursor is fresh (not truncated again) and replays what is kept after it.
	if p := d.poll(d.Pool, ep, "todo.claimable", map[string]any{}, &cursor); p.Truncated || len(p.Events) != 1 || p.Events[0].EventID != "todo_"+id+"_0" {
		t.Fatalf("poll from the gap's cursor: %+v", p)
	}
}

// maxAgeMs on events/subscribe floors the replay as on events/poll (the SEP: replay begins at
// the later of the cursor and now - maxAgeMs, truncated when the floor passed the cursor): a
// lapsed subscription refreshed with an old cursor gets only the occurrences not older than
// the floor; without maxAgeMs the same cursor replays them all.
func TestEventsSubscribeMaxAgeFloorsReplay(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	d.poll(d.Pool, ep, "todo.claimable", map[string]any{}, nil) // the endpoint uses events: recorded
	var old string                                              // a position before both todos, stood 10 minutes ago
	if err := d.QueryRow(ctx(), `SELECT switchboard.events_cursor('todo.claimable', pg_snapshot_xmin(pg_current_snapshot()), 0, now() - interval '10 minutes')`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	stale := d.create(ep, "inbox", "ten minutes old")
	d.record()
	fresh := d.create(ep, "inbox", "just now")
	d.record()
	d.exec(`UPDATE switchboard.event_log SET occurred_at = now() - interval '10 minutes' WHERE todo_id = $1`, stale)

	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	sub := `SELECT switchboard.events_subscribe($1, 'todo.claimable', '{}', 'https://example.com/hook', $2, $3, $4, NULL, true)`
	if _, err := d.Exec(ctx(), sub, ep, secret, old, -1); sqlstate(err) != invalidArgument {
		t.Fatalf("negative maxAgeMs: %v", err)
	}
	outbox := func() []string { return d.outboxMessages("xact, seq") }
	var raw []byte
	if err := d.QueryRow(ctx(), sub, ep, secret, old, 300000).Scan(&raw); err != nil || !strings.Contains(string(raw), `"truncated": true`) {
		t.Fatalf("subscribe with maxAgeMs: %s %v", raw, err)
	}
	var gap int64
	if err := d.QueryRow(ctx(), `SELECT id FROM switchboard.events_outbox_take(10)`).Scan(&gap); err != nil {
		t.Fatal(err)
	}
	d.exec(`SELECT switchboard.events_outbox_done($1, 'ok')`, gap) // the gap envelope goes first
	d.exec(`SELECT switchboard.events_fanout()`)
	if got := outbox(); len(got) != 1 || got[0] != "todo_"+fresh+"_0" {
		t.Fatalf("replay floored by maxAgeMs: %v, want only the fresh todo", got)
	}
	// events/poll from the same cursor with the same floor answers the same.
	if err := d.QueryRow(ctx(), `SELECT switchboard.events_poll($1, 'todo.claimable', '{}', $2, NULL, 300000)`, ep, old).Scan(&raw); err != nil ||
		!strings.Contains(string(raw), "todo_"+fresh) || strings.Contains(string(raw), "todo_"+stale) || !strings.Contains(string(raw), `"truncated": true`) {
		t.Fatalf("poll with maxAgeMs: %s %v", raw, err)
	}

	// Without maxAgeMs, the same cursor (within retention) replays both, not truncated.
	d.exec(`DELETE FROM switchboard.event_outbox`)
	d.exec(`DELETE FROM switchboard.event_hooks`)
	if err := d.QueryRow(ctx(), sub, ep, secret, old, nil).Scan(&raw); err != nil || !strings.Contains(string(raw), `"truncated": false`) {
		t.Fatalf("subscribe without maxAgeMs: %s %v", raw, err)
	}
	d.exec(`SELECT switchboard.events_fanout()`)
	if got := outbox(); len(got) != 2 || got[0] != "todo_"+stale+"_0" || got[1] != "todo_"+fresh+"_0" {
		t.Fatalf("replay without maxAgeMs: %v, want both", got)
	}
}

// Suspension follows the SEP's failure-rate rule: above 95% failures over a rolling hour with
// at least 100 attempts (successes counted from the batch path too). 410/413 do not count; an
// hour-old sample is forgotten; a refresh says active: false once and reactivates.
func TestEventsSuspensionByFailureRate(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	sub := `SELECT switchboard.events_subscribe($1, 'todo.claimable', '{}', 'https://example.com/hook', $2, NULL, NULL, NULL, true)`
	var raw []byte
	if err := d.QueryRow(ctx(), sub, ep, secret).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var hook string
	if err := d.QueryRow(ctx(), `SELECT id FROM switchboard.event_hooks`).Scan(&hook); err != nil {
		t.Fatal(err)
	}
	n := 0
	row := func() int64 { // an outbox row as a sender has taken it (one attempt)
		n++
		var id int64
		if err := d.QueryRow(ctx(), `INSERT INTO switchboard.event_outbox (hook_id, message_id, body, attempts)
		                             VALUES ($1, $2, '{}', 1) RETURNING id`, hook, "m"+strings.Repeat("x", n)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	active := func() bool {
		var a bool
		if err := d.QueryRow(ctx(), `SELECT active FROM switchboard.event_hooks WHERE id = $1`, hook).Scan(&a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	fail := func(k int) {
		for range k {
			d.exec(`SELECT switchboard.events_outbox_done($1, 'retry', 'http_5xx')`, row())
		}
	}
	// 5 successes in one batch, 95 failures: 95% of 100, not above it.
	oks := []int64{row(), row(), row(), row(), row()}
	d.exec(`SELECT switchboard.events_outbox_done_many($1, $2, $3)`, oks, []string{"ok", "ok", "ok", "ok", "ok"}, []*string{nil, nil, nil, nil, nil})
	fail(95)
	for range 10 { // gone (410) is the receiver's choice: no count
		d.exec(`SELECT switchboard.events_outbox_done($1, 'gone', 'http_4xx')`, row())
	}
	if !active() {
		t.Fatal("suspended at 95% failures of 100 attempts")
	}
	fail(1) // 96 of 101
	if active() {
		t.Fatal("not suspended at 96 failures of 101 attempts")
	}
	// A refresh says it was suspended, reactivates, and starts a fresh sample.
	if err := d.QueryRow(ctx(), sub, ep, secret).Scan(&raw); err != nil || !strings.Contains(string(raw), `"active": false`) {
		t.Fatalf("refresh of a suspended subscription: %s %v", raw, err)
	}
	fail(1)
	if !active() {
		t.Fatal("one failure after the refresh suspended it again")
	}
	// A sample older than the rolling hour is forgotten: 200 failures two hours ago, then one.
	d.exec(`UPDATE switchboard.event_hooks SET tally_start = now() - interval '2 hours', tally_attempts = 200, tally_failures = 200`)
	fail(1)
	if !active() {
		t.Fatal("suspended on failures more than an hour old")
	}
	// Half of the previous hour is still inside the rolling hour: 200 failures there weigh 100.
	d.exec(`UPDATE switchboard.event_hooks SET tally_start = now() - interval '90 minutes', tally_attempts = 200, tally_failures = 200`)
	fail(1)
	if active() {
		t.Fatal("not suspended with ~100 failures in the rolling hour")
	}
}

// The fan-out reads once per group of subscriptions that share (name, endpoint, arguments,
// position) and writes one row per event for the group (its members in hook_ids): each subscription still gets exactly its own events,
// whatever its arguments and position, once; also when it runs in chunks of subscriptions.
func TestEventsFanoutGroups(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox", "other")
	before := d.poll(d.Pool, ep, "todo.claimable", map[string]any{}, nil).Cursor
	t0 := d.create(ep, "inbox", "before")
	d.record()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	sub := func(args, url string, cursor *string) string {
		var raw []byte
		if err := d.QueryRow(ctx(), `SELECT switchboard.events_subscribe($1, 'todo.claimable', $2, $3, $4, $5, NULL, NULL, true)`,
			ep, args, url, secret, cursor).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var res struct{ ID string }
		_ = json.Unmarshal(raw, &res)
		return res.ID
	}
	all := sub(`{}`, "https://example.com/a", nil)
	inbox := sub(`{"queue": "inbox"}`, "https://example.com/a", nil)     // same URL, other arguments
	replay := sub(`{}`, "https://example.com/c", &before)                // an older position: t0 too
	again := sub(`{}`, "https://example.com/d", nil)                     // like all
	other := sub(`{"queue": "other"}`, "https://example.com/e", &before) // older, and narrower
	outbox := func() map[string][]string {
		// A group row stands for each of its members.
		rows, err := d.Query(ctx(), `SELECT m, message_id, body ->> 'eventId'
		                               FROM switchboard.event_outbox o, unnest(coalesce(o.hook_ids, ARRAY[o.hook_id])) m
		                              ORDER BY o.id, m`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string][]string{}
		for rows.Next() {
			var hook, msg, eventID string
			if err := rows.Scan(&hook, &msg, &eventID); err != nil {
				t.Fatal(err)
			}
			if msg != eventID {
				t.Fatalf("row %s: webhook-id %s, body eventId %s", hook, msg, eventID)
			}
			got[hook] = append(got[hook], strings.TrimSuffix(strings.TrimPrefix(msg, "todo_"), "_0"))
		}
		return got
	}
	check := func(round string, want map[string][]string) {
		t.Helper()
		got := outbox()
		for hook, ids := range want {
			if strings.Join(got[hook], ",") != strings.Join(ids, ",") {
				t.Fatalf("%s: %s got %v, want %v", round, hook, got[hook], ids)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: rows for %d subscriptions, want %d", round, len(got), len(want))
		}
	}

	t1 := d.create(ep, "inbox", "one")
	t2 := d.create(ep, "other", "two")
	d.record()
	d.exec(`SELECT switchboard.events_fanout()`)
	check("first fan-out", map[string][]string{
		all: {t1, t2}, inbox: {t1}, replay: {t0, t1, t2}, again: {t1, t2}, other: {t2}})
	d.exec(`SELECT switchboard.events_fanout()`) // nothing new: nothing twice
	check("again", map[string][]string{
		all: {t1, t2}, inbox: {t1}, replay: {t0, t1, t2}, again: {t1, t2}, other: {t2}})

	// Every position is the same bound now: one group per arguments.
	var positions int
	if err := d.QueryRow(ctx(), `SELECT count(DISTINCT (pos_xact, pos_seq)) FROM switchboard.event_hooks`).Scan(&positions); err != nil || positions != 1 {
		t.Fatalf("positions after the fan-out: %d %v", positions, err)
	}
	d.exec(`DELETE FROM switchboard.event_outbox`)
	t3 := d.create(ep, "other", "three")
	t4 := d.create(ep, "inbox", "four")
	d.record()
	// In chunks of two subscriptions (as a server does, sending the first while it fans out
	// the rest): each call answers the subscriptions it moved.
	for _, want := range []int{2, 2, 1, 0} {
		var moved int
		if err := d.QueryRow(ctx(), `SELECT switchboard.events_fanout(2)`).Scan(&moved); err != nil || moved != want {
			t.Fatalf("events_fanout(2): %d %v, want %d", moved, err, want)
		}
	}
	check("second fan-out", map[string][]string{
		all: {t3, t4}, inbox: {t4}, replay: {t3, t4}, again: {t3, t4}, other: {t3}})
}

// A group row is one outbox row per event for subscriptions that share event type, endpoint
// and arguments (whatever their positions): the take expands it to a POST per active member (one that left is not sent), only a member whose POST
// failed gets a row of its own (retried as any row), and the group row goes once every member
// has an outcome; a taken row whose sender died is sent again to the members not yet recorded.
func TestEventsOutboxGroupRow(t *testing.T) {
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	hooks := map[string]string{}
	for _, name := range []string{"a", "b", "c", "d"} {
		var raw []byte
		if err := d.QueryRow(ctx(), `SELECT switchboard.events_subscribe($1, 'todo.claimable', '{}', $2, $3, NULL, NULL, NULL, true)`,
			ep, "https://example.com/"+name, secret).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var res struct{ ID string }
		_ = json.Unmarshal(raw, &res)
		hooks[res.ID] = name
	}
	fanout := func(title string) {
		t.Helper()
		d.create(ep, "inbox", title)
		d.record()
		d.exec(`SELECT switchboard.events_fanout()`)
	}
	type post struct {
		ID      int64
		Hook    string
		Message string
	}
	take := func(lease int) []post {
		t.Helper()
		rows, err := d.Query(ctx(), `SELECT id, hook_id, message_id, body ? 'cursor' FROM switchboard.events_outbox_take(10, $1)`, lease)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []post
		for rows.Next() {
			var p post
			var cursor bool
			if err := rows.Scan(&p.ID, &p.Hook, &p.Message, &cursor); err != nil {
				t.Fatal(err)
			}
			if !cursor {
				t.Fatalf("POST to %s without its watermark cursor", hooks[p.Hook])
			}
			p.Hook = hooks[p.Hook]
			out = append(out, p)
		}
		return out
	}
	names := func(ps []post) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Hook)
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	done := func(ps []post, outcomes ...string) {
		t.Helper()
		ids, hs, errs := make([]int64, len(ps)), make([]string, len(ps)), make([]*string, len(ps))
		cat := "http_5xx"
		for i, p := range ps {
			ids[i] = p.ID
			for id, n := range hooks {
				if n == p.Hook {
					hs[i] = id
				}
			}
			if outcomes[i] == "retry" {
				errs[i] = &cat
			}
		}
		d.exec(`SELECT switchboard.events_outbox_done_posts($1, $2, $3, $4)`, ids, hs, outcomes, errs)
	}
	outbox := func() string { // each row: its subscription, or its members
		var s string
		if err := d.QueryRow(ctx(), `SELECT coalesce(string_agg(coalesce(array_to_string(hook_ids, '+'), hook_id), ' ' ORDER BY id), '')
		                               FROM switchboard.event_outbox`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		for id, n := range hooks {
			s = strings.ReplaceAll(s, id, n)
		}
		return s
	}

	// Each subscribed at its own position (its subscribe's snapshot): still one group row.
	fanout("second")
	if got := outbox(); strings.Count(got, "+") != 3 || strings.Contains(got, " ") {
		t.Fatalf("one group row for the four: %q", got)
	}
	// d leaves between the fan-out and the take: it is not sent.
	if _, err := d.Exec(ctx(), `SELECT switchboard.events_unsubscribe($1, 'todo.claimable', '{}', 'https://example.com/d')`, ep); err != nil {
		t.Fatal(err)
	}
	got := take(30)
	if names(got) != "a,b,c" || got[0].ID != got[2].ID || got[0].Message != got[2].Message {
		t.Fatalf("take of the group row: %+v", got)
	}
	outcomes := map[string]string{"a": "ok", "b": "retry", "c": "ok"}
	var list []string
	for _, p := range got {
		list = append(list, outcomes[p.Hook])
	}
	done(got, list...)
	if o := outbox(); o != "b" {
		t.Fatalf("outbox after one member failed: %q, want b's retry row only", o)
	}
	var lastError *string
	var delivered bool
	if err := d.QueryRow(ctx(), `SELECT (SELECT last_error FROM switchboard.event_hooks WHERE url LIKE '%/b'),
	                                    (SELECT last_delivery_at IS NOT NULL FROM switchboard.event_hooks WHERE url LIKE '%/a')`).
		Scan(&lastError, &delivered); err != nil || lastError == nil || *lastError != "http_5xx" || !delivered {
		t.Fatalf("tally: b %v, a delivered %v, %v", lastError, delivered, err)
	}
	d.exec(`UPDATE switchboard.event_outbox SET next_at = now()`) // the backoff is over
	retry := take(30)
	if names(retry) != "b" || retry[0].Message != got[0].Message {
		t.Fatalf("retry: %+v", retry)
	}
	d.exec(`SELECT switchboard.events_outbox_done($1, 'ok')`, retry[0].ID)

	// A sender records a only, then dies: after the lease, b and c are sent again; c was
	// suspended meanwhile, so its event waits in a row of its own for the refresh.
	fanout("third")
	got = take(30)
	if names(got) != "a,b,c" {
		t.Fatalf("take: %+v", got)
	}
	for _, p := range got {
		if p.Hook == "a" {
			done([]post{p}, "ok")
		}
	}
	d.exec(`UPDATE switchboard.event_outbox SET leased_until = now()`)
	d.exec(`UPDATE switchboard.event_hooks SET active = false WHERE url LIKE '%/c'`)
	again := take(30)
	if names(again) != "b" || again[0].Message != got[0].Message {
		t.Fatalf("after the lease: %+v", again)
	}
	done(again, "ok")
	if o := outbox(); o != "c" {
		t.Fatalf("outbox: %q, want c's own row", o)
	}
	d.exec(`UPDATE switchboard.event_hooks SET active = true`)
	d.exec(`DELETE FROM switchboard.event_outbox`)

	// A released server's call (no subscriptions): outcomes by the take's order.
	fanout("fourth")
	got = take(30)
	if names(got) != "a,b,c" {
		t.Fatalf("take: %+v", got)
	}
	ids := []int64{got[0].ID, got[1].ID, got[2].ID}
	list = []string{outcomes[got[0].Hook], outcomes[got[1].Hook], outcomes[got[2].Hook]}
	d.exec(`SELECT switchboard.events_outbox_done_many($1, $2, $3)`, ids, list, []*string{nil, nil, nil})
	if o := outbox(); o != "b" {
		t.Fatalf("outbox after the released server's outcomes: %q, want b", o)
	}
}
