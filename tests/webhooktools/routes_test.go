package webhooktools_test

// Issue 5 through MCP: route verbs under ownership and friendship, and what a delivery then does.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

type routeList struct {
	WebhookID       string `json:"webhook_id"`
	OwnerEndpointID string `json:"owner_endpoint_id"`
	Routes          []struct {
		TargetEndpointID string `json:"target_endpoint_id"`
		GrantedAt        string `json:"granted_at"`
	} `json:"routes"`
}

func (r routeList) targets() []string {
	out := []string{}
	for _, x := range r.Routes {
		out = append(out, x.TargetEndpointID)
	}
	return out
}

func (a *agent) routes(webhookID string) routeList {
	a.t.Helper()
	var l routeList
	a.into("list_webhook_routes", obj{"webhook_id": webhookID}, &l)
	return l
}

func (a *agent) addRoute(webhookID, target string) {
	a.t.Helper()
	out := a.call("add_webhook_route", obj{"webhook_id": webhookID, "target_endpoint_id": target})
	if out["routed"] != true || out["webhook_id"] != webhookID || out["target_endpoint_id"] != target {
		a.t.Fatalf("add_webhook_route: %v", out)
	}
}

func (a *agent) removeRoute(webhookID, target string) {
	a.t.Helper()
	out := a.call("remove_webhook_route", obj{"webhook_id": webhookID, "target_endpoint_id": target})
	if out["removed"] != true || out["webhook_id"] != webhookID {
		a.t.Fatalf("remove_webhook_route: %v", out)
	}
}

// Scenario: an agent routes its webhook to another endpoint of its own human; no edge needed.
// One delivery, one todo per endpoint, each visible only to its own endpoint.
func TestRouteToOwnSecondEndpoint(t *testing.T) {
	alice := human(t)
	owner, second := hooker(t, alice), hooker(t, alice)
	a, s := connect(t, owner), connect(t, second)
	w := a.createWebhook("github", "inbox")

	a.addRoute(w.WebhookID, second.ID)
	l := a.routes(w.WebhookID)
	if l.WebhookID != w.WebhookID || l.OwnerEndpointID != owner.ID || !slices.Equal(l.targets(), []string{second.ID}) ||
		!rfc3339Re.MatchString(l.Routes[0].GrantedAt) {
		t.Fatalf("list_webhook_routes: %+v", l)
	}
	// The other agent of the same human may read the routes too (ownership is the human's).
	if l2 := s.routes(w.WebhookID); l2.OwnerEndpointID != owner.ID || !slices.Equal(l2.targets(), []string{second.ID}) {
		t.Fatalf("second endpoint's view: %+v", l2)
	}

	d := mustDeliver(t, w, `{"action":"opened"}`)
	if d.Created != 2 || !slices.Equal(d.endpoints(), []string{owner.ID, second.ID}) || d.ID != d.Todos[0].ID {
		t.Fatalf("delivery: %s", d.Raw)
	}
	ownTodo, secondTodo := d.Todos[0].ID, d.Todos[1].ID
	if got := a.todoIDs(obj{}); !slices.Equal(got, []string{ownTodo}) {
		t.Fatalf("owner sees %v, want [%s]", got, ownTodo)
	}
	if got := s.todoIDs(obj{}); !slices.Equal(got, []string{secondTodo}) {
		t.Fatalf("second sees %v, want [%s]", got, secondTodo)
	}
	a.fail("not_found", "get_todo", obj{"id": secondTodo})
	s.fail("not_found", "get_todo", obj{"id": ownTodo})
	a.fail("not_found", "claim", obj{"id": secondTodo})
	if td := s.call("claim", obj{"id": secondTodo}); td["id"] != secondTodo || td["state"] != "claimed" {
		t.Fatalf("second claims its todo: %v", td)
	}
}

