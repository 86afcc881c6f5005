package webhooktools_test

// Issue 6 through MCP: the rule verbs, what rules do to deliveries, faults, and the dry run.

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"switchboard/tests/e2e/agentclient"
)

type action struct {
	Queue     string   `json:"queue,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"`
	Drop      bool     `json:"drop,omitempty"`
}

type rule struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Expr   string `json:"expr"`
	Action action `json:"action"`
}

type ruleSet struct {
	WebhookID     string         `json:"webhook_id"`
	TargetQueue   string         `json:"target_queue"`
	Rules         []rule         `json:"rules"`
	DefaultAction *action        `json:"default_action"`
	Params        map[string]any `json:"params"`
	Grant         struct {
		Queues    []string `json:"queues"`
		Endpoints []string `json:"endpoints"`
	} `json:"grant"`
}

func (rs ruleSet) ids() []string {
	out := []string{}
	for _, r := range rs.Rules {
		out = append(out, r.ID)
	}
	return out
}

func (a *agent) rules(webhookID string) ruleSet {
	a.t.Helper()
	var rs ruleSet
	a.into("list_webhook_rules", obj{"webhook_id": webhookID}, &rs)
	return rs
}

// rulesRaw is list_webhook_rules exactly as the agent gets it, for "unchanged" checks.
func (a *agent) rulesRaw(webhookID string) string {
	a.t.Helper()
	return a.raw("list_webhook_rules", obj{"webhook_id": webhookID})
}

func (a *agent) setRules(webhookID string, rules []rule, extra obj) ruleSet {
	a.t.Helper()
	args := obj{"webhook_id": webhookID, "rules": rules}
	for k, v := range extra {
		args[k] = v
	}
	var rs ruleSet
	a.into("set_webhook_rules", args, &rs)
	return rs
}

// getTodo is get_todo's queue and routing trace.
type todoDetail struct {
	ID      string `json:"id"`
	Queue   string `json:"queue"`
	Routing obj    `json:"routing"`
	Payload obj    `json:"payload"`
}

func (a *agent) getTodo(id string) todoDetail {
	a.t.Helper()
	var td todoDetail
	a.into("get_todo", obj{"id": id}, &td)
	return td
}

func (a *agent) getEvent(id int64) eventRow {
	a.t.Helper()
	var ev eventRow
	a.into("get_webhook_event", obj{"id": id}, &ev)
	return ev
}

// lastEvent is the newest event of a webhook (by the agent's event list).
func (a *agent) lastEvent(webhookID string) eventRow {
	a.t.Helper()
	evs := a.events(obj{"webhook_id": webhookID, "limit": 1})
	if len(evs) != 1 {
		a.t.Fatalf("no event for %s", webhookID)
	}
	return a.getEvent(evs[0].ID)
}

