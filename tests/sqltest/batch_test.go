package sqltest

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Batches (contract §12): claim_next_many, complete_many, fail_many, release_many, push_many.

// push pushes titled todos with push_many and returns their ids in order.
func (d *DB) push(ep, queue string, titles ...string) []string {
	d.t.Helper()
	items := make([]map[string]any, len(titles))
	for i, title := range titles {
		items[i] = map[string]any{"title": title, "payload": map[string]any{"n": i}}
	}
	out := d.mustCall("SELECT switchboard.push_many($1, $2, $3)", ep, queue, items)
	var ids []string
	for _, id := range out["ids"].([]any) {
		ids = append(ids, id.(string))
	}
	if num(out["created"]) != len(titles) || len(ids) != len(titles) {
		d.t.Fatalf("push_many: %v", out)
	}
	return ids
}

// claimMany calls claim_next_many and returns the claimed todos.
func claimMany(c querier, ep string, max int, fence bool) ([]map[string]any, error) {
	out, err := call(c, "SELECT switchboard.claim_next_many($1, $2, NULL, NULL, $3)::jsonb", ep, max, fence)
	if err != nil {
		return nil, err
	}
	var todos []map[string]any
	for _, v := range out["todos"].([]any) {
		todos = append(todos, v.(map[string]any))
	}
	if (len(todos) == 0) != (out["empty"] == true) {
		return nil, fmt.Errorf("empty and todos disagree: %v", out)
	}
	return todos, nil
}

// finishMany calls complete_many, fail_many or release_many and returns the results.
func finishMany(c querier, verb, ep string, items ...map[string]any) ([]map[string]any, error) {
	out, err := call(c, "SELECT switchboard."+verb+"_many($1, $2)::jsonb", ep, items)
	if err != nil {
		return nil, err
	}
	var results []map[string]any
	for _, v := range out["results"].([]any) {
		results = append(results, v.(map[string]any))
	}
	if len(results) != len(items) {
		return nil, fmt.Errorf("%d results for %d items: %v", len(results), len(items), out)
	}
	return results, nil
}

func item(id string, kv ...any) map[string]any {
	m := map[string]any{"id": id}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func TestBatchClaimShapeOrderAndBounds(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "batcher", "inbox", "other")
	ids := d.push(ep, "inbox", "a", "b", "c", "d", "e")
	otherID := d.create(ep, "other", "f")

	// Fenced, oldest first (pushed in one statement: the order of the items), each its own
	// lease and token.
	todos, err := claimMany(d.Pool, ep, 3, true)
	if err != nil || len(todos) != 3 {
		t.Fatalf("claim_next_many 3: %v %v", todos, err)
	}
	tokens := map[string]bool{}
	for i, todo := range todos {
		if todo["id"] != ids[i] || todo["state"] != "claimed" || num(todo["attempt"]) != 1 ||
			todo["lease_expires_at"] == nil || todo["payload"].(map[string]any)["n"] != float64(i) {
			t.Fatalf("todo %d: %v (want %s)", i, todo, ids[i])
		}
		tok, _ := todo["lease_token"].(string)
		if !strings.HasPrefix(tok, "sbl_") || tokens[tok] {
			t.Fatalf("todo %d: lease_token %q (not one of its own)", i, tok)
		}
		tokens[tok] = true
		sum := sha256.Sum256([]byte(tok))
		if r := d.row(ids[i]); string(r.LeaseTokenHash) != string(sum[:]) || r.Owner == nil || *r.Owner != d.ownerOf(ep) {
			t.Fatalf("todo %d row: %+v", i, r)
		}
	}

	// Unfenced, across the granted queues: the rest, oldest first; then nothing.
	todos, err = claimMany(d.Pool, ep, 50, false)
	if err != nil || len(todos) != 3 || todos[0]["id"] != ids[3] || todos[1]["id"] != ids[4] || todos[2]["id"] != otherID {
		t.Fatalf("claim_next_many 50: %v %v", todos, err)
	}
	if _, fenced := todos[0]["lease_token"]; fenced || d.row(ids[3]).LeaseTokenHash != nil {
		t.Fatalf("unfenced claim has a token: %v", todos[0])
	}
	if todos, err = claimMany(d.Pool, ep, 5, false); err != nil || len(todos) != 0 {
		t.Fatalf("nothing left: %v %v", todos, err)
	}
	var raw string
	if err := d.QueryRow(ctx(), "SELECT switchboard.claim_next_many($1, 5)::text", ep).Scan(&raw); err != nil ||
		strings.ReplaceAll(raw, " ", "") != `{"todos":[],"empty":true}` {
		t.Fatalf("empty answer %s %v", raw, err)
	}

	// The queue filter, and the bounds.
	d.push(ep, "inbox", "g")
	q := d.create(ep, "other", "h")
	out := d.mustCall("SELECT switchboard.claim_next_many($1, 10, 'other')::jsonb", ep)
	if got := out["todos"].([]any); len(got) != 1 || got[0].(map[string]any)["id"] != q {
		t.Fatalf("queue filter: %v", out)
	}
	for _, max := range []any{0, 51, -1, nil} {
		_, err := call(d.Pool, "SELECT switchboard.claim_next_many($1, $2)::jsonb", ep, max)
		wantCode(t, err, invalidArgument, fmt.Sprintf("max %v", max))
	}
	_, err = call(d.Pool, "SELECT switchboard.claim_next_many($1, 5, 'elsewhere')::jsonb", ep)
	wantCode(t, err, forbidden, "a queue outside the grant")
}

