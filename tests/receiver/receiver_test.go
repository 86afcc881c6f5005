// Real HTTP deliveries, signed here the way each provider signs (independently of the server's
// verifier), against the receiver and a real PostgreSQL.
package receiver_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"switchboard/server/receiver"
	"switchboard/server/receiver/provider"
	"switchboard/server/rules"
	"switchboard/server/store"
	"switchboard/tests/testdb"
	"switchboard/tests/testproc"
)

var (
	pool *pgxpool.Pool
	srv  *httptest.Server
	logs testproc.LogBuffer
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	dsn, drop, err := testdb.Create(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pool, err = pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/w/{token}", receiver.New(store.New(pool), logger, rules.NewCache(64), nil))
	srv = httptest.NewServer(mux)
	code := m.Run()
	srv.Close()
	pool.Close()
	drop()
	os.Exit(code)
}

// --- fixtures -------------------------------------------------------------------------------

type hook struct {
	id, token, secret, endpoint string
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// human creates a human and returns its name.
func human(t *testing.T) string {
	t.Helper()
	name := "h-" + randHex(4)
	mustExec(t, `SELECT switchboard.human_add($1)`, name)
	return name
}

// vend creates an endpoint for a new agent of the human, allowed every source on queue inbox.
func vend(t *testing.T, humanName string) string {
	t.Helper()
	var id string
	err := pool.QueryRow(context.Background(),
		`SELECT switchboard.endpoint_vend($1, $2, sha256($3::bytea), 'sbk_test', '{inbox,ops}', NULL, 20,
		        '{github,gitea,stripe,slack,cairn,standard,generic}', '{inbox,ops}') ->> 'endpoint_id'`,
		humanName, "agent-"+randHex(3), []byte(randHex(16))).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newHook(t *testing.T, endpoint, source string) hook {
	t.Helper()
	h := hook{token: randHex(24), secret: "whsec_" + randHex(32), endpoint: endpoint}
	err := pool.QueryRow(context.Background(),
		`SELECT switchboard.webhook_create($1, $2, 'inbox', $3, $4) ->> 'webhook_id'`,
		endpoint, source, h.token, h.secret).Scan(&h.id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func events(t *testing.T, h hook) int {
	return count(t, `SELECT count(*) FROM switchboard.webhook_events WHERE webhook_id = $1`, h.id)
}

func todos(t *testing.T, h hook) int {
	return count(t, `SELECT count(*) FROM switchboard.todos t JOIN switchboard.webhook_events e ON e.id = t.event_id
	                  WHERE e.webhook_id = $1`, h.id)
}

// --- signing, as each provider does it ------------------------------------------------------

func mac(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// delivery builds a signed request body and headers for a provider.
func delivery(source, secret string, body []byte, now time.Time, id string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	ts := strconv.FormatInt(now.Unix(), 10)
	switch source {
	case "github":
		h.Set("X-Hub-Signature-256", "sha256="+mac(secret, string(body)))
		h.Set("X-GitHub-Delivery", id)
		h.Set("X-GitHub-Event", "push")
	case "gitea":
		h.Set("X-Gitea-Signature", mac(secret, string(body)))
		h.Set("X-Gitea-Delivery", id)
		h.Set("X-Gitea-Event", "push")
	case "stripe":
		h.Set("Stripe-Signature", "t="+ts+",v1="+mac(secret, ts+"."+string(body)))
	case "slack":
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", "v0="+mac(secret, "v0:"+ts+":"+string(body)))
	case "cairn":
		h.Set("X-Cairn-Signature", "sha256="+mac(secret, string(body)))
		h.Set("X-Cairn-Event-Id", id)
	case "generic":
		h.Set("X-Delivery-Id", id)
		h.Set("X-Event-Type", "ping")
	}
	return h
}

func sampleBody(source, id string, now time.Time) []byte {
	switch source {
	case "stripe":
		return []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","data":{"object":{"amount":100}}}`, id))
	case "slack":
		return []byte(fmt.Sprintf(`{"type":"event_callback","event":{"type":"app_mention","text":%q}}`, id))
	case "cairn":
		return []byte(fmt.Sprintf(`{"event_id":%q,"created_at":%q,"kind":"artifact.created","title":"Plan","share_type":"link"}`,
			id, now.UTC().Format(time.RFC3339)))
	default:
		return []byte(fmt.Sprintf(`{"ref":"refs/heads/main","id":%q,"repository":{"full_name":"acme/app"}}`, id))
	}
}

type response struct {
	status int
	body   map[string]any
}

func post(t *testing.T, token string, body []byte, h http.Header) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/w/"+token, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := response{status: res.StatusCode}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		t.Fatalf("response is not JSON (%d): %s", res.StatusCode, raw)
	}
	return out
}

// --- tests ----------------------------------------------------------------------------------

func TestSignedDeliveries(t *testing.T) {
	ep := vend(t, human(t))
	for _, source := range []string{"github", "gitea", "stripe", "slack", "cairn"} {
		t.Run(source, func(t *testing.T) {
			h := newHook(t, ep, source)
			now := time.Now()
			id := "d-" + randHex(6)
			body := sampleBody(source, id, now)

			// Refusals first: nothing may be stored by any of them.
			tampered := append(bytes.Clone(body[:len(body)-1]), []byte(` }`)...)
			if r := post(t, h.token, tampered, delivery(source, h.secret, body, now, id)); r.status != 401 {
				t.Fatalf("tampered body: %d", r.status)
			}
			if r := post(t, h.token, body, delivery(source, "whsec_wrong", body, now, id)); r.status != 401 {
				t.Fatalf("wrong secret: %d", r.status)
			}
			unsigned := http.Header{"Content-Type": {"application/json"}}
			if r := post(t, h.token, body, unsigned); r.status != 401 {
				t.Fatalf("missing signature: %d", r.status)
			}
			malformed := delivery(source, h.secret, body, now, id)
			for k := range malformed {
				if strings.Contains(strings.ToLower(k), "signature") {
					malformed.Set(k, "garbage=zz,"+strings.Repeat("x", 10))
				}
			}
			if r := post(t, h.token, body, malformed); r.status != 401 {
				t.Fatalf("malformed signature: %d", r.status)
			}
			if n := events(t, h); n != 0 {
				t.Fatalf("refused deliveries stored %d events", n)
			}

			r := post(t, h.token, body, delivery(source, h.secret, body, now, id))
			if r.status != 202 || r.body["verified"] != true || r.body["trust_mode"] != "signed" || r.body["created"] != 1.0 {
				t.Fatalf("valid delivery: %d %v", r.status, r.body)
			}
			var verified bool
			var trust, detail, title string
			err := pool.QueryRow(context.Background(),
				`SELECT e.verified, e.trust_mode, e.verify_detail, t.title
				   FROM switchboard.webhook_events e JOIN switchboard.todos t ON t.event_id = e.id
				  WHERE e.webhook_id = $1`, h.id).Scan(&verified, &trust, &detail, &title)
			if err != nil {
				t.Fatal(err)
			}
			if !verified || trust != "signed" || !strings.Contains(detail, "hmac-sha256") || !strings.HasPrefix(title, source) {
				t.Fatalf("stored event: verified=%v trust=%s detail=%q title=%q", verified, trust, detail, title)
			}
			if r.body["id"] == nil || r.body["queue"] != "inbox" {
				t.Fatalf("response lacks first todo: %v", r.body)
			}
		})
	}
}

func TestReplayWindows(t *testing.T) {
	ep := vend(t, human(t))
	old := time.Now().Add(-400 * time.Second)
	for _, source := range []string{"stripe", "slack", "cairn"} {
		h := newHook(t, ep, source)
		id := "old-" + randHex(4)
		body := sampleBody(source, id, old)
		if r := post(t, h.token, body, delivery(source, h.secret, body, old, id)); r.status != 401 {
			t.Errorf("%s stale delivery: %d", source, r.status)
		}
		if events(t, h) != 0 {
			t.Errorf("%s stale delivery stored an event", source)
		}
	}
	// cairn: a signed body whose event id differs from the header, or has none at all.
	h := newHook(t, ep, "cairn")
	now := time.Now()
	body := sampleBody("cairn", "real-id", now)
	forged := delivery("cairn", h.secret, body, now, "forged-id")
	if r := post(t, h.token, body, forged); r.status != 401 {
		t.Errorf("cairn forged id: %d", r.status)
	}
	noID := []byte(fmt.Sprintf(`{"created_at":%q,"kind":"x"}`, now.UTC().Format(time.RFC3339)))
	hdr := delivery("cairn", h.secret, noID, now, "")
	hdr.Del("X-Cairn-Event-Id")
	if r := post(t, h.token, noID, hdr); r.status != 401 {
		t.Errorf("cairn without event_id: %d", r.status)
	}
}

func TestGenericAndRedelivery(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "generic")
	first := post(t, h.token, []byte(`{"n":1}`), delivery("generic", "", nil, time.Now(), "dlv-1"))
	if first.status != 202 || first.body["trust_mode"] != "token" || first.body["verified"] != false || first.body["created"] != 1.0 {
		t.Fatalf("generic delivery: %d %v", first.status, first.body)
	}
	// Same delivery id, different body: the same todo, nothing new.
	again := post(t, h.token, []byte(`{"n":2}`), delivery("generic", "", nil, time.Now(), "dlv-1"))
	if again.status != 202 || again.body["created"] != 0.0 || again.body["id"] != first.body["id"] {
		t.Fatalf("redelivery: %d %v (first %v)", again.status, again.body, first.body)
	}
	if events(t, h) != 1 || todos(t, h) != 1 {
		t.Fatalf("redelivery stored more: events=%d todos=%d", events(t, h), todos(t, h))
	}
	if n := count(t, `SELECT count(*) FROM switchboard.webhook_events WHERE webhook_id = $1 AND trust_mode = 'token' AND NOT verified`, h.id); n != 1 {
		t.Fatalf("generic event must be token/unverified")
	}

	// A signed provider's redelivery: same delivery id, same todo.
	g := newHook(t, ep, "github")
	body := sampleBody("github", "x", time.Now())
	a := post(t, g.token, body, delivery("github", g.secret, body, time.Now(), "gh-1"))
	b := post(t, g.token, body, delivery("github", g.secret, body, time.Now(), "gh-1"))
	if a.body["id"] != b.body["id"] || b.body["created"] != 0.0 || events(t, g) != 1 || todos(t, g) != 1 {
		t.Fatalf("github redelivery: %v then %v", a.body, b.body)
	}
}

func TestConcurrentRedeliveriesMakeOneTodo(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "generic")
	var wg sync.WaitGroup
	created := make(chan float64, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := post(t, h.token, []byte(`{}`), delivery("generic", "", nil, time.Now(), "same"))
			if r.status != 202 {
				t.Errorf("status %d %v", r.status, r.body)
			}
			created <- r.body["created"].(float64)
		}()
	}
	wg.Wait()
	close(created)
	total := 0.0
	for c := range created {
		total += c
	}
	if total != 1 || events(t, h) != 1 || todos(t, h) != 1 {
		t.Fatalf("8 concurrent redeliveries: created=%v events=%d todos=%d", total, events(t, h), todos(t, h))
	}
}

func TestOversizeUnknownRotatedDeleted(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "generic")
	big := bytes.Repeat([]byte("a"), provider.DefaultMaxBody+1)
	if r := post(t, h.token, big, http.Header{}); r.status != 413 {
		t.Fatalf("oversized: %d", r.status)
	}
	if events(t, h) != 0 {
		t.Fatal("oversized body stored an event")
	}
	if r := post(t, randHex(24), []byte(`{}`), http.Header{}); r.status != 404 {
		t.Fatalf("unknown token: %d", r.status)
	}

	g := newHook(t, ep, "github")
	body := sampleBody("github", "r", time.Now())
	newToken, newSecret := randHex(24), "whsec_"+randHex(32)
	mustExec(t, `SELECT switchboard.webhook_rotate($1, $2, $3, $4)`, ep, g.id, newToken, newSecret)
	if r := post(t, g.token, body, delivery("github", g.secret, body, time.Now(), "r1")); r.status != 404 {
		t.Fatalf("rotated token: %d", r.status)
	}
	if r := post(t, newToken, body, delivery("github", g.secret, body, time.Now(), "r1")); r.status != 401 {
		t.Fatalf("pre-rotation secret: %d", r.status)
	}
	if r := post(t, newToken, body, delivery("github", newSecret, body, time.Now(), "r1")); r.status != 202 {
		t.Fatalf("new secret: %d", r.status)
	}
	mustExec(t, `SELECT switchboard.webhook_delete($1, $2)`, ep, g.id)
	if r := post(t, newToken, body, delivery("github", newSecret, body, time.Now(), "r2")); r.status != 404 {
		t.Fatalf("deleted token: %d", r.status)
	}
}

