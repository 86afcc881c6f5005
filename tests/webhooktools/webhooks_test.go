package webhooktools_test

// Issue 4 through MCP: create / list / rotate / delete within the ceiling, the webhook rate
// limit, and the event verbs.

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"switchboard/tests/e2e/agentclient"
)

var (
	hexToken  = regexp.MustCompile(`^[0-9a-f]{32,}$`)
	whsec     = regexp.MustCompile(`^whsec_[0-9a-f]{64}$`)
	rfc3339Re = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)
)

// ceilingOf is list_webhooks' ceiling.
type ceilingOf struct {
	Max                int      `json:"max"`
	AllowedSourceTypes []string `json:"allowed_source_types"`
	AllowedQueues      []string `json:"allowed_queues"`
	Used               int      `json:"used"`
}

type webhookList struct {
	Webhooks []webhook `json:"webhooks"`
	Ceiling  ceilingOf `json:"ceiling"`
}

// listWebhooks returns list_webhooks decoded and the full CallToolResult as the agent sees it.
func (a *agent) listWebhooks() (webhookList, string) {
	a.t.Helper()
	full := a.raw("list_webhooks", nil)
	var l webhookList
	a.into("list_webhooks", nil, &l)
	return l, full
}

func TestWebhookLifecycle(t *testing.T) {
	alice := human(t)
	ep := vend(t, alice, grant{webhookMax: 2, sources: []string{"github", "generic"}, webhookQueues: []string{"inbox"}})
	a := connect(t, ep)

	// create: ingest URL on this server, a long hex token, a whsec_ secret, trust mode signed.
	gh := a.createWebhook("github", "inbox")
	token, ok := strings.CutPrefix(gh.IngestURL, shared.base+"/webhooks/w/")
	if !ok || !hexToken.MatchString(token) {
		t.Fatalf("ingest_url %q", gh.IngestURL)
	}
	if gh.TrustMode != "signed" || gh.SourceType != "github" || gh.TargetQueue != "inbox" ||
		!whsec.MatchString(gh.SigningSecret) || !rfc3339Re.MatchString(gh.CreatedAt) {
		t.Fatalf("create github: %+v", gh)
	}

	// A delivery signed with that secret to that URL: 202, verified, one todo for the owner.
	d := mustDeliver(t, gh, `{"action":"opened","repository":{"full_name":"acme/app"}}`)
	if !d.Verified || d.TrustMode != "signed" || d.Created != 1 || len(d.Todos) != 1 ||
		d.Todos[0].EndpointID != ep.ID || d.Queue != "inbox" || d.ID != d.Todos[0].ID {
		t.Fatalf("delivery: %s", d.Raw)
	}
	if ids := a.todoIDs(obj{}); !slices.Equal(ids, []string{d.ID}) {
		t.Fatalf("list_todos %v, want [%s]", ids, d.ID)
	}

	// generic: trust mode token and no secret, whatever is asked.
	gen := a.createWebhook("generic", "inbox")
	if gen.TrustMode != "token" || gen.SigningSecret != "" {
		t.Fatalf("create generic: %+v", gen)
	}

	// list: both webhooks, the ceiling with used, and no secret anywhere in what the agent gets.
	l, full := a.listWebhooks()
	mustContainNone(t, "list_webhooks", full, gh.SigningSecret, "whsec_", "signing_secret")
	if len(l.Webhooks) != 2 || l.Webhooks[0].IngestURL != gh.IngestURL || l.Webhooks[1].IngestURL != gen.IngestURL ||
		l.Webhooks[0].TrustMode != "signed" || l.Webhooks[1].TrustMode != "token" {
		t.Fatalf("list_webhooks: %s", full)
	}
	if l.Ceiling.Max != 2 || l.Ceiling.Used != 2 || !slices.Equal(l.Ceiling.AllowedSourceTypes, []string{"generic", "github"}) ||
		!slices.Equal(l.Ceiling.AllowedQueues, []string{"inbox"}) {
		t.Fatalf("ceiling: %+v", l.Ceiling)
	}
	// At the max.
	a.fail("ceiling_exceeded", "create_webhook", obj{"source_type": "github", "target_queue": "inbox"})

	// rotate: new URL and secret; the old URL is gone, the old secret no longer verifies.
	var rot webhook
	a.into("rotate_webhook", obj{"webhook_id": gh.WebhookID}, &rot)
	if rot.WebhookID != gh.WebhookID || rot.IngestURL == gh.IngestURL || !whsec.MatchString(rot.SigningSecret) ||
		rot.SigningSecret == gh.SigningSecret || rot.TrustMode != "signed" {
		t.Fatalf("rotate: %+v", rot)
	}
	body := []byte(`{"action":"closed"}`)
	if r := github(t, gh.IngestURL, gh.SigningSecret, "pull_request", body); r.Status != http.StatusNotFound {
		t.Fatalf("old URL after rotate: %d %s", r.Status, r.Raw)
	}
	if r := github(t, rot.IngestURL, gh.SigningSecret, "pull_request", body); r.Status != http.StatusUnauthorized {
		t.Fatalf("pre-rotation secret on the new URL: %d %s", r.Status, r.Raw)
	}
	if n := eventCount(t, gh.WebhookID); n != 1 {
		t.Fatalf("refused deliveries stored events: %d", n)
	}
	mustDeliver(t, rot, string(body))
	l, full = a.listWebhooks()
	mustContainNone(t, "list_webhooks after rotate", full, rot.SigningSecret, gh.SigningSecret, "whsec_")
	if l.Webhooks[0].IngestURL != rot.IngestURL || !rfc3339Re.MatchString(l.Webhooks[0].RotatedAt) {
		t.Fatalf("list after rotate: %s", full)
	}

	// delete: the URL answers 404 and the slot is free again.
	if out := a.call("delete_webhook", obj{"webhook_id": gh.WebhookID}); out["deleted"] != true || out["webhook_id"] != gh.WebhookID {
		t.Fatalf("delete: %v", out)
	}
	if r := github(t, rot.IngestURL, rot.SigningSecret, "pull_request", body); r.Status != http.StatusNotFound {
		t.Fatalf("deleted URL: %d %s", r.Status, r.Raw)
	}
	if l, _ = a.listWebhooks(); l.Ceiling.Used != 1 || len(l.Webhooks) != 1 || l.Webhooks[0].WebhookID != gen.WebhookID {
		t.Fatalf("list after delete: %+v", l)
	}
	// Rotating or deleting a deleted webhook finds nothing.
	a.fail("not_found", "rotate_webhook", obj{"webhook_id": gh.WebhookID})
	a.fail("not_found", "delete_webhook", obj{"webhook_id": gh.WebhookID})
	again := a.createWebhook("github", "inbox")
	mustDeliver(t, again, `{"zen":"again"}`)

	// A token webhook rotates its URL and still has no secret.
	var genRot webhook
	a.into("rotate_webhook", obj{"webhook_id": gen.WebhookID}, &genRot)
	if genRot.IngestURL == gen.IngestURL || genRot.SigningSecret != "" || genRot.TrustMode != "token" {
		t.Fatalf("rotate generic: %+v", genRot)
	}
	ping := http.Header{"Content-Type": {"application/json"}, "X-Delivery-Id": {"g-1"}}
	if r := post(t, gen.IngestURL, []byte(`{}`), ping); r.Status != http.StatusNotFound {
		t.Fatalf("old generic URL: %d", r.Status)
	}
	if r := post(t, genRot.IngestURL, []byte(`{}`), ping); r.Status != http.StatusAccepted || r.Verified || r.TrustMode != "token" {
		t.Fatalf("new generic URL: %d %s", r.Status, r.Raw)
	}

	// Neither a secret nor an ingest token ever reaches a log line.
	for _, w := range []webhook{gh, rot, gen, genRot, again} {
		tok := w.IngestURL[strings.LastIndex(w.IngestURL, "/")+1:]
		mustContainNone(t, "server log", logs.String(), w.SigningSecret, tok)
	}
}

