package e2e

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"switchboard/server"
)

func allowPrivateCallbacks(c *server.Config) { c.EventsAllowPrivateCallbacks = true }

// eventsCall sends one 2026-07-28 events/* request and returns its result or error object.
func eventsCall(t *testing.T, url, cred, method string, params map[string]any) (result, rpcErr map[string]any) {
	t.Helper()
	_, out := modernPost(t, url, cred, method, "", params)
	r, _ := out["result"].(map[string]any)
	e, _ := out["error"].(map[string]any)
	if r == nil && e == nil {
		t.Fatalf("%s: no result and no error: %v", method, out)
	}
	return r, e
}

func errCode(e map[string]any) int {
	if e == nil {
		return 0
	}
	f, _ := e["code"].(float64)
	return int(f)
}

// Discover declares the extension; events/list follows the allowlist; a poll from a null
// cursor starts at now and a pushed todo arrives on the next poll; a 2025 session gets -32601.
func TestEventsModernPoll(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ev", []string{"inbox"}, nil)
	url := e.url(ep)

	_, disc := modernPost(t, url, ep.Cred, "server/discover", "", nil)
	caps, _ := disc["result"].(map[string]any)["capabilities"].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	if _, ok := ext["io.modelcontextprotocol/events"]; !ok || caps["events"] == nil {
		t.Fatalf("discover capabilities: %v", caps)
	}
	list, lerr := eventsCall(t, url, ep.Cred, "events/list", nil)
	if lerr != nil || len(list["events"].([]any)) != 2 || list["resultType"] != "complete" {
		t.Fatalf("events/list: %v %v", list, lerr)
	}

	start, perr := eventsCall(t, url, ep.Cred, "events/poll", map[string]any{"name": "todo.claimable", "arguments": map[string]any{}, "cursor": nil})
	if perr != nil || start["cursor"] == nil {
		t.Fatalf("poll null: %v %v", start, perr)
	}
	id := e.push(ep, "inbox", "polled")
	var got map[string]any
	eventually(t, soon, "the pushed todo in a poll", func() bool {
		got, perr = eventsCall(t, url, ep.Cred, "events/poll", map[string]any{"name": "todo.claimable", "cursor": start["cursor"]})
		return perr == nil && len(got["events"].([]any)) == 1
	})
	ev := got["events"].([]any)[0].(map[string]any)
	if ev["data"].(map[string]any)["todo"].(map[string]any)["id"] != id || !strings.HasPrefix(ev["eventId"].(string), "todo_") {
		t.Fatalf("event: %v", ev)
	}

	// Refusals: a malformed cursor, a queue outside the grant, an unknown type.
	for _, c := range []struct {
		params map[string]any
		code   int
	}{
		{map[string]any{"name": "todo.claimable", "cursor": "garbage"}, -32602},
		{map[string]any{"name": "todo.claimable", "arguments": map[string]any{"queue": "nope"}, "cursor": nil}, -32024},
		{map[string]any{"name": "no.such", "cursor": nil}, -32023},
	} {
		if _, er := eventsCall(t, url, ep.Cred, "events/poll", c.params); errCode(er) != c.code {
			t.Errorf("poll %v: %v, want %d", c.params, er, c.code)
		}
	}

	// Without list_todos: not offered, and refused.
	narrow := e.vend("ev", []string{"inbox"}, []string{"claim_next", "complete"})
	if l, _ := eventsCall(t, e.url(narrow), narrow.Cred, "events/list", nil); len(l["events"].([]any)) != 0 {
		t.Fatalf("events/list without list_todos: %v", l)
	}
	if _, er := eventsCall(t, e.url(narrow), narrow.Cred, "events/poll", map[string]any{"name": "todo.claimable", "cursor": nil}); errCode(er) != -32024 {
		t.Fatalf("poll without list_todos: %v", er)
	}

	// A 2025 session: -32601, and initialize does not declare the extension.
	init := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	resp := rawRequest(t, http.MethodPost, url, ep.Cred, init, map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	body, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(body), "io.modelcontextprotocol/events") {
		t.Fatalf("2025 initialize declares events: %s", body)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"}
	rawRequest(t, http.MethodPost, url, ep.Cred, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), hdr)
	resp = rawRequest(t, http.MethodPost, url, ep.Cred, []byte(`{"jsonrpc":"2.0","id":2,"method":"events/list","params":{}}`), hdr)
	body, _ = io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "-32601") {
		t.Fatalf("events/list on 2025: %s", body)
	}
}