func TestSecretsNeverStoredInHeadersOrLogs(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "github")
	body := sampleBody("github", "s", time.Now())
	hdr := delivery("github", h.secret, body, time.Now(), "s1")
	hdr.Set("Authorization", "Bearer sbk_topsecret")
	hdr.Set("Cookie", "session=abc")
	hdr.Set("X-Api-Key", "key123")
	if r := post(t, h.token, body, hdr); r.status != 202 {
		t.Fatalf("delivery: %d", r.status)
	}
	// A refused one must not leak either.
	post(t, h.token, body, delivery("github", "whsec_wrong", body, time.Now(), "s2"))

	var stored string
	if err := pool.QueryRow(context.Background(),
		`SELECT headers::text FROM switchboard.webhook_events WHERE webhook_id = $1`, h.id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	sig := hdr.Get("X-Hub-Signature-256")
	for _, secret := range []string{sig, strings.TrimPrefix(sig, "sha256="), "sbk_topsecret", "session=abc", "key123", h.secret} {
		if strings.Contains(stored, secret) {
			t.Errorf("stored headers contain %q", secret)
		}
	}
	if !strings.Contains(stored, `"x-hub-signature-256": "[redacted]"`) {
		t.Errorf("signature header not redacted: %s", stored)
	}
	all := logs.String()
	for _, secret := range []string{h.secret, h.token, strings.TrimPrefix(sig, "sha256="), "sbk_topsecret"} {
		if strings.Contains(all, secret) {
			t.Errorf("logs contain a secret or token")
		}
	}
	if !strings.Contains(all, h.id) {
		t.Errorf("logs should name the webhook id")
	}
}