// Each item of complete_many, fail_many and release_many is judged on its own, in the order
// given, with the code refuse_todo would raise.
func TestBatchFinishItemByItem(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "batcher", "inbox")
	stranger := d.vend("bob", "stranger", "inbox")
	foreign := d.create(stranger, "inbox", "bob's")
	outside := d.create(ep, "elsewhere", "not granted") // create_todo does not check the grant
	ids := d.push(ep, "inbox", "t1", "t2", "t3", "t4")
	todos, err := claimMany(d.Pool, ep, 4, true)
	if err != nil || len(todos) != 4 {
		t.Fatalf("claim: %v %v", todos, err)
	}
	tok := func(i int) string { return todos[i]["lease_token"].(string) }

	results, err := finishMany(d.Pool, "complete", ep,
		item(ids[0], "lease_token", tok(0), "result", map[string]any{"label": "bug"}),
		item(ids[0], "lease_token", tok(0)),                // the same id again
		item(ids[1]),                                       // fenced, no token
		item("00000000-0000-4000-8000-000000000000"),       // unknown
		item("not-a-uuid"),                                 // malformed
		item(foreign),                                      // another endpoint's
		item(outside),                                      // outside the grant
		item(ids[2], "lease_token", tok(3)),                // another todo's token
		item(ids[3], "lease_token", tok(3), "result", nil), // done, result null
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "conflict", "conflict", "not_found", "not_found", "not_found", "forbidden", "conflict", ""}
	for i, r := range results {
		if want[i] == "" {
			todo, _ := r["todo"].(map[string]any)
			if r["ok"] != true || todo["state"] != "done" || todo["id"] != r["id"] {
				t.Errorf("item %d: %v, want ok", i, r)
			}
			continue
		}
		if r["ok"] != false || r["code"] != want[i] || r["message"] == "" || r["todo"] != nil {
			t.Errorf("item %d: %v, want %s", i, r, want[i])
		}
	}
	if results[4]["id"] != "not-a-uuid" || results[1]["message"] != "todo appears more than once in this batch" {
		t.Errorf("ids are echoed as given, a duplicate says so: %v %v", results[4], results[1])
	}
	if r := d.row(ids[0]); r.State != "done" || r.Result["label"] != "bug" {
		t.Fatalf("t1: %+v", r)
	}
	if r := d.row(ids[3]); r.State != "done" || r.Result != nil {
		t.Fatalf("t4: %+v", r)
	}
	for _, id := range ids[1:3] {
		if r := d.row(id); r.State != "claimed" {
			t.Fatalf("a refused item changed: %+v", r)
		}
	}

	// fail_many and release_many: the same rules, their own transitions.
	results, err = finishMany(d.Pool, "fail", ep,
		item(ids[1], "lease_token", tok(1), "result", map[string]any{"error": "timeout"}), item(ids[0]))
	if err != nil || results[0]["ok"] != true || results[1]["code"] != "conflict" {
		t.Fatalf("fail_many: %v %v", results, err)
	}
	if r := d.row(ids[1]); r.State != "failed" || r.NextRetryAt == nil || r.Result["error"] != "timeout" {
		t.Fatalf("failed: %+v", r)
	}
	results, err = finishMany(d.Pool, "release", ep, item(ids[2], "lease_token", tok(2)))
	if err != nil || results[0]["ok"] != true {
		t.Fatalf("release_many: %v %v", results, err)
	}
	if r := d.row(ids[2]); r.State != "pending" || r.Owner != nil || r.LeaseTokenHash != nil {
		t.Fatalf("released: %+v", r)
	}

	// The bounds refuse the whole call.
	fifty := make([]map[string]any, 51)
	for i := range fifty {
		fifty[i] = item(ids[0])
	}
	for name, items := range map[string]any{
		"empty": []any{}, "51 items": fifty, "not an array": map[string]any{"id": ids[0]},
		"an item without id": []any{map[string]any{"result": 1}}, "a number id": []any{map[string]any{"id": 7}},
		"not an object": []any{ids[0]}, "null": nil,
	} {
		for _, verb := range []string{"complete", "fail", "release"} {
			_, err := call(d.Pool, "SELECT switchboard."+verb+"_many($1, $2)::jsonb", ep, items)
			wantCode(t, err, invalidArgument, verb+" "+name)
		}
	}
	if _, err := finishMany(d.Pool, "complete", ep, fifty[:50]...); err != nil {
		t.Fatalf("50 items: %v", err)
	}
}