func TestRulePicksTheQueue(t *testing.T) {
	a := connect(t, hooker(t, human(t)))
	w := a.createWebhook("github", "inbox")
	rs := a.setRules(w.WebhookID, []rule{
		{ID: "opened", Name: "PR opened", Expr: `.payload.action == "opened"`, Action: action{Queue: "urgent"}},
	}, nil)
	if rs.WebhookID != w.WebhookID || rs.TargetQueue != "inbox" || !slices.Equal(rs.ids(), []string{"opened"}) ||
		!slices.Equal(rs.Grant.Queues, []string{"inbox", "urgent"}) || !slices.Equal(rs.Grant.Endpoints, []string{a.ep.ID}) ||
		rs.Params == nil {
		t.Fatalf("set_webhook_rules: %+v", rs)
	}

	opened := mustDeliver(t, w, `{"action":"opened"}`)
	closed := mustDeliver(t, w, `{"action":"closed"}`)
	if opened.Queue != "urgent" || closed.Queue != "inbox" {
		t.Fatalf("queues: opened %s, closed %s", opened.Raw, closed.Raw)
	}
	if got := a.todoIDs(obj{"queue": "urgent"}); !slices.Equal(got, []string{opened.ID}) {
		t.Fatalf("urgent: %v", got)
	}
	if got := a.todoIDs(obj{"queue": "inbox"}); !slices.Equal(got, []string{closed.ID}) {
		t.Fatalf("inbox: %v", got)
	}
	td := a.getTodo(opened.ID)
	if td.Queue != "urgent" || td.Routing["stage"] != "rule" || td.Routing["rule_index"] != 0.0 ||
		td.Routing["rule_id"] != "opened" || td.Routing["rule_name"] != "PR opened" ||
		jsonString(td.Routing["action"]) != `{"queue":"urgent"}` {
		t.Fatalf("routing of the matched todo: %+v", td)
	}
	td = a.getTodo(closed.ID)
	if td.Queue != "inbox" || td.Routing["stage"] != "default" || jsonString(td.Routing["action"]) != `{"queue":"inbox"}` {
		t.Fatalf("routing of the default todo: %+v", td)
	}
	// claim returns the trace as well, and the event carries the same one.
	trace := jsonString(a.getTodo(opened.ID).Routing)
	if c := a.call("claim", obj{"id": opened.ID}); jsonString(c["routing"]) != trace {
		t.Fatalf("claim routing: %v, want %s", c["routing"], trace)
	}
	if ev := a.getEvent(eventOf(t, opened)); ev.Disposition != "delivered" || jsonString(ev.Routing) != trace {
		t.Fatalf("event routing: %+v, want %s", ev, trace)
	}

	// A default action applies when nothing matches; params are bound as $params.
	a.setRules(w.WebhookID, []rule{
		{ID: "by-param", Expr: `.payload.action == $params.hot`, Action: action{Queue: "urgent"}},
	}, obj{"default_action": action{Queue: "inbox"}, "params": obj{"hot": "labeled"}})
	if d := mustDeliver(t, w, `{"action":"labeled"}`); d.Queue != "urgent" {
		t.Fatalf("$params rule: %s", d.Raw)
	}
	if d := mustDeliver(t, w, `{"action":"opened"}`); d.Queue != "inbox" {
		t.Fatalf("default action: %s", d.Raw)
	}
	// A save without params keeps the stored ones.
	rs = a.setRules(w.WebhookID, []rule{
		{ID: "by-param", Expr: `.payload.action == $params.hot`, Action: action{Queue: "urgent"}},
	}, nil)
	if jsonString(rs.Params) != `{"hot":"labeled"}` || rs.DefaultAction != nil {
		t.Fatalf("params kept, default cleared: %+v", rs)
	}
	if d := mustDeliver(t, w, `{"action":"labeled"}`); d.Queue != "urgent" {
		t.Fatalf("kept $params: %s", d.Raw)
	}
}

// Concurrent edits of one list never lose an update: each add either lands or answers conflict.
func TestConcurrentRuleEditsLoseNothing(t *testing.T) {
	ep := hooker(t, human(t))
	a := connect(t, ep)
	w := a.createWebhook("github", "inbox")
	const n = 6
	agents := make([]*agent, n)
	for i := range agents {
		agents[i] = connect(t, ep)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, ag := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = ag.c.Call(ctxT(t), "add_webhook_rule", obj{"webhook_id": w.WebhookID,
				"id": fmt.Sprintf("c%d", i), "expr": "false", "action": action{Drop: true}})
		}()
	}
	close(start)
	wg.Wait()
	var landed []string
	for i, err := range errs {
		switch agentclient.CodeOf(err) {
		case "":
			if err != nil {
				t.Fatal(err)
			}
			landed = append(landed, fmt.Sprintf("c%d", i))
		case "conflict":
		default:
			t.Fatalf("add %d: %v", i, err)
		}
	}
	got := a.rules(w.WebhookID).ids()
	slices.Sort(got)
	if len(landed) == 0 || !slices.Equal(got, landed) {
		t.Fatalf("saved %v, successful adds %v", got, landed)
	}
}

func TestDropRuleStoresTheEventAndMakesNoTodo(t *testing.T) {
	a := connect(t, hooker(t, human(t)))
	w := a.createWebhook("github", "inbox")
	a.setRules(w.WebhookID, []rule{{ID: "no-pings", Expr: `.payload | has("zen")`, Action: action{Drop: true}}}, nil)

	d := mustDeliver(t, w, `{"zen":"Keep it logically awesome.","hook_id":1}`)
	if !d.Dropped || d.Created != 0 || len(d.Todos) != 0 || !strings.Contains(d.Raw, `"todos":[]`) || !d.Verified {
		t.Fatalf("drop: %s", d.Raw)
	}
	if n := todoCount(t, w.WebhookID); n != 0 {
		t.Fatalf("a dropped delivery made %d todos", n)
	}
	if got := a.todoIDs(obj{}); len(got) != 0 {
		t.Fatalf("list_todos: %v", got)
	}
	evs := a.events(obj{"webhook_id": w.WebhookID})
	if len(evs) != 1 || evs[0].Disposition != "dropped" {
		t.Fatalf("events: %+v", evs)
	}
	ev := a.getEvent(evs[0].ID)
	if ev.Routing["stage"] != "rule" || ev.Routing["rule_id"] != "no-pings" || jsonString(ev.Routing["action"]) != `{"drop":true}` ||
		jsonString(ev.Payload) != `{"hook_id":1,"zen":"Keep it logically awesome."}` {
		t.Fatalf("dropped event: %+v", ev)
	}
	// Others still get through.
	if d := mustDeliver(t, w, `{"action":"opened"}`); d.Dropped || d.Created != 1 {
		t.Fatalf("non-matching delivery: %s", d.Raw)
	}
}