// Scenario: another human's endpoint is refused unless an approved edge runs from the webhook
// owner's human to the target's human.
func TestRouteToAnotherHumanNeedsAnApprovedEdge(t *testing.T) {
	alice, bob := human(t), human(t)
	owner, bobs := hooker(t, alice), hooker(t, bob)
	a := connect(t, owner)
	w := a.createWebhook("github", "inbox")
	add := obj{"webhook_id": w.WebhookID, "target_endpoint_id": bobs.ID}

	refusals := map[string]string{}
	refuse := func(situation string) {
		t.Helper()
		a.fail("forbidden", "add_webhook_route", add)
		refusals[situation] = a.raw("add_webhook_route", add)
		if l := a.routes(w.WebhookID); len(l.Routes) != 0 {
			t.Fatalf("%s: a refused add left a route: %+v", situation, l)
		}
	}
	refuse("no edge")
	edge := friendRequest(t, alice, bob)
	refuse("pending")
	friendDecide(t, edge, "denied")
	refuse("denied")
	edge = befriend(t, alice, bob)
	friendDecide(t, edge, "revoked")
	refuse("revoked")
	befriend(t, bob, alice)
	refuse("approved, opposite direction")
	for situation, r := range refusals {
		if r != refusals["no edge"] {
			t.Fatalf("%s answers %s, no edge answers %s", situation, r, refusals["no edge"])
		}
	}

	befriend(t, alice, bob)
	a.addRoute(w.WebhookID, bobs.ID)
	if l := a.routes(w.WebhookID); !slices.Equal(l.targets(), []string{bobs.ID}) {
		t.Fatalf("routes: %+v", l)
	}
	d := mustDeliver(t, w, `{"action":"opened"}`)
	if !slices.Equal(d.endpoints(), []string{owner.ID, bobs.ID}) {
		t.Fatalf("delivery: %s", d.Raw)
	}
	// Bob's agent sees its todo, yet cannot manage alice's webhook.
	b := connect(t, bobs)
	if got := b.todoIDs(obj{}); !slices.Equal(got, []string{d.Todos[1].ID}) {
		t.Fatalf("bob sees %v", got)
	}
	b.fail("not_found", "list_webhook_routes", obj{"webhook_id": w.WebhookID})
	b.fail("not_found", "remove_webhook_route", add)
	// Nor read its events: a route target gets todos, not the owner's event history.
	if evs := b.events(obj{}); len(evs) != 0 {
		t.Fatalf("bob sees alice's events: %+v", evs)
	}
	b.fail("not_found", "get_webhook_event", obj{"id": eventOf(t, d)})
}

// Unknown, malformed, deleted and other-human webhook ids give one identical not_found on
// every route verb: the agent's model cannot tell them apart.
func TestRouteVerbsNotFoundIsIdentical(t *testing.T) {
	alice, bob := human(t), human(t)
	owner, bobs := hooker(t, alice), hooker(t, bob)
	a, b := connect(t, owner), connect(t, bobs)
	mine := a.createWebhook("github", "inbox")
	deleted := a.createWebhook("generic", "inbox")
	a.call("delete_webhook", obj{"webhook_id": deleted.WebhookID})
	foreign := b.createWebhook("github", "inbox")

	ids := map[string]string{
		"unknown":   newUUID(),
		"malformed": "not-a-uuid",
		"injection": "' OR 1=1 --",
		"uppercase": strings.ToUpper(newUUID()),
		"empty":     "",
		"deleted":   deleted.WebhookID,
		"foreign":   foreign.WebhookID,
	}
	for _, verb := range []string{"add_webhook_route", "list_webhook_routes", "remove_webhook_route"} {
		var first string
		for what, id := range ids {
			args := obj{"webhook_id": id}
			if verb != "list_webhook_routes" {
				args["target_endpoint_id"] = owner.ID
			}
			got := a.raw(verb, args)
			if !strings.Contains(got, `"isError":true`) || !strings.Contains(got, `not_found: `) {
				t.Fatalf("%s %s: %s", verb, what, got)
			}
			if first == "" {
				t.Logf("%s: %s", verb, got)
				first = got
			} else if got != first {
				t.Fatalf("%s: %s answers %s, another id %s", verb, what, got, first)
			}
		}
	}
	// The refusals touched nothing of bob's; alice's own webhook still works.
	if l := b.routes(foreign.WebhookID); len(l.Routes) != 0 {
		t.Fatalf("bob's routes: %+v", l)
	}
	a.routes(mine.WebhookID)
}