func TestCreateWebhookRefusals(t *testing.T) {
	alice := human(t)
	ep := vend(t, alice, grant{queues: []string{"inbox", "ops"}, webhookMax: 1,
		sources: []string{"github"}, webhookQueues: []string{"inbox"}})
	a := connect(t, ep)
	cases := []struct {
		code string
		args obj
	}{
		{"forbidden_source_type", obj{"source_type": "stripe", "target_queue": "inbox"}},
		{"forbidden_source_type", obj{"source_type": "generic", "target_queue": "ops"}}, // type is checked first
		{"forbidden", obj{"source_type": "github", "target_queue": "ops"}},              // a granted queue, but not a webhook queue
		{"forbidden", obj{"source_type": "github", "target_queue": "elsewhere"}},
		{"invalid_argument", obj{"source_type": "github"}},
		{"invalid_argument", obj{"target_queue": "inbox"}},
		{"invalid_argument", obj{}},
		{"invalid_argument", obj{"source_type": "github", "target_queue": ""}},
		{"invalid_argument", obj{"source_type": "gitlab", "target_queue": "inbox"}},
		{"invalid_argument", obj{"source_type": "github", "target_queue": "inbox", "trust_mode": "token"}},
		{"invalid_argument", obj{"source_type": "generic", "target_queue": "inbox", "trust_mode": "signed"}},
		{"invalid_argument", obj{"source_type": "github", "target_queue": "inbox", "signing_secret": "whsec_mine"}},
	}
	for _, c := range cases {
		a.fail(c.code, "create_webhook", c.args)
	}
	if l, _ := a.listWebhooks(); l.Ceiling.Used != 0 || len(l.Webhooks) != 0 {
		t.Fatalf("refused creates made webhooks: %+v", l)
	}

	// Fill the one slot; then the order of the checks shows: type, queue, count.
	w := a.createWebhook("github", "inbox")
	if w.TrustMode != "signed" {
		t.Fatalf("trust mode %q", w.TrustMode)
	}
	a.fail("ceiling_exceeded", "create_webhook", obj{"source_type": "github", "target_queue": "inbox"})
	a.fail("forbidden_source_type", "create_webhook", obj{"source_type": "slack", "target_queue": "inbox"})
	a.fail("forbidden", "create_webhook", obj{"source_type": "github", "target_queue": "ops"})

	// The default ceiling (max 0) allows nothing.
	none := connect(t, vend(t, alice, grant{sources: []string{"github"}, webhookQueues: []string{"inbox"}}))
	none.fail("ceiling_exceeded", "create_webhook", obj{"source_type": "github", "target_queue": "inbox"})
	if n := count(t, `SELECT count(*) FROM switchboard.webhooks WHERE endpoint_id = $1`, ep.ID); n != 1 {
		t.Fatalf("%d webhooks, want 1", n)
	}
}