// 10 sessions drain 300 todos with claim_next_many and complete_many at once: no todo is handed
// to two of them, and every one is done once.
func TestBatchClaimRace(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "swarm", "inbox")
	titles := make([]string, 300)
	for i := range titles {
		titles[i] = fmt.Sprint("todo ", i)
	}
	ids := d.push(ep, "inbox", titles...)
	workers := d.conns(10)
	var mu sync.Mutex
	seen := map[string]int{}
	together(len(workers), func(i int) {
		for {
			todos, err := claimMany(workers[i], ep, 7, true)
			if err != nil {
				t.Errorf("worker %d: claim: %v", i, err)
				return
			}
			if len(todos) == 0 {
				return
			}
			items := make([]map[string]any, len(todos))
			mu.Lock()
			for j, todo := range todos {
				seen[todo["id"].(string)]++
				items[j] = item(todo["id"].(string), "lease_token", todo["lease_token"], "result", i)
			}
			mu.Unlock()
			results, err := finishMany(workers[i], "complete", ep, items...)
			if err != nil {
				t.Errorf("worker %d: complete: %v", i, err)
				return
			}
			for _, r := range results {
				if r["ok"] != true {
					t.Errorf("worker %d: %v", i, r)
				}
			}
		}
	})
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("todo %s claimed %d times", id, seen[id])
		}
	}
	var done int
	if err := d.QueryRow(ctx(), "SELECT count(*) FROM switchboard.todos WHERE state = 'done' AND attempt = 1").Scan(&done); err != nil || done != len(ids) {
		t.Fatalf("done once: %d of %d (%v)", done, len(ids), err)
	}
}