func TestSignedWebhookWithoutSecret(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "github")
	mustExec(t, `UPDATE switchboard.webhooks SET signing_secret = NULL WHERE id = $1`, h.id)
	body := sampleBody("github", "n", time.Now())
	if r := post(t, h.token, body, delivery("github", h.secret, body, time.Now(), "n1")); r.status != 503 {
		t.Fatalf("signed webhook without secret: %d", r.status)
	}
	if events(t, h) != 0 {
		t.Fatal("stored an event")
	}
}

// The receiver keeps the webhooks it has read, but never trusts that view: a rotated or deleted
// token, or rules saved since, are caught by switchboard.ingest in the delivery's transaction,
// and the answer is the one a fresh read gives.
func TestCachedWebhookViewIsNeverTrusted(t *testing.T) {
	ep := vend(t, human(t))
	g := newHook(t, ep, "github")
	body := sampleBody("github", "c", time.Now())
	if r := post(t, g.token, body, delivery("github", g.secret, body, time.Now(), "c0")); r.status != 202 {
		t.Fatalf("first delivery: %d", r.status)
	}
	mustExec(t, `SELECT switchboard.webhook_rotate($1, $2, $3, $4)`, ep, g.id, randHex(24), "whsec_"+randHex(32))
	if r := post(t, g.token, body, delivery("github", g.secret, body, time.Now(), "c1")); r.status != 404 {
		t.Fatalf("old token right after rotation: %d, want 404", r.status)
	}
	if n := events(t, g); n != 1 {
		t.Fatalf("%d events after the rotated token was used, want 1", n)
	}

	// Rules saved after the receiver read the webhook apply to the very next delivery.
	h := newHook(t, ep, "generic")
	if r := post(t, h.token, []byte(`{"n":1}`), delivery("generic", "", nil, time.Now(), "r0")); r.status != 202 || r.body["created"] != 1.0 {
		t.Fatalf("before rules: %d %v", r.status, r.body)
	}
	saveRules(t, ep, h.id, `[{"id": "drop-all", "expr": "true", "action": {"drop": true}}]`)
	if r := post(t, h.token, []byte(`{"n":2}`), delivery("generic", "", nil, time.Now(), "r1")); r.status != 202 || r.body["dropped"] != true {
		t.Fatalf("after rules were saved: %d %v", r.status, r.body)
	}

	// A deleted webhook answers 404 even to a bad signature checked against the remembered secret.
	d := newHook(t, ep, "github")
	if r := post(t, d.token, body, delivery("github", d.secret, body, time.Now(), "d0")); r.status != 202 {
		t.Fatalf("delivery before delete: %d", r.status)
	}
	mustExec(t, `SELECT switchboard.webhook_delete($1, $2)`, ep, d.id)
	if r := post(t, d.token, body, delivery("github", "whsec_wrong", body, time.Now(), "d1")); r.status != 404 {
		t.Fatalf("deleted webhook, bad signature: %d, want 404", r.status)
	}
}