func TestEndpointsNarrowARoutedDelivery(t *testing.T) {
	alice := human(t)
	owner, second := hooker(t, alice), hooker(t, alice)
	a, s := connect(t, owner), connect(t, second)
	w := a.createWebhook("github", "inbox")
	a.addRoute(w.WebhookID, second.ID)
	rs := a.setRules(w.WebhookID, []rule{
		{ID: "owner-only", Expr: `.payload.who == "owner"`, Action: action{Queue: "inbox", Endpoints: []string{owner.ID}}},
		{ID: "second-only", Expr: `.payload.who == "second"`, Action: action{Queue: "urgent", Endpoints: []string{second.ID}}},
	}, nil)
	if !slices.Equal(rs.Grant.Endpoints, []string{owner.ID, second.ID}) {
		t.Fatalf("grant endpoints: %v", rs.Grant.Endpoints)
	}

	if d := mustDeliver(t, w, `{"who":"owner"}`); !slices.Equal(d.endpoints(), []string{owner.ID}) || d.Created != 1 {
		t.Fatalf("narrowed to owner: %s", d.Raw)
	}
	d := mustDeliver(t, w, `{"who":"second"}`)
	if !slices.Equal(d.endpoints(), []string{second.ID}) || d.Queue != "urgent" || d.ID != d.Todos[0].ID {
		t.Fatalf("narrowed to second: %s", d.Raw)
	}
	if td := s.getTodo(d.ID); td.Queue != "urgent" || td.Routing["rule_id"] != "second-only" {
		t.Fatalf("second's todo: %+v", td)
	}
	if d := mustDeliver(t, w, `{"who":"both"}`); !slices.Equal(d.endpoints(), []string{owner.ID, second.ID}) {
		t.Fatalf("unnarrowed: %s", d.Raw)
	}
	if got := a.todoIDs(obj{}); len(got) != 2 {
		t.Fatalf("owner has %d todos, want 2", len(got))
	}
}

