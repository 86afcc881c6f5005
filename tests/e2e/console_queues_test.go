package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"switchboard/server/store"
)

// The console's queue and webhook screens over HTTP, signed in with a session made in SQL (the
// passkey ceremony is the browser tests'): another human's todo and webhook ids are the same
// not-found page as unknown and malformed ids, byte for byte; forms refuse bad input inline and
// write nothing; the secret field never comes back.

// consoleSession signs the human in (signIn) and returns a requester of console pages as them
// (page: same-origin, redirects not followed) answering status, body and Location.
func (e *env) consoleSession(human string) func(method, path string, form url.Values) (int, string, string) {
	e.t.Helper()
	var id string
	if err := e.pool.QueryRow(context.Background(), `SELECT id FROM switchboard.humans WHERE name = $1`, human).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	session := e.signIn(id)
	return func(method, path string, form url.Values) (int, string, string) {
		resp, body := page(e.t, method, e.base+path, session, form, nil)
		return resp.StatusCode, body, resp.Header.Get("Location")
	}
}

func TestConsoleQueuesNotFoundIsOnePage(t *testing.T) {
	e := newEnv(t)
	aep := e.vend("alice", []string{"inbox"}, nil)
	e.vend("bob", []string{"inbox"}, nil)
	todo := e.push(aep, "inbox", "alice's secret plans")
	var hook string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO switchboard.webhooks
		(endpoint_id, source_type, trust_mode, target_queue, ingest_token, signing_secret)
		VALUES ($1, 'stripe', 'signed', 'inbox', 'tok_0123456789abcdef0123456789abcdef', 'whsec_minted') RETURNING id`, aep.ID).Scan(&hook); err != nil {
		t.Fatal(err)
	}
	var event string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO switchboard.webhook_events
		(webhook_id, source, trust_mode, verified, verify_detail, payload_size, payload, delivery_key, disposition)
		VALUES ($1, 'stripe', 'signed', true, 'ok', 2, '{}', 'evt_1', 'delivered') RETURNING id::text`, hook).Scan(&event); err != nil {
		t.Fatal(err)
	}
	alice, bob := e.consoleSession("alice"), e.consoleSession("bob")

	if st, body, _ := alice("GET", "/console/todos/"+todo, nil); st != 200 || !strings.Contains(body, "alice&#39;s secret plans") {
		t.Fatalf("alice's own todo: %d %s", st, body)
	}
	unknown, malformed := "00000000-0000-4000-8000-000000000000", "not-a-uuid"
	for _, paths := range [][]string{
		{"/console/todos/" + todo, "/console/todos/" + unknown, "/console/todos/" + malformed},
		{"/console/webhooks/" + hook, "/console/webhooks/" + unknown, "/console/webhooks/" + malformed},
		{"/console/webhooks/" + hook + "/deliveries/" + event, "/console/webhooks/" + unknown + "/deliveries/" + event,
			"/console/webhooks/" + hook + "/deliveries/x"},
	} {
		var first string
		for _, p := range paths {
			st, body, _ := bob("GET", p, nil)
			if st != http.StatusNotFound {
				t.Fatalf("bob GET %s: %d", p, st)
			}
			if first == "" {
				first = body
			} else if body != first {
				t.Fatalf("bob GET %s differs from %s:\n%s\n---\n%s", p, paths[0], body, first)
			}
		}
	}
	// Writes too: bob's cancel and set-secret on alice's ids are the not-found page, nothing changes.
	_, nf, _ := bob("GET", "/console/todos/"+unknown, nil)
	for _, p := range []string{"/console/todos/" + todo + "/cancel", "/console/todos/" + unknown + "/cancel"} {
		if st, body, _ := bob("POST", p, url.Values{}); st != http.StatusNotFound || body != nf {
			t.Fatalf("bob POST %s: %d", p, st)
		}
	}
	if st, body, _ := bob("POST", "/console/webhooks/"+hook+"/secret",
		url.Values{"secret": {"whsec_oZ8nus9PHnoltEtWZ3pGITZdeHWHoqnL"}}); st != http.StatusNotFound || body != nf {
		t.Fatalf("bob sets alice's secret: %d", st)
	}
	if e.state(todo) != "pending" {
		t.Fatal("bob's cancel changed alice's todo")
	}
	// Bob's lists hold nothing of alice's.
	for _, p := range []string{"/console/queues", "/console/webhooks", "/console/deadletters"} {
		if st, body, _ := bob("GET", p, nil); st != 200 || strings.Contains(body, todo) || strings.Contains(body, hook) {
			t.Fatalf("bob's %s: %d", p, st)
		}
	}
}