// receiver is a Standard Webhooks receiver on loopback: it verifies signatures, echoes the
// challenge, records event bodies, and can answer 503 for a while.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret []byte
	mu     sync.Mutex
	events []map[string]any
	ids    []string
	hits   atomic.Int32
	bad    atomic.Int32 // signature failures
	failed atomic.Int32 // event POSTs answered 503
	// down: answer 503 to event POSTs for this long after the first one (guarded by mu)
	down       time.Duration
	firstEvent time.Time
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, secret: []byte("0123456789abcdef0123456789abcdef")}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) whsec() string { return "whsec_" + base64.StdEncoding.EncodeToString(r.secret) }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.hits.Add(1)
	body, _ := io.ReadAll(req.Body)
	id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
	m := hmac.New(sha256.New, r.secret)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	sec, _ := strconv.ParseInt(ts, 10, 64)
	if !strings.Contains(" "+req.Header.Get("webhook-signature")+" ", " "+want+" ") || time.Since(time.Unix(sec, 0)) > 5*time.Minute ||
		!strings.HasPrefix(req.Header.Get("X-MCP-Subscription-Id"), "sub_") {
		r.bad.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var v map[string]any
	_ = json.Unmarshal(body, &v)
	if v["type"] == "verification" {
		_ = json.NewEncoder(w).Encode(map[string]any{"challenge": v["challenge"]})
		return
	}
	r.mu.Lock()
	if r.down > 0 && r.firstEvent.IsZero() {
		r.firstEvent = time.Now()
	}
	failing := r.down > 0 && time.Since(r.firstEvent) < r.down
	r.mu.Unlock()
	if failing {
		r.failed.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.mu.Lock()
	r.events = append(r.events, v)
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) received() ([]map[string]any, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.events...), append([]string(nil), r.ids...)
}