func TestConcurrentCreatesForTheLastSlot(t *testing.T) {
	ep := vend(t, human(t), grant{webhookMax: 3, sources: []string{"generic"}, webhookQueues: []string{"inbox"}})
	a := connect(t, ep)
	a.createWebhook("generic", "inbox")
	a.createWebhook("generic", "inbox")

	const n = 10
	agents := make([]*agent, n)
	for i := range agents {
		agents[i] = connect(t, ep) // ten sessions of one endpoint, like ten workers
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i, ag := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = ag.c.Call(ctxT(t), "create_webhook", obj{"source_type": "generic", "target_queue": "inbox"})
		}()
	}
	close(start)
	wg.Wait()
	ok, exceeded := 0, 0
	for _, err := range errs {
		switch agentclient.CodeOf(err) {
		case "":
			if err != nil {
				t.Fatal(err)
			}
			ok++
		case "ceiling_exceeded":
			exceeded++
		default:
			t.Fatalf("unexpected: %v", err)
		}
	}
	if ok != 1 || exceeded != n-1 {
		t.Fatalf("%d succeeded, %d ceiling_exceeded; want 1 and %d", ok, exceeded, n-1)
	}
	if l, _ := a.listWebhooks(); l.Ceiling.Used != 3 || len(l.Webhooks) != 3 {
		t.Fatalf("after the race: %+v", l.Ceiling)
	}
}

