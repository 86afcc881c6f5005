// Real senders: Slack's url_verification, the forges' ping, large GitHub payloads and Standard
// Webhooks, as those senders shape their requests.
package receiver_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// postRaw is post for answers that need not be JSON (Slack's challenge is plain text).
func postRaw(t *testing.T, token string, body []byte, h http.Header) (int, string, []byte) {
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
	return res.StatusCode, res.Header.Get("Content-Type"), raw
}

// listedEvents is list_webhook_events as the agent sees it.
func listedEvents(t *testing.T, h hook) []map[string]any {
	t.Helper()
	var raw []byte
	if err := pool.QueryRow(context.Background(), `SELECT switchboard.events_list($1, $2)::text`, h.endpoint, h.id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out struct{ Events []map[string]any }
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Events
}

func TestSlackURLVerification(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "slack")
	// What Slack sends when an app's Events API Request URL is set.
	body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)

	status, _, _ := postRaw(t, h.token, body, http.Header{"Content-Type": {"application/json"}})
	if status != 401 || events(t, h) != 0 {
		t.Fatalf("unsigned url_verification: %d, %d events", status, events(t, h))
	}
	bad := delivery("slack", "whsec_wrong", body, time.Now(), "")
	if status, _, _ := postRaw(t, h.token, body, bad); status != 401 || events(t, h) != 0 {
		t.Fatalf("badly signed url_verification: %d", status)
	}

	status, ctype, got := postRaw(t, h.token, body, delivery("slack", h.secret, body, time.Now(), ""))
	if status != 200 || string(got) != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" || !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("url_verification: %d %q %q", status, ctype, got)
	}
	if todos(t, h) != 0 || events(t, h) != 1 {
		t.Fatalf("url_verification made %d todos, %d events", todos(t, h), events(t, h))
	}
	ev := listedEvents(t, h)
	if len(ev) != 1 || ev[0]["disposition"] != "handshake" || ev[0]["verified"] != true || ev[0]["event_type"] != "url_verification" {
		t.Fatalf("list_webhook_events: %v", ev)
	}
	// Slack sends it again when the URL is saved again: the same answer, still one event.
	status, _, got = postRaw(t, h.token, body, delivery("slack", h.secret, body, time.Now(), ""))
	if status != 200 || string(got) != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" || events(t, h) != 1 {
		t.Fatalf("repeated url_verification: %d %q, %d events", status, got, events(t, h))
	}
}

func TestSlackRetriesDedupOnEventID(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "slack")
	body := []byte(`{"type":"event_callback","event_id":"Ev08MFMKH6","event_time":1700000000,"event":{"type":"app_mention","text":"hi"}}`)
	first := post(t, h.token, body, delivery("slack", h.secret, body, time.Now(), ""))
	// Slack's retry: the same event_id, a new timestamp and signature, X-Slack-Retry-Num set.
	retry := delivery("slack", h.secret, body, time.Now().Add(time.Second), "")
	retry.Set("X-Slack-Retry-Num", "1")
	retry.Set("X-Slack-Retry-Reason", "http_timeout")
	again := post(t, h.token, body, retry)
	if first.status != 202 || first.body["created"] != 1.0 || again.status != 202 || again.body["created"] != 0.0 ||
		again.body["id"] != first.body["id"] || todos(t, h) != 1 {
		t.Fatalf("slack retry: %v then %v", first.body, again.body)
	}
	key := ""
	_ = pool.QueryRow(context.Background(), `SELECT delivery_key FROM switchboard.webhook_events WHERE webhook_id = $1`, h.id).Scan(&key)
	if key != h.id+":Ev08MFMKH6" {
		t.Fatalf("delivery key %q", key)
	}
}