// Webhook delivery end to end on two replicas: verification, a signed event per todo, a
// receiver down (503) for 5 s still gets every event (retried), and no event is sent twice
// (the outbox is drained with SKIP LOCKED).
func TestEventsWebhookDelivery(t *testing.T) {
	e := newEnv(t, allowPrivateCallbacks)
	e.startServer(allowPrivateCallbacks) // a second replica drains the same outbox
	ep := e.vend("hook", []string{"inbox"}, nil)
	rc := newReceiver(t)
	params := map[string]any{"name": "todo.claimable", "arguments": map[string]any{},
		"delivery": map[string]any{"mode": "webhook", "url": rc.srv.URL + "/hook", "secret": rc.whsec()}, "cursor": nil}
	sub, serr := eventsCall(t, e.url(ep), ep.Cred, "events/subscribe", params)
	if serr != nil || !strings.HasPrefix(sub["id"].(string), "sub_") || sub["refreshBefore"] == nil {
		t.Fatalf("subscribe: %v %v", sub, serr)
	}
	if rc.hits.Load() != 1 {
		t.Fatalf("verification POSTs: %d, want 1", rc.hits.Load())
	}
	// A refresh does not verify again and says how delivery goes.
	again, _ := eventsCall(t, e.url(ep), ep.Cred, "events/subscribe", params)
	if again["id"] != sub["id"] || again["deliveryStatus"] == nil || rc.hits.Load() != 1 {
		t.Fatalf("refresh: %v (hits %d)", again, rc.hits.Load())
	}

	rc.mu.Lock()
	rc.down = 5 * time.Second // the receiver is down for 5 s: retried with backoff (1 s, 5 s)
	rc.mu.Unlock()
	var ids []string
	for i := range 5 {
		ids = append(ids, e.push(ep, "inbox", "t"+strconv.Itoa(i)))
	}
	eventually(t, 3*soon, "five events", func() bool { ev, _ := rc.received(); return len(ev) >= 5 })
	time.Sleep(2 * time.Second) // anything sent twice would arrive by now
	evs, hdrIDs := rc.received()
	seen := map[string]bool{}
	for i, ev := range evs {
		if seen[ev["eventId"].(string)] {
			t.Errorf("event %s delivered twice", ev["eventId"])
		}
		seen[ev["eventId"].(string)] = true
		if hdrIDs[i] != ev["eventId"] || ev["name"] != "todo.claimable" || ev["cursor"] == nil {
			t.Errorf("event %d: %v (webhook-id %s)", i, ev, hdrIDs[i])
		}
	}
	if len(evs) != 5 || rc.bad.Load() != 0 || rc.failed.Load() == 0 {
		t.Fatalf("received %d events, %d bad signatures, %d answered 503", len(evs), rc.bad.Load(), rc.failed.Load())
	}
	for _, id := range ids {
		if !seen["todo_"+id+"_0"] {
			t.Errorf("todo %s: no event", id)
		}
	}

	// Unsubscribe stops delivery.
	if _, uerr := eventsCall(t, e.url(ep), ep.Cred, "events/unsubscribe", map[string]any{"name": "todo.claimable", "arguments": map[string]any{},
		"delivery": map[string]any{"url": rc.srv.URL + "/hook"}}); uerr != nil {
		t.Fatalf("unsubscribe: %v", uerr)
	}
}

// Callbacks that are not globally routable are refused without the private setting, before any
// request is sent; so are a redirect to one, a plain-http URL and a secret that is not whsec_.
func TestEventsCallbackRefusals(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ssrf", []string{"inbox"}, nil)
	var hits atomic.Int32
	local := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer local.Close()
	secret := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	sub := func(url, secret string) map[string]any {
		_, er := eventsCall(t, e.url(ep), ep.Cred, "events/subscribe", map[string]any{"name": "todo.claimable",
			"delivery": map[string]any{"mode": "webhook", "url": url, "secret": secret}})
		return er
	}
	for _, u := range []string{"https://127.0.0.1/h", "https://10.0.0.1/h", "https://169.254.169.254/latest", "https://[::1]/h",
		"http://example.com/h", local.URL} {
		if er := sub(u, secret); errCode(er) != -32602 {
			t.Errorf("%s: %v, want -32602", u, er)
		}
	}
	// A public-looking name that resolves to loopback is refused on the dialled connection.
	if er := sub(strings.Replace(strings.Replace(local.URL, "http://", "https://", 1), "127.0.0.1", "localhost", 1), secret); errCode(er) != -32027 {
		t.Errorf("localhost by name: %v, want -32027", er)
	}
	if er := sub("https://example.com/h", "plain-secret"); errCode(er) != -32602 {
		t.Errorf("non-whsec secret: %v", er)
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached the loopback receiver", hits.Load())
	}
}

// TestAISDKEvents runs tests/ts/events.test.mjs: @ai-sdk/mcp 2.0.99's own MCP Events client and
// webhook handler against a server that allows loopback callbacks.
func TestAISDKEvents(t *testing.T) {
	e := newEnv(t, allowPrivateCallbacks)
	ep := e.vend("aisdk", []string{"inbox"}, nil)
	e.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{github}', webhook_queues = '{inbox}' WHERE id = $1`, ep.ID)
	token := "tok_" + strings.Repeat(ep.ID[:8], 5)
	secret := "ghsecret-" + ep.ID
	e.exec(`SELECT switchboard.webhook_create($1, 'github', 'inbox', $2, $3)`, ep.ID, token, secret)
	runNode(t, 90*time.Second, []string{
		"SB_MCP_URL=" + e.url(ep), "SB_CREDENTIAL=" + ep.Cred, "SB_PUSH_URL=" + e.pushHook(t, ep),
		"SB_GITHUB_URL=" + e.base + "/webhooks/w/" + token, "SB_GITHUB_SECRET=" + secret,
	}, "--test", "--test-reporter=spec", "events.test.mjs")
}