// With the default limits (10/min, burst 5) the sixth quick management call of an endpoint is
// refused, on any of its sessions, while other verbs and other endpoints go on.
func TestWebhookVerbsAreRateLimitedPerEndpoint(t *testing.T) {
	in := startTestServer(t) // server.DefaultConfig's limits
	alice := human(t)
	g := grant{webhookMax: 10, sources: []string{"generic"}, webhookQueues: []string{"inbox"}}
	ep, other := vend(t, alice, g), vend(t, alice, g)
	a := connectTo(t, in, ep)

	w1 := a.createWebhook("generic", "inbox")
	a.createWebhook("generic", "inbox")
	a.createWebhook("generic", "inbox")
	a.call("rotate_webhook", obj{"webhook_id": w1.WebhookID})
	a.call("delete_webhook", obj{"webhook_id": w1.WebhookID})
	te := a.fail("rate_limited", "create_webhook", obj{"source_type": "generic", "target_queue": "inbox"})
	if !strings.Contains(te.Message, "retry in") {
		t.Fatalf("rate_limited message should say when to retry: %q", te.Message)
	}
	// The bucket is the endpoint's, not the session's.
	second := connectTo(t, in, ep)
	second.fail("rate_limited", "rotate_webhook", obj{"webhook_id": w1.WebhookID})
	second.fail("rate_limited", "delete_webhook", obj{"webhook_id": w1.WebhookID})
	// Other verbs are not held back, and the refused calls changed nothing.
	if l, _ := second.listWebhooks(); l.Ceiling.Used != 2 {
		t.Fatalf("used %d, want 2", l.Ceiling.Used)
	}
	// Another endpoint (same human) has a full bucket of its own.
	b := connectTo(t, in, other)
	for range 5 {
		b.createWebhook("generic", "inbox")
	}
	b.fail("rate_limited", "create_webhook", obj{"source_type": "generic", "target_queue": "inbox"})
}

type eventRow struct {
	ID           int64             `json:"id"`
	WebhookID    string            `json:"webhook_id"`
	Source       string            `json:"source"`
	EventType    *string           `json:"event_type"`
	TrustMode    string            `json:"trust_mode"`
	Verified     bool              `json:"verified"`
	Disposition  string            `json:"disposition"`
	PayloadSize  int               `json:"payload_size"`
	ReceivedAt   string            `json:"received_at"`
	VerifyDetail string            `json:"verify_detail"`
	Headers      map[string]string `json:"headers"`
	Payload      any               `json:"payload"`
	Routing      obj               `json:"routing"`
}

func (a *agent) events(args obj) []eventRow {
	a.t.Helper()
	var out struct {
		Events []eventRow `json:"events"`
	}
	a.into("list_webhook_events", args, &out)
	return out.Events
}

func eventIDs(evs []eventRow) []int64 {
	ids := make([]int64, 0, len(evs))
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	return ids
}

