package receiver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

func saveRules(t *testing.T, caller, webhook, rulesJSON string) {
	t.Helper()
	mustExec(t, `SELECT switchboard.rules_save($1, $2, $3::jsonb, NULL, NULL)`, caller, webhook, rulesJSON)
}

func eventRow(t *testing.T, h hook, key string) (disposition string, trace map[string]any) {
	t.Helper()
	var raw []byte
	err := pool.QueryRow(context.Background(),
		`SELECT disposition, routing FROM switchboard.webhook_events WHERE webhook_id = $1 AND delivery_key = $2`,
		h.id, h.id+":"+key).Scan(&disposition, &raw)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(raw, &trace)
	return disposition, trace
}

func TestRulesPickQueueDropAndNarrow(t *testing.T) {
	alice := human(t)
	own, second := vend(t, alice), vend(t, alice)
	h := newHook(t, own, "generic")
	route(t, own, h.id, second)
	saveRules(t, own, h.id, fmt.Sprintf(`[
		{"id": "drop-pings", "expr": ".payload.action == \"ping\"", "action": {"drop": true}},
		{"id": "opened", "expr": ".payload.action == \"opened\"", "action": {"queue": "ops"}},
		{"id": "mine", "expr": ".payload.action == \"mine\"", "action": {"queue": "inbox", "endpoints": [%q]}}]`, second))

	opened := post(t, h.token, []byte(`{"action":"opened"}`), delivery("generic", "", nil, time.Now(), "o"))
	if opened.status != 202 || opened.body["queue"] != "ops" || opened.body["created"] != 2.0 {
		t.Fatalf("opened → ops on both targets: %v", opened.body)
	}
	other := post(t, h.token, []byte(`{"action":"closed"}`), delivery("generic", "", nil, time.Now(), "c"))
	if other.body["queue"] != "inbox" || other.body["created"] != 2.0 {
		t.Fatalf("no match → webhook queue: %v", other.body)
	}
	mine := post(t, h.token, []byte(`{"action":"mine"}`), delivery("generic", "", nil, time.Now(), "m"))
	if got := todoEndpoints(t, mine); len(got) != 1 || got[0] != second {
		t.Fatalf("endpoints narrow to one target: %v", mine.body)
	}
	ping := post(t, h.token, []byte(`{"action":"ping"}`), delivery("generic", "", nil, time.Now(), "p"))
	if ping.status != 202 || ping.body["dropped"] != true || ping.body["created"] != 0.0 {
		t.Fatalf("drop: %v", ping.body)
	}
	disp, trace := eventRow(t, h, "p")
	if disp != "dropped" || trace["stage"] != "rule" || trace["rule_id"] != "drop-pings" {
		t.Fatalf("dropped event: %s %v", disp, trace)
	}
	// The trace travels with each todo too.
	var routing map[string]any
	var raw []byte
	if err := pool.QueryRow(context.Background(),
		`SELECT routing FROM switchboard.todos WHERE id = $1`, opened.body["id"]).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(raw, &routing)
	if routing["rule_id"] != "opened" || routing["stage"] != "rule" {
		t.Fatalf("todo routing trace: %v", routing)
	}
}

func TestFaultingRulesFailClosed(t *testing.T) {
	own := vend(t, human(t))
	for name, expr := range map[string]string{
		"runtime error": `error("boom")`,
		"recursion":     `def f: f; f`,
		"repeat":        `[repeat(.)] | length > 0`, // bare repeat(.) matches: its first output is the input
	} {
		t.Run(name, func(t *testing.T) {
			h := newHook(t, own, "generic")
			saveRules(t, own, h.id, fmt.Sprintf(`[{"id": "bad", "expr": %q, "action": {"queue": "ops"}}]`, expr))
			start := time.Now()
			r := post(t, h.token, []byte(`{"a":1}`), delivery("generic", "", nil, time.Now(), "f"))
			if elapsed := time.Since(start); elapsed > 2*time.Second {
				t.Fatalf("faulting rule took %v", elapsed)
			}
			if r.status != 202 || r.body["faulted"] != true || r.body["created"] != 0.0 || todos(t, h) != 0 {
				t.Fatalf("fault: %d %v", r.status, r.body)
			}
			disp, trace := eventRow(t, h, "f")
			if disp != "faulted" || trace["stage"] != "fault" {
				t.Fatalf("faulted event: %s %v", disp, trace)
			}
		})
	}
	// The receiver stays responsive afterwards.
	h := newHook(t, own, "generic")
	if r := post(t, h.token, []byte(`{}`), delivery("generic", "", nil, time.Now(), "ok")); r.status != 202 || r.body["created"] != 1.0 {
		t.Fatalf("after faults: %v", r.body)
	}
}

// A rule that narrows to an endpoint which is no longer a target keeps the event as dropped,
// with the reason, instead of refusing the producer forever.
func TestStaleNarrowingDrops(t *testing.T) {
	alice := human(t)
	own, second := vend(t, alice), vend(t, alice)
	h := newHook(t, own, "generic")
	route(t, own, h.id, second)
	saveRules(t, own, h.id, fmt.Sprintf(`[{"id": "to-second", "expr": "true", "action": {"queue": "inbox", "endpoints": [%q]}}]`, second))
	mustExec(t, `SELECT switchboard.route_remove($1, $2, $3)`, own, h.id, second)

	r := post(t, h.token, []byte(`{}`), delivery("generic", "", nil, time.Now(), "stale"))
	if r.status != 202 || r.body["dropped"] != true || r.body["created"] != 0.0 {
		t.Fatalf("stale narrowing: %d %v", r.status, r.body)
	}
	disp, trace := eventRow(t, h, "stale")
	if disp != "dropped" || trace["rule_id"] != "to-second" || trace["cause"] == nil {
		t.Fatalf("stored: %s %v", disp, trace)
	}
}