// A sender that took an outbox row and died (kill -9 between taking and POSTing: the row stays
// leased, nothing reports) does not lose the event: when the lease runs out, a running server
// sends it, with the same webhook-id. The dead sender is played by SQL taking the row with a
// 1 s lease; the servers use 30 s.
func TestEventsOutboxSurvivesDeadSender(t *testing.T) {
	e := newEnv(t, allowPrivateCallbacks)
	ep := e.vend("dead", []string{"inbox"}, nil)
	rc := newReceiver(t)
	params := map[string]any{"name": "todo.claimable",
		"delivery": map[string]any{"mode": "webhook", "url": rc.srv.URL + "/hook", "secret": rc.whsec()}}
	if _, serr := eventsCall(t, e.url(ep), ep.Cred, "events/subscribe", params); serr != nil {
		t.Fatal(serr)
	}
	e.instance.stop() // no server drains while the "dead" sender takes the row
	id := e.push(ep, "inbox", "orphaned")
	// Record, fan out and take until the row is there: a transaction in flight anywhere in the
	// cluster (another test's database) holds the fan-out's bound back for a moment.
	var msg string
	eventually(t, soon, "the outbox row", func() bool {
		e.exec(`SELECT switchboard.events_record()`)
		e.exec(`SELECT switchboard.events_fanout()`)
		return e.pool.QueryRow(ctxT(t), `SELECT message_id FROM switchboard.events_outbox_take(10, 1)`).Scan(&msg) == nil
	})
	e.startServer(allowPrivateCallbacks) // another replica, or the same after its restart
	eventually(t, soon, "the orphaned event", func() bool { ev, _ := rc.received(); return len(ev) == 1 })
	evs, ids := rc.received()
	if ids[0] != msg || evs[0]["eventId"] != "todo_"+id+"_0" {
		t.Fatalf("got %v (webhook-id %s), want %s", evs[0]["eventId"], ids[0], msg)
	}
}

// terminations records the control envelopes of type terminated that reach rc, with their path.
func terminations(rc *receiver) func() []map[string]any {
	var mu sync.Mutex
	var bodies []map[string]any
	inner := rc.srv.Config.Handler
	rc.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var v map[string]any
		_ = json.Unmarshal(body, &v)
		if v["type"] == "terminated" {
			v["path"] = r.URL.Path
			mu.Lock()
			bodies = append(bodies, v)
			mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		inner.ServeHTTP(w, r)
	})
	return func() []map[string]any { mu.Lock(); defer mu.Unlock(); return append([]map[string]any(nil), bodies...) }
}

// Revoking the endpoint ends its webhook subscriptions with a signed terminated envelope.
func TestEventsTerminatedOnRevoke(t *testing.T) {
	e := newEnv(t, allowPrivateCallbacks)
	ep := e.vend("term", []string{"inbox"}, nil)
	rc := newReceiver(t)
	bodies := terminations(rc)
	if _, serr := eventsCall(t, e.url(ep), ep.Cred, "events/subscribe", map[string]any{"name": "todo.claimable",
		"delivery": map[string]any{"mode": "webhook", "url": rc.srv.URL + "/hook", "secret": rc.whsec()}}); serr != nil {
		t.Fatal(serr)
	}
	e.exec(`SELECT switchboard.endpoint_revoke($1)`, ep.ID)
	eventually(t, soon, "a terminated envelope", func() bool { return len(bodies()) == 1 })
	if b := bodies()[0]; rc.bad.Load() != 0 || b["error"].(map[string]any)["code"].(float64) != -32024 {
		t.Fatalf("terminated: %v (bad signatures %d)", b, rc.bad.Load())
	}
}