// Every refused save leaves the previous list exactly as it was.
func TestRefusedRuleSavesKeepTheOldList(t *testing.T) {
	alice, bob := human(t), human(t)
	owner, bobs := hooker(t, alice), hooker(t, bob)
	befriend(t, alice, bob) // even a friend's endpoint is not a target until routed
	a := connect(t, owner)
	w := a.createWebhook("github", "inbox")
	a.setRules(w.WebhookID, []rule{
		{ID: "keep", Name: "the saved one", Expr: `.payload.action == "opened"`, Action: action{Queue: "urgent"}},
	}, obj{"params": obj{"p": 1}})
	before := a.rulesRaw(w.WebhookID)

	good := func(expr string) []rule { return []rule{{ID: "new", Expr: expr, Action: action{Queue: "inbox"}}} }
	refusals := []struct {
		code, verb string
		args       obj
	}{
		{"forbidden", "set_webhook_rules", obj{"rules": []rule{{Expr: "true", Action: action{Queue: "elsewhere"}}}}},
		{"forbidden", "set_webhook_rules", obj{"rules": []rule{{Expr: "true", Action: action{Queue: "inbox", Endpoints: []string{bobs.ID}}}}}},
		{"forbidden", "set_webhook_rules", obj{"rules": good("true"), "default_action": action{Queue: "elsewhere"}}},
		{"forbidden", "set_webhook_rules", obj{"rules": []rule{{Expr: "true", Action: action{Queue: "inbox", Endpoints: []string{newUUID()}}}}}},
		{"forbidden", "add_webhook_rule", obj{"expr": "true", "action": action{Queue: "elsewhere"}}},
		{"forbidden", "add_webhook_rule", obj{"expr": "true", "action": action{Queue: "inbox", Endpoints: []string{bobs.ID}}}},
		{"forbidden", "update_webhook_rule", obj{"rule_id": "keep", "action": action{Queue: "elsewhere"}}},
		{"invalid_expression", "set_webhook_rules", obj{"rules": good(`.payload.action ==`)}},
		{"invalid_expression", "set_webhook_rules", obj{"rules": good(`.payload | nosuchfunction`)}},
		{"invalid_expression", "set_webhook_rules", obj{"rules": good(`$other == 1`)}},
		{"invalid_expression", "add_webhook_rule", obj{"expr": `{`, "action": action{Queue: "inbox"}}},
		{"invalid_expression", "update_webhook_rule", obj{"rule_id": "keep", "expr": `.[`}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`env.HOME != null`)}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`input`)}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`now > 0`)}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`$ENV.PATH`)}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`import "x" as x; .`)}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`include "x"; .`)}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`[inputs]`)}},
		{"forbidden_function", "set_webhook_rules", obj{"rules": good(`def f: env; f`)}},
		{"forbidden_function", "add_webhook_rule", obj{"expr": `now`, "action": action{Queue: "inbox"}}},
		{"forbidden_function", "update_webhook_rule", obj{"rule_id": "keep", "expr": `$ENV | length > 0`}},
		{"rule_not_found", "update_webhook_rule", obj{"rule_id": "nope", "name": "x"}},
		{"rule_not_found", "move_webhook_rule", obj{"rule_id": "nope", "position": 0}},
		{"invalid_rule", "set_webhook_rules", obj{"rules": []rule{{Expr: "true", Action: action{Queue: "inbox", Drop: true}}}}},
		{"invalid_rule", "set_webhook_rules", obj{"rules": []rule{{Expr: "true"}}}},
		{"invalid_rule", "set_webhook_rules", obj{"rules": []rule{{ID: "a", Expr: "true", Action: action{Drop: true}}, {ID: "a", Expr: "false", Action: action{Drop: true}}}}},
		{"invalid_rule", "add_webhook_rule", obj{"id": "keep", "expr": "true", "action": action{Drop: true}}},
		{"invalid_params", "set_webhook_rules", obj{"rules": good("true"), "params": []int{1}}},
		{"too_many_rules", "set_webhook_rules", obj{"rules": slices.Repeat(good("true")[:1:1], 33)}},
		{"invalid_argument", "set_webhook_rules", obj{"rules": good("true"), "trust_mode": "token"}},
		{"invalid_argument", "add_webhook_rule", obj{"expr": "true"}},
	}
	for _, r := range refusals {
		args := obj{"webhook_id": w.WebhookID}
		for k, v := range r.args {
			args[k] = v
		}
		if r.code == "too_many_rules" { // distinct ids, so only the count is wrong
			list := make([]rule, 33)
			for i := range list {
				list[i] = rule{ID: fmt.Sprintf("r%d", i), Expr: "false", Action: action{Drop: true}}
			}
			args["rules"] = list
		}
		a.fail(r.code, r.verb, args)
		if after := a.rulesRaw(w.WebhookID); after != before {
			t.Fatalf("%s %s (%s) changed the list:\n%s\nwas\n%s", r.verb, r.code, jsonString(r.args), after, before)
		}
	}
	// And the saved rule still routes.
	if d := mustDeliver(t, w, `{"action":"opened"}`); d.Queue != "urgent" {
		t.Fatalf("saved rule after refusals: %s", d.Raw)
	}
}

