package e2e

// Batches through MCP (contract §12): claim_next {max}, and complete, fail, release {items}, on
// a 2025 session and as 2026-07-28 sessionless calls.

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

type batchClaim struct {
	Empty bool   `json:"empty"`
	Todos []todo `json:"todos"`
	Todo  *todo  `json:"todo"`
}

type batchResults struct {
	Results []struct {
		ID      string `json:"id"`
		OK      bool   `json:"ok"`
		Todo    *todo  `json:"todo"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"results"`
}

func TestBatchTools(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	var ids []string
	for _, title := range []string{"a", "b", "c", "d", "e"} {
		ids = append(ids, e.push(ep, "inbox", title))
	}

	got := call[batchClaim](t, c, "claim_next", map[string]any{"max": 3, "require_fence": true})
	if got.Empty || got.Todo != nil || len(got.Todos) != 3 {
		t.Fatalf("claim_next max 3: %+v", got)
	}
	for i, td := range got.Todos {
		if td.ID != ids[i] || td.State != "claimed" || td.LeaseToken == "" || (i > 0 && td.LeaseToken == got.Todos[0].LeaseToken) {
			t.Fatalf("todo %d: %+v", i, td)
		}
	}
	res := call[batchResults](t, c, "complete", map[string]any{"items": []any{
		map[string]any{"id": ids[0], "lease_token": got.Todos[0].LeaseToken, "result": map[string]any{"label": "bug"}},
		map[string]any{"id": ids[1]}, // fenced: no token, conflict
		map[string]any{"id": "6a1e8a8e-3a57-4bb5-9b0e-0f3f5c2b9f11"},
	}})
	if len(res.Results) != 3 || !res.Results[0].OK || res.Results[0].Todo == nil || res.Results[0].Todo.State != "done" ||
		res.Results[1].OK || res.Results[1].Code != "conflict" || res.Results[2].Code != "not_found" {
		t.Fatalf("complete items: %+v", res)
	}
	res = call[batchResults](t, c, "fail", map[string]any{"items": []any{
		map[string]any{"id": ids[1], "lease_token": got.Todos[1].LeaseToken, "result": "timeout"}}})
	if !res.Results[0].OK || res.Results[0].Todo.State != "failed" || res.Results[0].Todo.NextRetryAt == nil {
		t.Fatalf("fail items: %+v", res)
	}
	res = call[batchResults](t, c, "release", map[string]any{"items": []any{
		map[string]any{"id": ids[2], "lease_token": got.Todos[2].LeaseToken}}})
	if !res.Results[0].OK || res.Results[0].Todo.State != "pending" {
		t.Fatalf("release items: %+v", res)
	}
	if s := e.state(ids[0]); s != "done" {
		t.Fatalf("completed todo is %s", s)
	}

	// Without max the answer is as before.
	one := call[claimNext](t, c, "claim_next", nil)
	if one.Todo == nil || one.Todo.ID != ids[2] {
		t.Fatalf("claim_next without max: %+v", one)
	}

	// Bounds and combinations.
	fiftyOne := make([]any, 51)
	for i := range fiftyOne {
		fiftyOne[i] = map[string]any{"id": ids[0]}
	}
	for _, tc := range []struct {
		verb string
		args map[string]any
	}{
		{"claim_next", map[string]any{"max": 0}},
		{"claim_next", map[string]any{"max": 51}},
		{"complete", map[string]any{"items": []any{}}},
		{"complete", map[string]any{"items": fiftyOne}},
		{"complete", map[string]any{"id": ids[3], "items": []any{map[string]any{"id": ids[3]}}}},
		{"complete", map[string]any{"items": []any{map[string]any{"id": ids[3]}}, "next": map[string]any{}}},
		{"complete", map[string]any{}},
		{"complete", map[string]any{"items": []any{map[string]any{"result": 1}}}},
		{"release", map[string]any{"items": []any{map[string]any{"id": ids[3], "result": 1}}}},
		{"claim_next", map[string]any{"next": map[string]any{"max": 2}}},
	} {
		wantCode(t, c, "invalid_argument", tc.verb, tc.args)
	}

	// wait_seconds with max: the call returns as soon as one todo is claimable.
	drained := call[batchClaim](t, c, "claim_next", map[string]any{"max": 50})
	if len(drained.Todos) != 2 {
		t.Fatalf("drain: %+v", drained)
	}
	e.waitingBatchTakesPush(t, ep, func(w *batchClaim) error {
		return c.CallInto(ctxT(t), "claim_next", map[string]any{"max": 10, "wait_seconds": 20}, w)
	})
}

// The same verbs as 2026-07-28 calls: no session, the same answers.
func TestBatchToolsModern(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("modern", []string{"inbox"}, nil)
	a, b := e.push(ep, "inbox", "a"), e.push(ep, "inbox", "b")
	modern := func(name string, args map[string]any, out any) error {
		resp, body := modernPost(t, e.url(ep), ep.Cred, "tools/call", name, map[string]any{"name": name, "arguments": args})
		res, _ := body["result"].(map[string]any)
		if resp.StatusCode != 200 || res == nil || res["isError"] == true {
			return fmt.Errorf("%s: %d %v", name, resp.StatusCode, body)
		}
		raw, _ := json.Marshal(res["structuredContent"])
		return json.Unmarshal(raw, out)
	}
	callModern := func(name string, args map[string]any, out any) {
		t.Helper()
		if err := modern(name, args, out); err != nil {
			t.Fatal(err)
		}
	}
	var got batchClaim
	callModern("claim_next", map[string]any{"max": 10}, &got)
	if len(got.Todos) != 2 || got.Todos[0].ID != a || got.Todos[1].ID != b {
		t.Fatalf("claim_next max: %+v", got)
	}
	var res batchResults
	callModern("complete", map[string]any{"items": []any{map[string]any{"id": b}, map[string]any{"id": a, "result": 1}}}, &res)
	if len(res.Results) != 2 || res.Results[0].ID != b || !res.Results[0].OK || res.Results[1].ID != a || !res.Results[1].OK {
		t.Fatalf("complete items: %+v", res)
	}
	callModern("claim_next", map[string]any{"max": 10}, &got)
	if !got.Empty || len(got.Todos) != 0 {
		t.Fatalf("empty: %+v", got)
	}

	// A 2026-07-28 call waits too (its own doorbell registration).
	e.waitingBatchTakesPush(t, ep, func(w *batchClaim) error {
		return modern("claim_next", map[string]any{"max": 5, "wait_seconds": 20}, w)
	})
}

// waitingBatchTakesPush runs claim (a batch claim_next that waits) on a goroutine and checks that
// it answers with the one todo pushed once the server counts it waiting.
func (e *env) waitingBatchTakesPush(t *testing.T, ep endpoint, claim func(*batchClaim) error) {
	t.Helper()
	done := make(chan batchClaim, 1)
	go func() {
		var w batchClaim
		if err := claim(&w); err != nil {
			t.Error(err)
		}
		done <- w
	}()
	e.waitingAt(t, 1)
	id := e.push(ep, "inbox", "while waiting")
	select {
	case w := <-done:
		if len(w.Todos) != 1 || w.Todos[0].ID != id {
			t.Fatalf("waiting batch: %+v", w)
		}
	case <-time.After(soon):
		t.Fatal("a waiting batch claim did not return with the todo pushed during its wait")
	}
}