// eventOf finds the event a delivery stored (by its todo).
func eventOf(t *testing.T, d delivery) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(ctxT(t), `SELECT event_id FROM switchboard.todos WHERE id = $1`, d.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestWebhookEventsAreTheHumansOwn(t *testing.T) {
	alice, bob := human(t), human(t)
	a := connect(t, hooker(t, alice))
	aliceOther := connect(t, hooker(t, alice)) // another agent of the same human
	b := connect(t, hooker(t, bob))

	w1 := a.createWebhook("github", "inbox")
	w2 := a.createWebhook("github", "inbox")
	wb := b.createWebhook("github", "inbox")

	body := `{"action":"opened","number":7,"repository":{"full_name":"acme/app"}}`
	req := http.Header{
		"Content-Type":        {"application/json"},
		"X-Github-Event":      {"pull_request"},
		"X-Github-Delivery":   {"ev-" + randHex(6)},
		"X-Hub-Signature-256": {githubSign(w1.SigningSecret, []byte(body))},
		"Authorization":       {"Bearer do-not-store-me"},
	}
	d1 := post(t, w1.IngestURL, []byte(body), req)
	if d1.Status != http.StatusAccepted {
		t.Fatalf("delivery: %d %s", d1.Status, d1.Raw)
	}
	d2 := mustDeliver(t, w2, `{"action":"closed"}`)
	d3 := mustDeliver(t, w2, `{"action":"reopened"}`)
	db := mustDeliver(t, wb, `{"action":"opened"}`)
	e1, e2, e3, eb := eventOf(t, d1), eventOf(t, d2), eventOf(t, d3), eventOf(t, db)

	// Every agent of alice sees alice's events, newest first, and never bob's.
	for _, ag := range []*agent{a, aliceOther} {
		if got := eventIDs(ag.events(obj{})); !slices.Equal(got, []int64{e3, e2, e1}) {
			t.Fatalf("list_webhook_events: %v, want %v", got, []int64{e3, e2, e1})
		}
	}
	if got := eventIDs(b.events(obj{})); !slices.Equal(got, []int64{eb}) {
		t.Fatalf("bob's events: %v", got)
	}
	// Filter and paging.
	if got := eventIDs(a.events(obj{"webhook_id": w1.WebhookID})); !slices.Equal(got, []int64{e1}) {
		t.Fatalf("filtered: %v", got)
	}
	if got := eventIDs(a.events(obj{"limit": 2})); !slices.Equal(got, []int64{e3, e2}) {
		t.Fatalf("limit 2: %v", got)
	}
	if got := eventIDs(a.events(obj{"limit": 2, "before_id": e2})); !slices.Equal(got, []int64{e1}) {
		t.Fatalf("before_id: %v", got)
	}
	row := a.events(obj{"webhook_id": w1.WebhookID})[0]
	if row.WebhookID != w1.WebhookID || row.Source != "github" || row.EventType == nil || *row.EventType != "pull_request" ||
		row.TrustMode != "signed" || !row.Verified || row.Disposition != "delivered" || row.PayloadSize != len(body) ||
		!rfc3339Re.MatchString(row.ReceivedAt) || row.Headers != nil || row.Payload != nil {
		t.Fatalf("event row: %+v", row)
	}

	// get: sanitized headers, the payload, the routing trace.
	var ev eventRow
	full := a.raw("get_webhook_event", obj{"id": e1})
	a.into("get_webhook_event", obj{"id": e1}, &ev)
	if ev.ID != e1 || ev.Headers["x-hub-signature-256"] != "[redacted]" || ev.Headers["authorization"] != "[redacted]" ||
		ev.Headers["x-github-event"] != "pull_request" || ev.Headers["content-type"] != "application/json" {
		t.Fatalf("headers: %v", ev.Headers)
	}
	mustContainNone(t, "get_webhook_event", full, "do-not-store-me", w1.SigningSecret, req.Get("X-Hub-Signature-256"))
	if jsonString(ev.Payload) != `{"action":"opened","number":7,"repository":{"full_name":"acme/app"}}` {
		t.Fatalf("payload: %s", jsonString(ev.Payload))
	}
	if ev.Routing["stage"] != "default" || jsonString(ev.Routing["action"]) != `{"queue":"inbox"}` {
		t.Fatalf("routing: %v", ev.Routing)
	}
	if !strings.Contains(ev.VerifyDetail, "hmac-sha256") {
		t.Fatalf("verify_detail %q", ev.VerifyDetail)
	}
	aliceOther.call("get_webhook_event", obj{"id": e1})

	// Bob's event is not found for alice, exactly like an id that does not exist.
	foreign := a.raw("get_webhook_event", obj{"id": eb})
	if unknown := a.raw("get_webhook_event", obj{"id": eb + 1_000_000}); foreign != unknown ||
		!strings.Contains(foreign, `"isError":true`) || !strings.Contains(foreign, "not_found: ") {
		t.Fatalf("foreign event %s, unknown event %s", foreign, unknown)
	}
	a.fail("not_found", "list_webhook_events", obj{"webhook_id": wb.WebhookID})
	b.fail("not_found", "get_webhook_event", obj{"id": e1})
	a.fail("invalid_argument", "get_webhook_event", obj{"id": "1"})
	a.fail("invalid_argument", "get_webhook_event", obj{})
}