var mintedID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func TestRuleEditing(t *testing.T) {
	a := connect(t, hooker(t, human(t)))
	w := a.createWebhook("github", "inbox")
	id := w.WebhookID
	add := func(args obj) ruleSet {
		t.Helper()
		args["webhook_id"] = id
		var rs ruleSet
		a.into("add_webhook_rule", args, &rs)
		return rs
	}
	drop := action{Drop: true}
	add(obj{"id": "r1", "expr": "false", "action": drop})
	add(obj{"id": "r2", "expr": "false", "action": drop})
	add(obj{"id": "r3", "expr": "false", "action": drop})
	if rs := add(obj{"id": "r0", "expr": "false", "action": drop, "position": 0}); !slices.Equal(rs.ids(), []string{"r0", "r1", "r2", "r3"}) {
		t.Fatalf("add at 0: %v", rs.ids())
	}
	if rs := add(obj{"id": "rx", "expr": "false", "action": drop, "position": 2}); !slices.Equal(rs.ids(), []string{"r0", "r1", "rx", "r2", "r3"}) {
		t.Fatalf("add at 2: %v", rs.ids())
	}
	rs := add(obj{"name": "minted", "expr": "false", "action": drop, "position": 99})
	minted := rs.Rules[len(rs.Rules)-1]
	if minted.Name != "minted" || !mintedID.MatchString(minted.ID) || slices.Contains([]string{"r0", "r1", "rx", "r2", "r3"}, minted.ID) {
		t.Fatalf("minted rule: %+v", minted)
	}
	var out ruleSet
	a.into("remove_webhook_rule", obj{"webhook_id": id, "rule_id": minted.ID}, &out)

	move := func(rule string, pos int) []string {
		t.Helper()
		var rs ruleSet
		a.into("move_webhook_rule", obj{"webhook_id": id, "rule_id": rule, "position": pos}, &rs)
		return rs.ids()
	}
	if got := move("r0", 99); !slices.Equal(got, []string{"r1", "rx", "r2", "r3", "r0"}) {
		t.Fatalf("move to 99: %v", got)
	}
	if got := move("r3", -5); !slices.Equal(got, []string{"r3", "r1", "rx", "r2", "r0"}) {
		t.Fatalf("move to -5: %v", got)
	}
	if got := move("rx", 1); !slices.Equal(got, []string{"r3", "rx", "r1", "r2", "r0"}) {
		t.Fatalf("move to 1: %v", got)
	}

	// update changes only what it names.
	a.into("update_webhook_rule", obj{"webhook_id": id, "rule_id": "r1", "name": "opened",
		"expr": `.payload.action == "opened"`, "action": action{Queue: "urgent"}}, &out)
	a.into("update_webhook_rule", obj{"webhook_id": id, "rule_id": "r2", "name": "renamed"}, &out)
	byID := map[string]rule{}
	for _, r := range a.rules(id).Rules {
		byID[r.ID] = r
	}
	if r := byID["r1"]; r.Name != "opened" || r.Expr != `.payload.action == "opened"` || r.Action.Queue != "urgent" || r.Action.Drop {
		t.Fatalf("updated r1: %+v", r)
	}
	if r := byID["r2"]; r.Name != "renamed" || r.Expr != "false" || !r.Action.Drop {
		t.Fatalf("renamed r2: %+v", r)
	}

	// remove twice: both succeed, the second changes nothing.
	a.into("remove_webhook_rule", obj{"webhook_id": id, "rule_id": "rx"}, &out)
	first := a.rulesRaw(id)
	a.into("remove_webhook_rule", obj{"webhook_id": id, "rule_id": "rx"}, &out)
	if !slices.Equal(out.ids(), []string{"r3", "r1", "r2", "r0"}) || a.rulesRaw(id) != first {
		t.Fatalf("remove twice: %v", out.ids())
	}
	if d := mustDeliver(t, w, `{"action":"opened"}`); d.Queue != "urgent" {
		t.Fatalf("edited list routes: %s", d.Raw)
	}
}

// A rule that errors and rules that never end each fault the delivery within the budget: the
// event is stored as faulted with its trace, no todo, 202 faulted, and the server goes on.
func TestFaultingRulesFailClosedWithinTheBudget(t *testing.T) {
	a := connect(t, hooker(t, human(t)))
	w := a.createWebhook("github", "inbox")
	cases := []struct{ name, expr, cause string }{
		{"runtime error", `(.payload.action | tonumber) > 0`, "error"},
		{"raised error", `error("boom")`, "error"},
		{"endless recursion", `def f: f; f`, ""},
		{"endless repeat", `[repeat(.)]`, ""},
		{"endless range", `[range(1; infinite)] | length > 0`, ""},
	}
	for _, c := range cases {
		a.setRules(w.WebhookID, []rule{
			{ID: "bad", Name: c.name, Expr: c.expr, Action: action{Queue: "urgent"}},
			{ID: "never-reached", Expr: "true", Action: action{Queue: "inbox"}},
		}, nil)
		events, todos := eventCount(t, w.WebhookID), todoCount(t, w.WebhookID)
		start := time.Now()
		d := mustDeliver(t, w, `{"action":"opened"}`)
		took := time.Since(start)
		if !d.Faulted || d.Created != 0 || len(d.Todos) != 0 || d.Dropped {
			t.Fatalf("%s: %s", c.name, d.Raw)
		}
		if took > 900*time.Millisecond {
			t.Fatalf("%s: the delivery took %v", c.name, took)
		}
		if eventCount(t, w.WebhookID) != events+1 || todoCount(t, w.WebhookID) != todos {
			t.Fatalf("%s: want one more event and no todo", c.name)
		}
		ev := a.lastEvent(w.WebhookID)
		cause, _ := ev.Routing["cause"].(string)
		if ev.Disposition != "faulted" || ev.Routing["stage"] != "fault" || cause == "" ||
			(c.cause != "" && !strings.HasPrefix(cause, c.cause)) {
			t.Fatalf("%s: event %+v", c.name, ev)
		}
		// The server answers at once.
		start = time.Now()
		a.call("list_webhooks", nil)
		if since := time.Since(start); since > 500*time.Millisecond {
			t.Fatalf("%s: a tool call after the fault took %v", c.name, since)
		}
	}
	if got := a.todoIDs(obj{}); len(got) != 0 {
		t.Fatalf("faulted deliveries made todos: %v", got)
	}
	// A sane list routes again.
	a.setRules(w.WebhookID, []rule{}, nil)
	if d := mustDeliver(t, w, `{"action":"opened"}`); d.Faulted || d.Created != 1 {
		t.Fatalf("after clearing the rules: %s", d.Raw)
	}
}