func TestForgePing(t *testing.T) {
	ep := vend(t, human(t))
	for _, source := range []string{"github", "gitea"} {
		h := newHook(t, ep, source)
		// GitHub's ping on hook creation; gitea's "test delivery" has the same shape.
		body := []byte(`{"zen":"Design for failure.","hook_id":109948940,"hook":{"type":"Repository","id":109948940,` +
			`"events":["push"],"config":{"content_type":"json","insecure_ssl":"0","url":"https://example.test/hook"}},` +
			`"repository":{"full_name":"octo/hello"}}`)
		hdr := delivery(source, h.secret, body, time.Now(), "ping-"+randHex(4))
		hdr.Set("X-GitHub-Event", "ping")
		hdr.Set("X-Gitea-Event", "ping")
		hdr.Set("X-GitHub-Hook-ID", "109948940")
		r := post(t, h.token, body, hdr)
		if r.status != 202 || r.body["created"] != 0.0 || r.body["handshake"] != true || r.body["verified"] != true {
			t.Fatalf("%s ping: %d %v", source, r.status, r.body)
		}
		ev := listedEvents(t, h)
		if todos(t, h) != 0 || len(ev) != 1 || ev[0]["disposition"] != "handshake" || ev[0]["event_type"] != "ping" {
			t.Fatalf("%s ping: %d todos, events %v", source, todos(t, h), ev)
		}
		// An unsigned ping is refused like any delivery.
		hdr.Set("X-Hub-Signature-256", "sha256="+mac("whsec_wrong", string(body)))
		hdr.Set("X-Gitea-Signature", mac("whsec_wrong", string(body)))
		if r := post(t, h.token, body, hdr); r.status != 401 {
			t.Fatalf("%s badly signed ping: %d", source, r.status)
		}
	}
	// A rule that would route everything does not turn a ping into work.
	h := newHook(t, ep, "github")
	saveRules(t, ep, h.id, `[{"id":"all","expr":"true","action":{"queue":"ops"}}]`)
	body := []byte(`{"zen":"Keep it simple.","hook_id":1}`)
	hdr := delivery("github", h.secret, body, time.Now(), "p2")
	hdr.Set("X-GitHub-Event", "ping")
	if r := post(t, h.token, body, hdr); r.status != 202 || r.body["created"] != 0.0 || todos(t, h) != 0 {
		t.Fatalf("ping under rules: %v", r.body)
	}
}

// bigPush is a GitHub push payload padded to n bytes with a long commit list, as a large push is.
func bigPush(n int) []byte {
	var b bytes.Buffer
	b.Grow(n)
	b.WriteString(`{"ref":"refs/heads/main","repository":{"full_name":"octo/monorepo"},"commits":[`)
	commit := `{"id":"` + strings.Repeat("a", 40) + `","message":"` + strings.Repeat("m", 900) + `","added":[],"removed":[],"modified":["src/x.go"]}`
	for b.Len()+len(commit)+3 < n {
		if b.Bytes()[b.Len()-1] == '}' {
			b.WriteByte(',')
		}
		b.WriteString(commit)
	}
	b.WriteString(`],"pad":"`)
	b.WriteString(strings.Repeat("p", n-b.Len()-2))
	b.WriteString(`"}`)
	return b.Bytes()
}

