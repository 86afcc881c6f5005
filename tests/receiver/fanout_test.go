package receiver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func friends(t *testing.T, from, to string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(),
		`SELECT switchboard.friend_request($1, $2) ->> 'id'`, from, to).Scan(&id); err != nil {
		t.Fatal(err)
	}
	mustExec(t, `SELECT switchboard.friend_decide($1, 'approved')`, id)
	return id
}

func route(t *testing.T, caller, webhook, target string) {
	t.Helper()
	mustExec(t, `SELECT switchboard.route_add($1, $2, $3)`, caller, webhook, target)
}

func todoEndpoints(t *testing.T, r response) []string {
	t.Helper()
	var out []string
	for _, td := range r.body["todos"].([]any) {
		out = append(out, td.(map[string]any)["endpoint_id"].(string))
	}
	return out
}

func TestFanOutOneTodoPerTarget(t *testing.T) {
	alice, bob := human(t), human(t)
	own, second, bobs := vend(t, alice), vend(t, alice), vend(t, bob)
	friends(t, alice, bob)
	h := newHook(t, own, "generic")
	route(t, own, h.id, second)
	route(t, own, h.id, bobs)

	r := post(t, h.token, []byte(`{"x":1}`), delivery("generic", "", nil, time.Now(), "f1"))
	got := todoEndpoints(t, r)
	if r.status != 202 || r.body["created"] != 3.0 || fmt.Sprint(got) != fmt.Sprint([]string{own, second, bobs}) {
		t.Fatalf("fan-out: %d %v", r.status, r.body)
	}
	if r.body["id"] != r.body["todos"].([]any)[0].(map[string]any)["id"] {
		t.Fatal("id must name the owner's todo")
	}
	// Each todo is pinned to its own endpoint: each endpoint lists exactly one.
	for _, ep := range []string{own, second, bobs} {
		var n int
		if err := pool.QueryRow(context.Background(),
			`SELECT json_array_length(switchboard.list_todos($1) -> 'todos')`, ep).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("endpoint %s sees %d todos", ep, n)
		}
	}
	// A redelivery leaves exactly one todo per target.
	again := post(t, h.token, []byte(`{"x":1}`), delivery("generic", "", nil, time.Now(), "f1"))
	if again.body["created"] != 0.0 || len(todoEndpoints(t, again)) != 3 || todos(t, h) != 3 {
		t.Fatalf("redelivery: %v", again.body)
	}
	if fmt.Sprint(todoEndpoints(t, again)) != fmt.Sprint(got) {
		t.Fatalf("redelivery answers in another order: %v vs %v", todoEndpoints(t, again), got)
	}
}

func TestRevokedFriendshipStopsDeliveries(t *testing.T) {
	alice, bob := human(t), human(t)
	own, bobs := vend(t, alice), vend(t, bob)
	edge := friends(t, alice, bob)
	h := newHook(t, own, "generic")
	route(t, own, h.id, bobs)
	mustExec(t, `SELECT switchboard.friend_decide($1, 'revoked')`, edge)

	r := post(t, h.token, []byte(`{}`), delivery("generic", "", nil, time.Now(), "rv"))
	if got := todoEndpoints(t, r); r.status != 202 || len(got) != 1 || got[0] != own {
		t.Fatalf("after revocation only the owner receives: %v", r.body)
	}
	// Still listed and removable by the owner.
	var n int
	if err := pool.QueryRow(context.Background(),
		`SELECT jsonb_array_length(switchboard.route_list($1, $2) -> 'routes')`, own, h.id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("route must stay listed: %d %v", n, err)
	}
}

func TestNoLiveTargetIs503AndStoresNothing(t *testing.T) {
	own := vend(t, human(t))
	h := newHook(t, own, "generic")
	mustExec(t, `UPDATE switchboard.endpoints SET state = 'revoked' WHERE id = $1`, own)
	r := post(t, h.token, []byte(`{}`), delivery("generic", "", nil, time.Now(), "nt"))
	if r.status != 503 || events(t, h) != 0 {
		t.Fatalf("no targets: %d, events %d", r.status, events(t, h))
	}
}

// One delivery to a webhook with 10 routes commits all 11 todos or none: a trigger makes the
// eleventh todo insert fail, and neither the event nor the first ten todos may remain.
func TestFanOutIsAtomic(t *testing.T) {
	alice := human(t)
	own := vend(t, alice)
	h := newHook(t, own, "generic")
	var last string
	for i := 0; i < 10; i++ {
		last = vend(t, alice)
		route(t, own, h.id, last)
	}
	mustExec(t, fmt.Sprintf(`
		CREATE OR REPLACE FUNCTION public.fail_last_target() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.endpoint_id = '%s' THEN RAISE EXCEPTION 'injected failure'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_last_target BEFORE INSERT ON switchboard.todos
			FOR EACH ROW EXECUTE FUNCTION public.fail_last_target();`, last))
	defer mustExec(t, `DROP TRIGGER fail_last_target ON switchboard.todos; DROP FUNCTION public.fail_last_target()`)

	r := post(t, h.token, []byte(`{}`), delivery("generic", "", nil, time.Now(), "atomic"))
	if r.status != 500 || events(t, h) != 0 || todos(t, h) != 0 {
		t.Fatalf("injected failure: status %d, events %d, todos %d", r.status, events(t, h), todos(t, h))
	}
	if msg := fmt.Sprint(r.body); len(msg) > 0 && (strings.Contains(msg, "injected") || strings.Contains(msg, "trigger")) {
		t.Fatalf("500 body leaks the cause: %s", msg)
	}
	mustExec(t, `DROP TRIGGER fail_last_target ON switchboard.todos`)
	mustExec(t, `CREATE TRIGGER fail_last_target BEFORE INSERT ON switchboard.todos FOR EACH ROW WHEN (false) EXECUTE FUNCTION public.fail_last_target()`)
	r = post(t, h.token, []byte(`{}`), delivery("generic", "", nil, time.Now(), "atomic"))
	if r.status != 202 || r.body["created"] != 11.0 || todos(t, h) != 11 {
		t.Fatalf("after the failure is gone: %d %v", r.status, r.body)
	}
}
