package receiver_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// A delivery's payload is stored once, in its event: the todos minted for its targets hold no
// copy and return the payload through the event, in the same shape as a todo that carries its own.
func TestDeliveryPayloadStoredOnce(t *testing.T) {
	alice := human(t)
	own, second := vend(t, alice), vend(t, alice)
	h := newHook(t, own, "generic")
	route(t, own, h.id, second)
	body := []byte(`{"action": "opened", "n": 7, "nested": {"list": [1, 2, 3]}}`)
	r := post(t, h.token, body, delivery("generic", "", nil, time.Now(), "once-1"))
	if r.status != 202 || r.body["created"] != 2.0 {
		t.Fatalf("delivery: %d %v", r.status, r.body)
	}
	var want any
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, td := range r.body["todos"].([]any) {
		id, ep := td.(map[string]any)["id"].(string), td.(map[string]any)["endpoint_id"].(string)
		var copies int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM switchboard.todos WHERE id = $1 AND payload IS NOT NULL`, id).Scan(&copies); err != nil {
			t.Fatal(err)
		}
		if copies != 0 {
			t.Fatalf("todo %s holds its own copy of the payload", id)
		}
		var got struct {
			Payload     any `json:"payload"`
			PayloadSize int `json:"payload_size"`
		}
		var raw []byte
		if err := pool.QueryRow(ctx, `SELECT switchboard.get_todo($1, $2)`, ep, id).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Payload, want) {
			t.Fatalf("get_todo payload = %v, want %v", got.Payload, want)
		}
		var size int
		if err := pool.QueryRow(ctx, `SELECT octet_length($1::jsonb::text)`, body).Scan(&size); err != nil {
			t.Fatal(err)
		}
		if got.PayloadSize != size {
			t.Fatalf("payload_size = %d, want %d (the JSON text, as for a todo with its own payload)", got.PayloadSize, size)
		}
		// The claim returns it too.
		if err := pool.QueryRow(ctx, `SELECT switchboard.claim_next($1)`, ep).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var claimed struct {
			Todo struct {
				ID      string `json:"id"`
				Payload any    `json:"payload"`
			} `json:"todo"`
		}
		if err := json.Unmarshal(raw, &claimed); err != nil {
			t.Fatal(err)
		}
		if claimed.Todo.ID != id || !reflect.DeepEqual(claimed.Todo.Payload, want) {
			t.Fatalf("claim_next = %s, want todo %s with the payload", raw, id)
		}
	}
	// One copy in all: the event's.
	if n := count(t, `SELECT count(*) FROM switchboard.webhook_events WHERE webhook_id = $1 AND payload IS NOT NULL`, h.id); n != 1 {
		t.Fatalf("%d events hold the payload, want 1", n)
	}
	// The table refuses a second copy.
	_, err := pool.Exec(ctx, `UPDATE switchboard.todos SET payload = '{}'
		WHERE event_id IN (SELECT id FROM switchboard.webhook_events WHERE webhook_id = $1)`, h.id)
	if err == nil {
		t.Fatal("a todo from a delivery took a payload of its own")
	}
}