func TestLargeGitHubDelivery(t *testing.T) {
	ep := vend(t, human(t))
	h := newHook(t, ep, "github")
	body := bigPush(20 << 20)
	if !json.Valid(body) || len(body) != 20<<20 {
		t.Fatalf("fixture: %d bytes, valid %v", len(body), json.Valid(body))
	}
	hdr := delivery("github", h.secret, body, time.Now(), "big-1")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := post(t, h.token, body, hdr)
	runtime.ReadMemStats(&after)
	if r.status != 202 || r.body["created"] != 1.0 {
		t.Fatalf("20 MiB github delivery: %d %v", r.status, r.body)
	}
	// Client, server and pgx share this process; the figure bounds all of them together.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("20 MiB delivery: %.1f MiB allocated in this process (%.2fx the body)", float64(alloc)/(1<<20), float64(alloc)/float64(len(body)))

	var claimed struct {
		Todo struct {
			ID          string `json:"id"`
			PayloadSize int    `json:"payload_size"`
			Payload     struct {
				Repository struct {
					FullName string `json:"full_name"`
				} `json:"repository"`
			} `json:"payload"`
		} `json:"todo"`
	}
	var raw []byte
	if err := pool.QueryRow(context.Background(), `SELECT switchboard.claim_next($1, 'inbox')::text`, ep).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &claimed); err != nil {
		t.Fatal(err)
	}
	if c := claimed.Todo; c.ID != r.body["id"] || c.Payload.Repository.FullName != "octo/monorepo" {
		t.Fatalf("claim: id %s size %d", c.ID, c.PayloadSize)
	}
	if ev := listedEvents(t, h); len(ev) != 1 || ev[0]["payload_size"] != float64(20<<20) || ev[0]["disposition"] != "delivered" {
		t.Fatalf("event: %v", ev)
	}

	// 26 MiB is over GitHub's 25 MiB: refused with a sentence a human can act on, nothing stored.
	huge := bigPush(26 << 20)
	r = post(t, h.token, huge, delivery("github", h.secret, huge, time.Now(), "big-2"))
	msg, _ := r.body["error"].(map[string]any)
	if r.status != 413 || msg["code"] != "payload_too_large" || !strings.Contains(fmt.Sprint(msg["message"]), "25 MiB") {
		t.Fatalf("26 MiB: %d %v", r.status, r.body)
	}
	if events(t, h) != 1 {
		t.Fatalf("the 26 MiB delivery was stored")
	}
	// Other sources keep 5 MiB.
	s := newHook(t, ep, "stripe")
	six := bigPush(6 << 20)
	r = post(t, s.token, six, delivery("stripe", s.secret, six, time.Now(), ""))
	msg, _ = r.body["error"].(map[string]any)
	if r.status != 413 || !strings.Contains(fmt.Sprint(msg["message"]), "5 MiB, the limit for stripe webhooks") {
		t.Fatalf("6 MiB stripe: %d %v", r.status, r.body)
	}
}

// --- Standard Webhooks ------------------------------------------------------------------------

// standardHook creates a standard webhook and returns the secret switchboard revealed.
func standardHook(t *testing.T, endpoint string) hook {
	t.Helper()
	h := hook{token: randHex(24), endpoint: endpoint}
	err := pool.QueryRow(context.Background(),
		`SELECT w ->> 'webhook_id', w ->> 'signing_secret'
		   FROM switchboard.webhook_create($1, 'standard', 'inbox', $2, $3) w`,
		endpoint, h.token, "whsec_"+randHex(32)).Scan(&h.id, &h.secret)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// standardSign signs as the Standard Webhooks reference libraries do.
func standardSign(secret, id string, ts time.Time, body []byte) http.Header {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	unix := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + unix + "."))
	m.Write(body)
	return http.Header{
		"Content-Type":      {"application/json"},
		"Webhook-Id":        {id},
		"Webhook-Timestamp": {unix},
		"Webhook-Signature": {"v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))},
	}
}