// Revoking an OAuth grant ends the subscriptions made with its access token (signed terminated
// envelope); one made with the endpoint's sbk_ credential carries on.
func TestEventsTerminatedOnGrantRevoke(t *testing.T) {
	e := newEnv(t, allowPrivateCallbacks)
	ep := e.vend("grant", []string{"inbox"}, nil)
	tr := e.tokens(newOAuthClient(t, e.base), ep)
	rc := newReceiver(t)
	bodies := terminations(rc)
	for cred, path := range map[string]string{tr.AccessToken: "/oauth", ep.Cred: "/sbk"} {
		if _, serr := eventsCall(t, e.url(ep), cred, "events/subscribe", map[string]any{"name": "todo.claimable",
			"delivery": map[string]any{"mode": "webhook", "url": rc.srv.URL + path, "secret": rc.whsec()}}); serr != nil {
			t.Fatalf("subscribe %s: %v", path, serr)
		}
	}
	var grant string
	if err := e.pool.QueryRow(ctxT(t), `SELECT id FROM switchboard.oauth_grants WHERE endpoint_id = $1`, ep.ID).Scan(&grant); err != nil {
		t.Fatal(err)
	}
	e.exec(`SELECT switchboard.oauth_grant_revoke($1)`, grant)
	eventually(t, soon, "a terminated envelope", func() bool { return len(bodies()) == 1 })
	b := bodies()[0]
	if rc.bad.Load() != 0 || b["path"] != "/oauth" || b["error"].(map[string]any)["code"].(float64) != -32024 ||
		b["error"].(map[string]any)["data"].(map[string]any)["reason"] != "OAuth grant revoked" {
		t.Fatalf("terminated: %v (bad signatures %d)", b, rc.bad.Load())
	}
	var left []string
	if err := e.pool.QueryRow(ctxT(t), `SELECT array_agg(url) FROM switchboard.event_hooks WHERE endpoint_id = $1`, ep.ID).Scan(&left); err != nil ||
		len(left) != 1 || !strings.HasSuffix(left[0], "/sbk") {
		t.Fatalf("subscriptions left: %v %v", left, err)
	}
	// A refresh with the revoked token is refused at the door.
	if s := e.mcpStatus(ep, tr.AccessToken); s != 401 {
		t.Fatalf("revoked token: %d", s)
	}
}

// openEventStream opens a 2026-07-28 events/stream and returns its SSE reader after the
// notifications/events/active confirmation.
func openEventStream(t *testing.T, url, cred string, params map[string]any) (*http.Response, *bufio.Reader, map[string]any) {
	t.Helper()
	params["_meta"] = modernMeta(nil)
	req := modernRequest(url, cred, "events/stream", map[string]any{"jsonrpc": "2.0", "id": "stream-1", "method": "events/stream", "params": params})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp, nil, out
	}
	rd := bufio.NewReader(resp.Body)
	first := nextEvent(t, rd, soon)
	return resp, rd, first
}