func TestConsoleQueuesForms(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("alice", []string{"inbox"}, nil)
	alice := e.consoleSession("alice")
	count := func() (n int) {
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM switchboard.todos`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return
	}

	// Push: bad JSON and a blank title are refused inline, nothing written; then a good push.
	target := ep.ID + "/inbox"
	st, body, _ := alice("POST", "/console/queues/push", url.Values{"target": {target}, "title": {"x"}, "payload": {"{nope"}})
	if st != http.StatusBadRequest || !strings.Contains(body, "not valid JSON") || !strings.Contains(body, "{nope") || count() != 0 {
		t.Fatalf("bad payload: %d %d todos", st, count())
	}
	if st, body, _ = alice("POST", "/console/queues/push", url.Values{"target": {target}, "title": {" "}}); st != http.StatusBadRequest ||
		!strings.Contains(body, "Title must be 1 to 500 characters") || count() != 0 {
		t.Fatalf("blank title: %d %s", st, body)
	}
	st, _, loc := alice("POST", "/console/queues/push", url.Values{"target": {target}, "title": {"from the form"}, "payload": {`{"a": 1}`}})
	if st != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/todos/") || count() != 1 {
		t.Fatalf("push: %d %s", st, loc)
	}

	// Dead letters: three, redriven all at once; the count is shown first and nothing changes
	// until the confirmation.
	var dead []string
	for range 3 {
		id := e.push(ep, "inbox", "doomed")
		e.exec(`UPDATE switchboard.todos SET state = 'failed', owner = 'agent:x', attempt = 1, max_attempts = 1,
			completed_at = now(), result = '{"error": "boom"}' WHERE id = $1`, id)
		dead = append(dead, id)
	}
	st, body, _ = alice("POST", "/console/todos/bulk", url.Values{"do": {"redrive:filter"}, "view": {"dead"}, "queue": {"inbox"}})
	if st != 200 || !strings.Contains(body, "Redrive 3 todo(s)?") || e.state(dead[0]) != "failed" {
		t.Fatalf("redrive count: %d %s", st, body)
	}
	st, _, loc = alice("POST", "/console/todos/bulk", url.Values{"do": {"redrive:filter"}, "view": {"dead"}, "queue": {"inbox"}, "confirm": {"yes"}})
	if st != http.StatusSeeOther || !strings.Contains(loc, "n=3") || e.state(dead[2]) != "pending" {
		t.Fatalf("redrive: %d %s", st, loc)
	}
	// Nothing selected: an inline message.
	if st, body, _ = alice("POST", "/console/todos/bulk", url.Values{"do": {"cancel:selected"}}); st != http.StatusBadRequest ||
		!strings.Contains(body, "Select at least one todo") {
		t.Fatalf("empty selection: %d", st)
	}
	// Audited, as alice.
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM switchboard.console_audit a JOIN switchboard.humans h ON h.id = a.human_id
		WHERE h.name = 'alice' AND a.action IN ('todo.push', 'todos.redrive')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("audit rows %d %v", n, err)
	}

	// The provider's secret: a malformed one is refused with the expected shape, and neither
	// answer holds what was typed.
	var hook string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO switchboard.webhooks
		(endpoint_id, source_type, trust_mode, target_queue, ingest_token, signing_secret)
		VALUES ($1, 'stripe', 'signed', 'inbox', 'tok_0123456789abcdef0123456789abcdef', 'whsec_minted') RETURNING id`, ep.ID).Scan(&hook); err != nil {
		t.Fatal(err)
	}
	bad := "sk_live_typo_not_a_secret"
	st, body, _ = alice("POST", "/console/webhooks/"+hook+"/secret", url.Values{"secret": {bad}, "previous_ttl": {"1h"}})
	if st != http.StatusBadRequest || !strings.Contains(body, "Not a Stripe signing secret") || strings.Contains(body, bad) {
		t.Fatalf("bad secret: %d", st)
	}
	good := "whsec_oZ8nus9PHnoltEtWZ3pGITZdeHWHoqnL"
	st, _, loc = alice("POST", "/console/webhooks/"+hook+"/secret", url.Values{"secret": {good}, "previous_ttl": {"1h"}})
	if st != http.StatusSeeOther {
		t.Fatalf("set secret: %d", st)
	}
	st, body, _ = alice("GET", loc, nil)
	if st != 200 || !strings.Contains(body, "The new secret is in force") || strings.Contains(body, good) || strings.Contains(body, "whsec_minted") {
		t.Fatalf("after set-secret: %d", st)
	}
	var secret string
	if err := e.pool.QueryRow(context.Background(), `SELECT signing_secret FROM switchboard.webhooks WHERE id = $1`, hook).Scan(&secret); err != nil || secret != good {
		t.Fatalf("stored secret %q %v", secret, err)
	}
	// Home draws the chart.
	if st, body, _ = alice("GET", "/console/", nil); st != 200 || !bytes.Contains([]byte(body), []byte(`<svg`)) ||
		!strings.Contains(body, "Todos per minute, last hour") {
		t.Fatalf("home: %d", st)
	}
}