// An endpoint without the rule verbs is refused them, even on its own human's webhook, and
// nothing changes.
func TestRuleVerbsOutsideTheAllowlist(t *testing.T) {
	alice := human(t)
	owner := hooker(t, alice)
	a := connect(t, owner)
	w := a.createWebhook("github", "inbox")
	a.setRules(w.WebhookID, []rule{{ID: "keep", Expr: "true", Action: action{Queue: "urgent"}}}, nil)
	mustDeliver(t, w, `{"action":"opened"}`)
	ev := a.events(obj{"webhook_id": w.WebhookID})[0].ID
	before := a.rulesRaw(w.WebhookID)

	reader := connect(t, vend(t, alice, grant{queues: []string{"inbox", "urgent"},
		verbs: []string{"list_todos", "list_webhook_rules", "list_webhook_routes"}}))
	tools, err := reader.c.Session.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"get_todo", "list_todos", "list_webhook_routes", "list_webhook_rules"}) {
		t.Fatalf("tools/list: %v", names)
	}
	id := w.WebhookID
	for verb, args := range map[string]obj{
		"set_webhook_rules":   {"webhook_id": id, "rules": []rule{}},
		"add_webhook_rule":    {"webhook_id": id, "expr": "true", "action": action{Drop: true}},
		"update_webhook_rule": {"webhook_id": id, "rule_id": "keep", "action": action{Drop: true}},
		"move_webhook_rule":   {"webhook_id": id, "rule_id": "keep", "position": 0},
		"remove_webhook_rule": {"webhook_id": id, "rule_id": "keep"},
		"test_webhook_rules":  {"webhook_id": id, "event_id": ev},
		"add_webhook_route":   {"webhook_id": id, "target_endpoint_id": reader.ep.ID},
		"get_webhook_event":   {"id": ev},
		"create_webhook":      {"source_type": "github", "target_queue": "inbox"},
	} {
		te := reader.fail("forbidden", verb, args)
		if !strings.Contains(te.Message, verb) {
			t.Fatalf("%s: %q", verb, te.Message)
		}
	}
	if got := reader.rulesRaw(w.WebhookID); got != before {
		t.Fatalf("rules changed or differ for the reader:\n%s\n%s", got, before)
	}
	if got := a.rulesRaw(w.WebhookID); got != before {
		t.Fatalf("rules changed: %s", got)
	}
	if l := reader.routes(id); len(l.Routes) != 0 {
		t.Fatalf("routes: %+v", l)
	}
}

type dryRun struct {
	Decision struct {
		Drop        bool     `json:"drop"`
		Queue       string   `json:"queue"`
		Endpoints   []string `json:"endpoints"`
		Disposition string   `json:"disposition"`
		Faulted     bool     `json:"faulted"`
	} `json:"decision"`
	Trace    obj `json:"trace"`
	Envelope obj `json:"envelope"`
}