// Unknown, malformed, revoked and unfriended targets give one identical forbidden.
func TestRouteTargetForbiddenIsIdentical(t *testing.T) {
	alice, bob, carol := human(t), human(t), human(t)
	owner := hooker(t, alice)
	revokedOwn := hooker(t, alice)
	mustExec(t, `SELECT switchboard.endpoint_revoke($1)`, revokedOwn.ID)
	bobs, carols := hooker(t, bob), hooker(t, carol)
	friendDecide(t, befriend(t, alice, bob), "revoked")
	// carol befriended alice, not the other way round.
	befriend(t, carol, alice)

	a := connect(t, owner)
	w := a.createWebhook("github", "inbox")
	targets := map[string]string{
		"unknown":                 newUUID(),
		"malformed":               "endpoint-1",
		"empty":                   "",
		"revoked endpoint":        revokedOwn.ID,
		"revoked edge":            bobs.ID,
		"unfriended (reverse)":    carols.ID,
		"the webhook id":          w.WebhookID,
		"unknown, in upper case":  strings.ToUpper(newUUID()),
		"slug instead of an id":   bobs.Slug,
		"sql in the target field": "x'); DELETE FROM switchboard.webhook_routes; --",
	}
	var first string
	for what, id := range targets {
		got := a.raw("add_webhook_route", obj{"webhook_id": w.WebhookID, "target_endpoint_id": id})
		if !strings.Contains(got, `"isError":true`) || !strings.Contains(got, `forbidden: `) {
			t.Fatalf("%s: %s", what, got)
		}
		if first == "" {
			t.Logf("add_webhook_route: %s", got)
			first = got
		} else if got != first {
			t.Fatalf("%s answers %s, another target %s", what, got, first)
		}
	}
	if l := a.routes(w.WebhookID); len(l.Routes) != 0 {
		t.Fatalf("routes after refusals: %+v", l)
	}
}

func TestRouteAddAndRemoveAreIdempotent(t *testing.T) {
	alice := human(t)
	owner, second, third := hooker(t, alice), hooker(t, alice), hooker(t, alice)
	a := connect(t, owner)
	w := a.createWebhook("github", "inbox")

	a.addRoute(w.WebhookID, second.ID)
	a.addRoute(w.WebhookID, second.ID)
	a.addRoute(w.WebhookID, third.ID)
	before := a.routes(w.WebhookID)
	if !slices.Equal(before.targets(), []string{second.ID, third.ID}) {
		t.Fatalf("add twice: %+v", before)
	}
	// Removing (or adding) the owner changes nothing: it stays reported, the routes stay.
	a.removeRoute(w.WebhookID, owner.ID)
	a.addRoute(w.WebhookID, owner.ID)
	if l := a.routes(w.WebhookID); l.OwnerEndpointID != owner.ID || jsonString(l) != jsonString(before) {
		t.Fatalf("after owner remove/add: %+v, before %+v", l, before)
	}
	d := mustDeliver(t, w, `{"n":1}`)
	if !slices.Equal(d.endpoints(), []string{owner.ID, second.ID, third.ID}) {
		t.Fatalf("delivery: %s", d.Raw)
	}

	a.removeRoute(w.WebhookID, second.ID)
	a.removeRoute(w.WebhookID, second.ID)
	a.removeRoute(w.WebhookID, newUUID()) // never routed: fine too
	if l := a.routes(w.WebhookID); !slices.Equal(l.targets(), []string{third.ID}) {
		t.Fatalf("remove twice: %+v", l)
	}
	d = mustDeliver(t, w, `{"n":2}`)
	if !slices.Equal(d.endpoints(), []string{owner.ID, third.ID}) {
		t.Fatalf("delivery after remove: %s", d.Raw)
	}
}