// A batch whose holder dies comes back by lease expiry like a single claim: the next claim takes
// it over (attempt 2) or the reaper requeues it, and the dead holder's tokens are refused.
func TestBatchLeaseExpiry(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "mortal", "inbox")
	ids := d.push(ep, "inbox", "a", "b", "c", "d")
	held, err := claimMany(d.Pool, ep, 4, true)
	if err != nil || len(held) != 4 {
		t.Fatalf("claim: %v %v", held, err)
	}
	// The holder dies: its leases run out (moved into the past rather than slept through).
	for _, id := range ids[:2] {
		d.expireLease(id)
	}
	taken, err := claimMany(d.Pool, ep, 10, false)
	if err != nil || len(taken) != 2 || taken[0]["id"] != ids[0] || taken[1]["id"] != ids[1] || num(taken[0]["attempt"]) != 2 {
		t.Fatalf("takeover: %v %v", taken, err)
	}
	for _, id := range ids[2:] {
		d.expireLease(id)
	}
	if q, dl, _ := reap(t, d.Pool); q != 2 || dl != 0 {
		t.Fatalf("reap: requeued %d dead %d, want 2 0", q, dl)
	}
	items := make([]map[string]any, len(held))
	for i, todo := range held {
		items[i] = item(todo["id"].(string), "lease_token", todo["lease_token"])
	}
	results, err := finishMany(d.Pool, "complete", ep, items...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r["code"] != "conflict" {
			t.Errorf("the dead holder's item %d: %v, want conflict", i, r)
		}
	}
	if r := d.row(ids[2]); r.State != "pending" || r.Attempt != 1 {
		t.Fatalf("requeued: %+v", r)
	}
}

func TestPushMany(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "ops", "inbox")
	live, _, err := createKey(d.Pool, ep, "inbox", "existing", ptr("k0"))
	if err != nil {
		t.Fatal(err)
	}
	items := `[{"title": "one", "key": "k1"}, {"title": "two", "payload": {"x": [1, 2]}},
	           {"title": "three", "key": "k1"}, {"title": "four", "key": "k0"}, {"title": "five", "payload": null}]`
	out := d.mustCall("SELECT switchboard.push_many($1, 'inbox', $2::jsonb)", ep, items)
	var ids []string
	for _, v := range out["ids"].([]any) {
		ids = append(ids, v.(string))
	}
	if num(out["created"]) != 3 || len(ids) != 5 || ids[2] != ids[0] || ids[3] != live {
		t.Fatalf("push_many: %v", out)
	}
	// Claimed in the order pushed.
	todos, err := claimMany(d.Pool, ep, 10, false)
	if err != nil || len(todos) != 4 || todos[0]["id"] != live || todos[1]["id"] != ids[0] || todos[2]["id"] != ids[1] ||
		todos[3]["id"] != ids[4] || todos[2]["payload"].(map[string]any)["x"] == nil || todos[3]["payload"] != nil {
		t.Fatalf("claim order: %v %v", todos, err)
	}

	// A bad item refuses them all, naming it; nothing is written.
	var before int
	_ = d.QueryRow(ctx(), "SELECT count(*) FROM switchboard.todos").Scan(&before)
	deep := strings.Repeat("[", 70) + strings.Repeat("]", 70)
	for name, bad := range map[string]string{
		"item 2: title must be a string":                     `[{"title": "ok"}, {"title": 3}]`,
		"item 1: only title, payload and key are allowed":    `[{"title": "ok", "queue": "x"}]`,
		"item 2: key must be a string":                       `[{"title": "ok"}, {"title": "x", "key": 5}]`,
		"item 3: not a JSON object":                          `[{"title": "a"}, {"title": "b"}, "c"]`,
		"item 1: payload: JSON nested deeper than 64 levels": `[{"title": "a", "payload": ` + deep + `}]`,
		"items must be a non-empty JSON array":               `[]`,
	} {
		_, err := call(d.Pool, "SELECT switchboard.push_many($1, 'inbox', $2::jsonb)", ep, bad)
		wantCode(t, err, invalidArgument, name)
		if pgMessage(err) != name {
			t.Errorf("message %q, want %q", pgMessage(err), name)
		}
	}
	_, err = call(d.Pool, "SELECT switchboard.push_many($1, 'bad queue', '[{\"title\": \"a\"}]')", ep)
	wantCode(t, err, invalidArgument, "queue name")
	_, err = call(d.Pool, "SELECT switchboard.push_many('00000000-0000-4000-8000-000000000000', 'inbox', '[{\"title\": \"a\"}]')")
	wantCode(t, err, notFound, "unknown endpoint")
	var after int
	_ = d.QueryRow(ctx(), "SELECT count(*) FROM switchboard.todos").Scan(&after)
	if after != before {
		t.Fatalf("refused pushes wrote %d todos", after-before)
	}
}

func ptr[T any](v T) *T { return &v }