// Push: an events/stream opened on one replica receives a delivery that reached the other
// replica's receiver; a refused subscription is an error and no stream; revoking the endpoint
// ends the stream.
func TestEventsStreamAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	other := e.startServer()
	ep := e.vend("push", []string{"inbox"}, nil)
	e.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{generic}', webhook_queues = '{inbox}' WHERE id = $1`, ep.ID)
	token := "tok_" + strings.Repeat(ep.ID[:8], 5)
	e.exec(`SELECT switchboard.webhook_create($1, 'generic', 'inbox', $2, NULL)`, ep.ID, token)

	_, _, refused := openEventStream(t, e.url(ep), ep.Cred, map[string]any{"name": "todo.claimable", "arguments": map[string]any{"queue": "nope"}})
	if er, _ := refused["error"].(map[string]any); errCode(er) != -32024 {
		t.Fatalf("refused stream: %v", refused)
	}

	resp, rd, active := openEventStream(t, e.url(ep), ep.Cred, map[string]any{"name": "webhook.delivery", "cursor": nil})
	params, _ := active["params"].(map[string]any)
	if active["method"] != "notifications/events/active" || params["cursor"] == nil ||
		params["_meta"].(map[string]any)["io.modelcontextprotocol/subscriptionId"] != "stream-1" {
		t.Fatalf("first stream message: %v", active)
	}
	hook := rawRequest(t, http.MethodPost, other.base+"/webhooks/w/"+token, "", []byte(`{"hello":"push"}`),
		map[string]string{"Content-Type": "application/json", "X-Delivery-Id": "d-1"})
	if hook.StatusCode/100 != 2 {
		t.Fatalf("delivery to the other replica: %d", hook.StatusCode)
	}
	ev := nextEvent(t, rd, soon)
	p, _ := ev["params"].(map[string]any)
	data, _ := p["data"].(map[string]any)
	if ev["method"] != "notifications/events/event" || p["name"] != "webhook.delivery" || !strings.HasSuffix(fmt.Sprint(data["delivery_id"]), "d-1") || p["cursor"] == nil {
		t.Fatalf("pushed event: %v", ev)
	}
	end := streamEnd(resp.Body)
	e.exec(`SELECT switchboard.endpoint_revoke($1)`, ep.ID)
	select {
	case <-end:
	case <-time.After(soon):
		t.Fatal("the stream outlived the endpoint's revocation")
	}
}

// A push stream that the server ends because the credential was rotated or the endpoint
// revoked says so with notifications/events/terminated (Forbidden, the subscription's id),
// then the final result, then closes.
func TestEventsStreamTerminated(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ name, sql string }{
		{"rotate", `SELECT switchboard.endpoint_rotate($1, $2, 'sbk_rotated', NULL)`},
		{"revoke", `SELECT switchboard.endpoint_revoke($1)`},
	} {
		ep := e.vend("end-"+c.name, []string{"inbox"}, nil)
		resp, rd, active := openEventStream(t, e.url(ep), ep.Cred, map[string]any{"name": "todo.claimable", "cursor": nil})
		if active["method"] != "notifications/events/active" {
			t.Fatalf("%s: first stream message: %v", c.name, active)
		}
		if c.name == "rotate" {
			e.exec(c.sql, ep.ID, make([]byte, 32))
		} else {
			e.exec(c.sql, ep.ID)
		}
		var term map[string]any
		for term == nil {
			m := nextEvent(t, rd, soon)
			if m == nil {
				t.Fatalf("%s: the stream ended without notifications/events/terminated", c.name)
			}
			if m["method"] == "notifications/events/terminated" {
				term = m
			}
		}
		p, _ := term["params"].(map[string]any)
		er, _ := p["error"].(map[string]any)
		if errCode(er) != -32024 || er["data"] == nil || p["_meta"].(map[string]any)["io.modelcontextprotocol/subscriptionId"] != "stream-1" {
			t.Fatalf("%s: terminated: %v", c.name, term)
		}
		if final := nextEvent(t, rd, soon); final["id"] != "stream-1" || final["result"] == nil {
			t.Fatalf("%s: final frame: %v", c.name, final)
		}
		select {
		case <-streamEnd(resp.Body):
		case <-time.After(soon):
			t.Fatalf("%s: the stream stayed open", c.name)
		}
	}
}

// /metrics shows the age of the oldest outbox row: 0 when empty, then that of a row that
// cannot be sent (its subscription is gone) and was written 90 s ago.
func TestEventsOutboxAgeMetric(t *testing.T) {
	e := newEnv(t)
	age := func() float64 {
		resp := rawRequest(t, "GET", e.base+"/metrics", "", nil, nil)
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "switchboard_events_outbox_oldest_seconds "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("metric line %q", line)
				}
				return f
			}
		}
		t.Fatal("no switchboard_events_outbox_oldest_seconds on /metrics")
		return 0
	}
	if a := age(); a != 0 {
		t.Fatalf("empty outbox: %v", a)
	}
	e.exec(`INSERT INTO switchboard.event_outbox (hook_id, message_id, body, created_at)
	        VALUES ('sub_gone', 'msg_test', '{}', now() - interval '90 seconds')`)
	if a := age(); a < 90 || a > 3600 {
		t.Fatalf("outbox with a 90 s old row: %v", a)
	}
}