func TestDryRunPersistsNothing(t *testing.T) {
	alice, bob := human(t), human(t)
	owner := hooker(t, alice)
	a, b := connect(t, owner), connect(t, hooker(t, bob))
	w := a.createWebhook("github", "inbox")
	other := a.createWebhook("generic", "inbox")
	foreign := b.createWebhook("github", "inbox")
	a.setRules(w.WebhookID, []rule{
		{ID: "opened", Name: "PR opened", Expr: `.payload.action == "opened"`, Action: action{Queue: "urgent"}},
	}, nil)
	closed := mustDeliver(t, w, `{"action":"closed","repository":{"full_name":"acme/app"}}`)
	closedEvent := eventOf(t, closed)
	otherEvent := eventOf(t, post(t, other.IngestURL, []byte(`{"x":1}`), http.Header{"X-Delivery-Id": {"o1"}}))
	foreignEvent := eventOf(t, mustDeliver(t, foreign, `{"action":"opened"}`))

	before := a.rulesRaw(w.WebhookID)
	events, todos := eventCount(t, w.WebhookID), todoCount(t, w.WebhookID)
	allEvents, allTodos := count(t, `SELECT count(*) FROM switchboard.webhook_events`), count(t, `SELECT count(*) FROM switchboard.todos`)
	dry := func(args obj) dryRun {
		t.Helper()
		args["webhook_id"] = w.WebhookID
		var out dryRun
		a.into("test_webhook_rules", args, &out)
		return out
	}

	// A sample payload against the saved rules.
	r := dry(obj{"payload": obj{"action": "opened"}, "headers": obj{"X-Event-Type": "pull_request", "Authorization": "Bearer x"}})
	if r.Decision.Queue != "urgent" || r.Decision.Drop || r.Decision.Faulted || r.Decision.Disposition != "routed" ||
		r.Trace["stage"] != "rule" || r.Trace["rule_id"] != "opened" || r.Trace["rule_name"] != "PR opened" {
		t.Fatalf("payload dry run: %+v", r)
	}
	if r.Envelope["source"] != "github" || r.Envelope["webhook_id"] != w.WebhookID ||
		jsonString(r.Envelope["payload"]) != `{"action":"opened"}` {
		t.Fatalf("envelope: %v", r.Envelope)
	}
	if h, _ := r.Envelope["headers"].(obj); h["authorization"] != "[redacted]" {
		t.Fatalf("envelope headers: %v", r.Envelope["headers"])
	}
	// A stored event against the saved rules: the default.
	r = dry(obj{"event_id": closedEvent})
	if r.Decision.Queue != "inbox" || r.Decision.Drop || r.Trace["stage"] != "default" ||
		jsonString(r.Envelope["payload"]) != `{"action":"closed","repository":{"full_name":"acme/app"}}` ||
		r.Envelope["kind"] != "pull_request" || r.Envelope["verified"] != true {
		t.Fatalf("event dry run: %+v", r)
	}
	// The same event against candidate rules: drop, or a fault, without saving them.
	r = dry(obj{"event_id": closedEvent, "rules": []rule{{ID: "drop-closed", Expr: `.payload.action == "closed"`, Action: action{Drop: true}}}})
	if !r.Decision.Drop || r.Decision.Disposition != "dropped" || r.Trace["rule_id"] != "drop-closed" {
		t.Fatalf("candidate drop: %+v", r)
	}
	r = dry(obj{"payload": obj{"who": "owner"}, "rules": []rule{{ID: "narrow", Expr: `.payload.who == "owner"`,
		Action: action{Queue: "inbox", Endpoints: []string{owner.ID}}}}})
	if r.Decision.Queue != "inbox" || !slices.Equal(r.Decision.Endpoints, []string{owner.ID}) {
		t.Fatalf("candidate narrow: %+v", r)
	}
	r = dry(obj{"payload": obj{}, "rules": []rule{{ID: "loop", Expr: `def f: f; f`, Action: action{Drop: true}}}})
	if !r.Decision.Faulted || r.Decision.Disposition != "faulted" || r.Trace["stage"] != "fault" {
		t.Fatalf("candidate fault: %+v", r)
	}
	r = dry(obj{"payload": obj{"action": "x"}, "rules": []rule{}, "default_action": action{Queue: "urgent"}})
	if r.Decision.Queue != "urgent" || r.Trace["stage"] != "default" {
		t.Fatalf("candidate default action: %+v", r)
	}

	// Refusals.
	base := func(extra obj) obj {
		args := obj{"webhook_id": w.WebhookID}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	a.fail("invalid_argument", "test_webhook_rules", base(nil))
	a.fail("invalid_argument", "test_webhook_rules", base(obj{"payload": obj{}, "event_id": closedEvent}))
	a.fail("not_found", "test_webhook_rules", base(obj{"event_id": otherEvent}))
	a.fail("not_found", "test_webhook_rules", base(obj{"event_id": foreignEvent}))
	a.fail("not_found", "test_webhook_rules", base(obj{"event_id": closedEvent + 1_000_000}))
	a.fail("not_found", "test_webhook_rules", obj{"webhook_id": foreign.WebhookID, "event_id": foreignEvent})
	a.fail("forbidden", "test_webhook_rules", base(obj{"payload": obj{}, "rules": []rule{{Expr: "true", Action: action{Queue: "elsewhere"}}}}))
	a.fail("forbidden", "test_webhook_rules", base(obj{"payload": obj{}, "rules": []rule{}, "default_action": action{Queue: "elsewhere"}}))
	a.fail("forbidden_function", "test_webhook_rules", base(obj{"payload": obj{}, "rules": []rule{{Expr: "now", Action: action{Drop: true}}}}))
	a.fail("invalid_expression", "test_webhook_rules", base(obj{"payload": obj{}, "rules": []rule{{Expr: ".[", Action: action{Drop: true}}}}))

	if after := a.rulesRaw(w.WebhookID); after != before {
		t.Fatalf("the dry runs changed the saved list:\n%s\n%s", after, before)
	}
	if eventCount(t, w.WebhookID) != events || todoCount(t, w.WebhookID) != todos ||
		count(t, `SELECT count(*) FROM switchboard.webhook_events`) != allEvents ||
		count(t, `SELECT count(*) FROM switchboard.todos`) != allTodos {
		t.Fatal("a dry run stored events or todos")
	}
	// The saved list still routes as before.
	if d := mustDeliver(t, w, `{"action":"opened"}`); d.Queue != "urgent" {
		t.Fatalf("after dry runs: %s", d.Raw)
	}
}

// Rule verbs share the route verbs' ownership gate: one identical not_found for ids that are
// unknown, malformed or another human's.
func TestRuleVerbsNotFoundIsIdentical(t *testing.T) {
	a, b := connect(t, hooker(t, human(t))), connect(t, hooker(t, human(t)))
	foreign := b.createWebhook("github", "inbox")
	b.setRules(foreign.WebhookID, []rule{{ID: "theirs", Expr: "true", Action: action{Queue: "urgent"}}}, nil)
	before := b.rulesRaw(foreign.WebhookID)
	for _, verb := range []string{"list_webhook_rules", "set_webhook_rules", "add_webhook_rule", "update_webhook_rule",
		"move_webhook_rule", "remove_webhook_rule", "test_webhook_rules"} {
		var first string
		for _, id := range []string{foreign.WebhookID, newUUID(), "nope"} {
			args := map[string]obj{
				"list_webhook_rules":  {},
				"set_webhook_rules":   {"rules": []rule{}},
				"add_webhook_rule":    {"expr": "true", "action": action{Drop: true}},
				"update_webhook_rule": {"rule_id": "theirs", "name": "mine now"},
				"move_webhook_rule":   {"rule_id": "theirs", "position": 0},
				"remove_webhook_rule": {"rule_id": "theirs"},
				"test_webhook_rules":  {"payload": obj{}},
			}[verb]
			args["webhook_id"] = id
			got := a.raw(verb, args)
			if !strings.Contains(got, `"isError":true`) || !strings.Contains(got, "not_found: ") {
				t.Fatalf("%s %s: %s", verb, id, got)
			}
			if first == "" {
				first = got
			} else if got != first {
				t.Fatalf("%s: %s vs %s", verb, got, first)
			}
		}
	}
	if after := b.rulesRaw(foreign.WebhookID); after != before {
		t.Fatalf("another human changed bob's rules: %s", after)
	}
}

// Candidate params alone are tried against the saved list, saved default action included.
func TestDryRunCandidateParamsUseTheSavedList(t *testing.T) {
	a := connect(t, hooker(t, human(t)))
	w := a.createWebhook("github", "inbox")
	a.setRules(w.WebhookID, []rule{{ID: "hot", Expr: `.payload.level == $params.hot`, Action: action{Drop: true}}},
		obj{"default_action": action{Queue: "urgent"}, "params": obj{"hot": 1}})
	before := a.rulesRaw(w.WebhookID)
	dry := func(args obj) dryRun {
		t.Helper()
		args["webhook_id"] = w.WebhookID
		var out dryRun
		a.into("test_webhook_rules", args, &out)
		return out
	}
	if r := dry(obj{"payload": obj{"level": 2}}); r.Decision.Queue != "urgent" || r.Trace["stage"] != "default" {
		t.Fatalf("saved list, no match: %+v", r)
	}
	if r := dry(obj{"payload": obj{"level": 2}, "params": obj{"hot": 2}}); !r.Decision.Drop || r.Trace["rule_id"] != "hot" {
		t.Fatalf("candidate params, match: %+v", r)
	}
	if r := dry(obj{"payload": obj{"level": 1}, "params": obj{"hot": 2}}); r.Decision.Queue != "urgent" ||
		jsonString(r.Trace["action"]) != `{"queue":"urgent"}` {
		t.Fatalf("candidate params, no match: the saved default action applies: %+v", r)
	}
	if r := dry(obj{"payload": obj{"level": 3}, "default_action": action{Queue: "inbox"}}); r.Decision.Queue != "inbox" || r.Decision.Drop {
		t.Fatalf("candidate default action: %+v", r)
	}
	if after := a.rulesRaw(w.WebhookID); after != before {
		t.Fatalf("dry runs changed the list: %s", after)
	}
}