// TestConsoleQueuesBrowser runs tests/ts/console-queues.test.mjs: alice signs in with a passkey,
// sets her Stripe webhook's secret in the form (a delivery signed with it is accepted, one
// signed with the minted secret refused and counted on the screen), and redrives a todo that
// failed into the dead letters from the dead-letter view. Screenshots (queues-*.png) go where
// TestConsoleBrowser's do.
func TestConsoleQueuesBrowser(t *testing.T) {
	e, base := consoleEnv(t)
	e.addHuman("alice", false)
	invite := e.invite("alice", time.Hour)
	ep := e.vend("alice", []string{"inbox"}, nil)
	e.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{stripe}', webhook_queues = '{inbox}' WHERE id = $1`, ep.ID)
	e.exec(`UPDATE switchboard.settings SET value = 1 WHERE key = 'max_attempts'`) // one failure dead-letters
	minted, token := "whsec_"+randomHex(32), randomHex(24)
	var doc []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT switchboard.webhook_create($1, 'stripe', 'inbox', $2, $3)`,
		ep.ID, token, minted).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	var hook struct {
		ID string `json:"webhook_id"`
	}
	if err := json.Unmarshal(doc, &hook); err != nil {
		t.Fatal(err)
	}
	pushes := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		if err := e.pool.QueryRow(r.Context(), `SELECT todo_id FROM switchboard.create_todo($1, 'inbox', $2)`,
			ep.ID, r.FormValue("title")).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"todo_id": id})
	}))
	t.Cleanup(pushes.Close)
	// The chart's rollup, run when the browser is about to look at Home (this server's
	// maintenance loop is off).
	rollup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := store.New(e.pool).ConsoleRollup(r.Context(), time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))
	t.Cleanup(rollup.Close)
	runConsoleBrowser(t, "console-queues.test.mjs",
		"SB_BASE="+base, "SB_INVITE="+base+"/console/invite/"+invite,
		"SB_MCP_URL="+e.url(ep), "SB_CRED="+ep.Cred, "SB_WEBHOOK="+hook.ID,
		"SB_INGEST_URL="+e.base+"/webhooks/w/"+token, "SB_MINTED="+minted, "SB_PUSH_URL="+pushes.URL, "SB_ROLLUP_URL="+rollup.URL)

	// What the browser did is in the database: the provider's secret in force, one refusal, and
	// the actions in alice's audit log.
	var source string
	var badSignature int
	if err := e.pool.QueryRow(context.Background(), `SELECT w.secret_source, r.bad_signature FROM switchboard.webhooks w
		JOIN switchboard.webhook_refusals r ON r.webhook_id = w.id WHERE w.id = $1`, hook.ID).Scan(&source, &badSignature); err != nil ||
		source != "provider" || badSignature != 1 {
		t.Fatalf("webhook after the browser: %q %d %v", source, badSignature, err)
	}
	var actions []string
	if err := e.pool.QueryRow(context.Background(), `SELECT array_agg(action ORDER BY id) FROM switchboard.console_audit
		WHERE action IN ('webhook.set_secret', 'todos.redrive')`).Scan(&actions); err != nil ||
		strings.Join(actions, ",") != "webhook.set_secret,todos.redrive" {
		t.Fatalf("audit: %v %v", actions, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