func TestStandardWebhooks(t *testing.T) {
	ep := vend(t, human(t))
	h := standardHook(t, ep)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h.secret, "whsec_"))
	if !strings.HasPrefix(h.secret, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("secret %q is not whsec_ + base64 of 32 bytes (%v)", h.secret, err)
	}
	body := []byte(`{"type":"user.created","timestamp":"2026-12-01T10:00:00Z","data":{"id":"user_29w83sxmDNGwOuEthce5gg56FcC"}}`)
	now := time.Now()

	refused := map[string]http.Header{
		"tampered body":   standardSign(h.secret, "msg_a", now, append([]byte(" "), body...)),
		"6 minutes old":   standardSign(h.secret, "msg_a", now.Add(-6*time.Minute), body),
		"6 minutes ahead": standardSign(h.secret, "msg_a", now.Add(6*time.Minute), body),
		"wrong secret":    standardSign("whsec_"+base64.StdEncoding.EncodeToString([]byte(randHex(16))), "msg_a", now, body),
	}
	for _, missing := range []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
		hdr := standardSign(h.secret, "msg_a", now, body)
		hdr.Del(missing)
		refused["missing "+missing] = hdr
	}
	for name, hdr := range refused {
		if r := post(t, h.token, body, hdr); r.status != 401 {
			t.Errorf("%s: %d %v", name, r.status, r.body)
		}
	}
	if events(t, h) != 0 {
		t.Fatalf("refused deliveries stored %d events", events(t, h))
	}

	r := post(t, h.token, body, standardSign(h.secret, "msg_a", now, body))
	if r.status != 202 || r.body["created"] != 1.0 || r.body["verified"] != true || r.body["trust_mode"] != "signed" {
		t.Fatalf("valid: %d %v", r.status, r.body)
	}
	// A redelivery has the same webhook-id and a fresh timestamp and signature.
	again := post(t, h.token, body, standardSign(h.secret, "msg_a", now.Add(30*time.Second), body))
	if again.status != 202 || again.body["created"] != 0.0 || again.body["id"] != r.body["id"] || todos(t, h) != 1 {
		t.Fatalf("redelivery: %d %v", again.status, again.body)
	}
	var title, kind string
	_ = pool.QueryRow(context.Background(), `SELECT title, kind FROM switchboard.todos WHERE id = $1`, r.body["id"]).Scan(&title, &kind)
	if title != "webhook user.created" || kind != "user.created" {
		t.Fatalf("todo title %q kind %q", title, kind)
	}

	// Rotation: the sender lists the old and the new signature while both secrets are live.
	oldSecret := h.secret
	var rotated string
	if err := pool.QueryRow(context.Background(), `SELECT switchboard.webhook_rotate($1, $2, $3, $4) ->> 'signing_secret'`,
		ep, h.id, h.token+"r", "whsec_"+randHex(32)).Scan(&rotated); err != nil {
		t.Fatal(err)
	}
	h.token += "r"
	oldSig := standardSign(oldSecret, "msg_b", now, body).Get("Webhook-Signature")
	both := standardSign(rotated, "msg_b", now, body)
	both.Set("Webhook-Signature", oldSig+" "+both.Get("Webhook-Signature"))
	if r := post(t, h.token, body, both); r.status != 202 || r.body["created"] != 1.0 {
		t.Fatalf("v1,<old> v1,<new> against the new secret: %d %v", r.status, r.body)
	}
	onlyOld := standardSign(oldSecret, "msg_c", now, body)
	if r := post(t, h.token, body, onlyOld); r.status != 401 {
		t.Fatalf("the old secret alone after rotation: %d", r.status)
	}
}

func TestBodyCapIsASetting(t *testing.T) {
	mustExec(t, `SELECT switchboard.settings_set('ingest_max_body_generic', 2048)`)
	defer mustExec(t, `SELECT switchboard.settings_set('ingest_max_body_generic', 5242880)`)
	ep := vend(t, human(t))
	h := newHook(t, ep, "generic")
	r := post(t, h.token, bigPush(4096), delivery("generic", "", nil, time.Now(), "cap-1"))
	msg, _ := r.body["error"].(map[string]any)
	if r.status != 413 || msg["message"] != "body exceeds 2048 bytes, the limit for generic webhooks" || events(t, h) != 0 {
		t.Fatalf("over the set cap: %d %v", r.status, r.body)
	}
	if r := post(t, h.token, bigPush(2048), delivery("generic", "", nil, time.Now(), "cap-2")); r.status != 202 {
		t.Fatalf("at the set cap: %d %v", r.status, r.body)
	}
	// The range check of the settings table bounds it.
	if _, err := pool.Exec(context.Background(), `SELECT switchboard.settings_set('ingest_max_body_github', 26214401)`); err == nil {
		t.Fatal("a cap over 25 MiB was accepted")
	}
}
