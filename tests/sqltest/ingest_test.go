package sqltest

import (
	"encoding/json"
	"strings"
	"testing"
)

// ingest stores a delivery's todos in one INSERT ... SELECT (issue 27). A target whose live todo
// already holds the delivery key (here: an operator push with that key) still answers as
// create_todo did: that todo's id, created false; the other targets get new todos, in target
// order (owner first).
func TestIngestFanOutKeepsIdempotency(t *testing.T) {
	d := fresh(t)
	owner := d.vend("alice", "owner", "inbox")
	d.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{github}', webhook_queues = '{inbox}' WHERE id = $1`, owner)
	other := d.vend("alice", "other", "inbox")
	var hook string
	if err := d.QueryRow(ctx(), `SELECT switchboard.webhook_create($1, 'github', 'inbox', $2, $3)->>'webhook_id'`,
		owner, strings.Repeat("t", 40), "whsec_"+randomHex(32)).Scan(&hook); err != nil {
		t.Fatal(err)
	}
	d.exec(`INSERT INTO switchboard.webhook_routes (webhook_id, target_endpoint_id, granted_by) VALUES ($1, $2, $3)`, hook, other, owner)
	key := "delivery-1"
	held, created, err := createKey(d.Pool, other, "inbox", "operator push", &key)
	if err != nil || !created {
		t.Fatalf("create_todo with the key: %v", err)
	}

	var raw []byte
	if err := d.QueryRow(ctx(), `SELECT switchboard.ingest($1, $2, 'push', true, 'ok', 'application/json', 2, '{}', '{}',
			'title', 'delivered', NULL)`, hook, key).Scan(&raw); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	var out struct {
		Created int `json:"created"`
		Todos   []struct {
			ID       string `json:"id"`
			Endpoint string `json:"endpoint_id"`
			Created  bool   `json:"created"`
		} `json:"todos"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.Created != 1 || len(out.Todos) != 2 {
		t.Fatalf("ingest: %s, want 2 todos, 1 created", raw)
	}
	if out.Todos[0].Endpoint != owner || !out.Todos[0].Created || out.Todos[0].ID == held {
		t.Fatalf("owner's todo: %+v, want a new one first", out.Todos[0])
	}
	if out.Todos[1].Endpoint != other || out.Todos[1].Created || out.Todos[1].ID != held {
		t.Fatalf("routed target's todo: %+v, want the live todo %s holding the key, created false", out.Todos[1], held)
	}
	var n int
	if err := d.QueryRow(ctx(), `SELECT count(*) FROM switchboard.todos`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("todos: %d (%v), want 2", n, err)
	}
}