// events/* requests have the endpoint's own token bucket (SWITCHBOARD_EVENTS_RATE / _BURST):
// past it, the tools' stable code rate_limited, as the SEP's ResourceExhausted (-32025); the
// tools' bucket is not spent by them, nor theirs by tools.
func TestEventsRateLimited(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.Limits.EventsRate, c.Limits.EventsBurst = rate.Limit(1.0/3600), 2 })
	ep := e.vend("limited", []string{"inbox"}, nil)
	url := e.url(ep)
	for i := range 2 {
		if _, er := eventsCall(t, url, ep.Cred, "events/list", nil); er != nil {
			t.Fatalf("events/list %d within the burst: %v", i, er)
		}
	}
	_, er := eventsCall(t, url, ep.Cred, "events/poll", map[string]any{"name": "todo.claimable", "cursor": nil})
	data, _ := er["data"].(map[string]any)
	if errCode(er) != -32025 || !strings.HasPrefix(fmt.Sprint(er["message"]), "rate_limited: rate limit exceeded; retry in ") || data["limit"] != "SWITCHBOARD_EVENTS_RATE" {
		t.Fatalf("past the events bucket: %v", er)
	}
	_, out := modernPost(t, url, ep.Cred, "tools/call", "list_todos", map[string]any{"name": "list_todos", "arguments": map[string]any{}})
	if res, _ := out["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Fatalf("a tool call after the events bucket ran out: %v", out)
	}
	// Another endpoint has its own bucket.
	other := e.vend("limited", []string{"inbox"}, nil)
	if _, er := eventsCall(t, e.url(other), other.Cred, "events/list", nil); er != nil {
		t.Fatalf("another endpoint: %v", er)
	}
}

// maxAgeMs on events/stream floors the replay from the client's cursor (truncated: the older
// todo is skipped) and nothing after it: the stream's later reads are not floored, so a todo
// pushed while it is open arrives though it is older than maxAgeMs by the time it is read.
func TestEventsStreamMaxAgeFloorsReplayOnly(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("floor", []string{"inbox"}, nil)
	url := e.url(ep)
	start, perr := eventsCall(t, url, ep.Cred, "events/poll", map[string]any{"name": "todo.claimable", "cursor": nil})
	if perr != nil {
		t.Fatal(perr)
	}
	old := e.push(ep, "inbox", "before the stream")
	eventually(t, soon, "the first todo recorded", func() bool {
		got, err := eventsCall(t, url, ep.Cred, "events/poll", map[string]any{"name": "todo.claimable", "cursor": start["cursor"]})
		return err == nil && len(got["events"].([]any)) == 1
	})
	_, rd, active := openEventStream(t, url, ep.Cred, map[string]any{"name": "todo.claimable", "cursor": start["cursor"], "maxAgeMs": 1})
	if p, _ := active["params"].(map[string]any); active["method"] != "notifications/events/active" || p["truncated"] != true {
		t.Fatalf("active: %v", active)
	}
	fresh := e.push(ep, "inbox", "during the stream")
	for {
		m := nextEvent(t, rd, soon)
		if m == nil {
			t.Fatal("the stream ended")
		}
		if m["method"] != "notifications/events/event" {
			continue
		}
		id := m["params"].(map[string]any)["data"].(map[string]any)["todo"].(map[string]any)["id"]
		if id == old {
			t.Fatalf("the todo older than maxAgeMs was replayed: %v", m)
		}
		if id != fresh {
			t.Fatalf("event: %v", m)
		}
		return
	}
}