// Scenario: the friendship is revoked after routing. The route stays listed and removable, the
// next delivery reaches only the owner, and the target keeps what it already got.
func TestRevokedEdgeKeepsTheRouteButStopsDelivery(t *testing.T) {
	alice, bob := human(t), human(t)
	owner, bobs := hooker(t, alice), hooker(t, bob)
	a, b := connect(t, owner), connect(t, bobs)
	edge := befriend(t, alice, bob)
	w := a.createWebhook("github", "inbox")
	a.addRoute(w.WebhookID, bobs.ID)

	first := mustDeliver(t, w, `{"n":1}`)
	if !slices.Equal(first.endpoints(), []string{owner.ID, bobs.ID}) {
		t.Fatalf("before revoke: %s", first.Raw)
	}
	friendDecide(t, edge, "revoked")
	if l := a.routes(w.WebhookID); !slices.Equal(l.targets(), []string{bobs.ID}) {
		t.Fatalf("route must stay listed: %+v", l)
	}
	second := mustDeliver(t, w, `{"n":2}`)
	if second.Created != 1 || !slices.Equal(second.endpoints(), []string{owner.ID}) {
		t.Fatalf("after revoke: %s", second.Raw)
	}
	if got := b.todoIDs(obj{}); !slices.Equal(got, []string{first.Todos[1].ID}) {
		t.Fatalf("bob sees %v", got)
	}
	if got := a.todoIDs(obj{}); !slices.Equal(got, []string{second.ID, first.ID}) {
		t.Fatalf("alice sees %v", got)
	}
	// The rule grant follows the live targets too.
	var rs struct {
		Grant struct {
			Endpoints []string `json:"endpoints"`
		} `json:"grant"`
	}
	a.into("list_webhook_rules", obj{"webhook_id": w.WebhookID}, &rs)
	if !slices.Equal(rs.Grant.Endpoints, []string{owner.ID}) {
		t.Fatalf("grant endpoints %v", rs.Grant.Endpoints)
	}
	// A new add is refused now, but the stale route can still be removed.
	a.fail("forbidden", "add_webhook_route", obj{"webhook_id": w.WebhookID, "target_endpoint_id": bobs.ID})
	a.removeRoute(w.WebhookID, bobs.ID)
	if l := a.routes(w.WebhookID); len(l.Routes) != 0 {
		t.Fatalf("routes after remove: %+v", l)
	}
}

// A fanned-out delivery rings each target's own session for its own todo, once: a redelivery
// creates nothing and rings nothing.
func TestFanOutRingsEachTarget(t *testing.T) {
	alice, bob := human(t), human(t)
	owner, bobs := hooker(t, alice), hooker(t, bob)
	befriend(t, alice, bob)
	a, b := listen(t, owner), listen(t, bobs)
	w := a.createWebhook("github", "inbox")
	a.addRoute(w.WebhookID, bobs.ID)

	body := []byte(`{"action":"opened","repository":{"full_name":"acme/app"}}`)
	header := func() map[string][]string {
		return map[string][]string{
			"Content-Type":        {"application/json"},
			"X-Github-Event":      {"pull_request"},
			"X-Github-Delivery":   {"ring-1"},
			"X-Hub-Signature-256": {githubSign(w.SigningSecret, body)},
		}
	}
	d := post(t, w.IngestURL, body, header())
	if d.Status != 202 || d.Created != 2 {
		t.Fatalf("delivery: %d %s", d.Status, d.Raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, ag := range []*agent{a, b} {
		n, err := ag.c.WaitNotification(ctx, d.Todos[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if n.Meta["queue"] != "inbox" || n.Meta["source"] != "github" {
			t.Fatalf("ring: %+v", n)
		}
	}
	if r := post(t, w.IngestURL, body, header()); r.Status != 202 || r.Created != 0 || jsonString(r.endpoints()) != jsonString(d.endpoints()) {
		t.Fatalf("redelivery: %s", r.Raw)
	}
	// Nothing more arrives for either session (the doorbell window is well under this).
	time.Sleep(300 * time.Millisecond)
	for _, ag := range []*agent{a, b} {
		select {
		case n := <-ag.c.Notifications():
			t.Fatalf("unexpected ring after a redelivery: %+v", n)
		default:
		}
	}
}
