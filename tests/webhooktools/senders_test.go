package webhooktools_test

// Real senders through MCP: a standard webhook within the ceiling, its whsec_ secret revealed once
// on create and rotate, and handshakes visible in list_webhook_events.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"switchboard/server/receiver/provider"
)

var whsecBase64 = regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{43}=$`)

// standardPost signs as a Standard Webhooks sender (Svix, OpenAI, Clerk...) does.
func standardPost(t *testing.T, url, secret, id string, body []byte) delivery {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("secret %q: %v", secret, err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + string(body)))
	return post(t, url, body, http.Header{
		"Content-Type":      {"application/json"},
		"User-Agent":        {"Svix-Webhooks/1.0"},
		"Webhook-Id":        {id},
		"Webhook-Timestamp": {ts},
		"Webhook-Signature": {"v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))},
	})
}

func TestStandardWebhookThroughMCP(t *testing.T) {
	outside := connect(t, vend(t, human(t), grant{webhookMax: 1, sources: []string{"github"}, webhookQueues: []string{"inbox"}}))
	outside.fail("forbidden_source_type", "create_webhook", obj{"source_type": "standard", "target_queue": "inbox"})

	ep := vend(t, human(t), grant{webhookMax: 2, sources: []string{"standard", "slack"}, webhookQueues: []string{"inbox"}})
	a := connect(t, ep)
	w := a.createWebhook("standard", "inbox")
	if w.TrustMode != "signed" || w.SourceType != "standard" || !whsecBase64.MatchString(w.SigningSecret) {
		t.Fatalf("create standard: %+v", w)
	}
	body := []byte(`{"type":"email.delivered","created_at":"2026-12-01T10:00:00.000Z","data":{"email_id":"4ef9a417"}}`)
	d := standardPost(t, w.IngestURL, w.SigningSecret, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", body)
	if d.Status != 202 || !d.Verified || d.Created != 1 {
		t.Fatalf("delivery: %d %s", d.Status, d.Raw)
	}
	// The secret is the spec's: its decoded bytes are the key, the string itself is not.
	if r := post(t, w.IngestURL, body, http.Header{"Webhook-Id": {"m2"}, "Webhook-Timestamp": {strconv.FormatInt(time.Now().Unix(), 10)},
		"Webhook-Signature": {"v1," + base64.StdEncoding.EncodeToString(hmacOf(w.SigningSecret, "m2."+strconv.FormatInt(time.Now().Unix(), 10)+"."+string(body)))}}); r.Status != 401 {
		t.Fatalf("string as key: %d", r.Status)
	}

	var rot webhook
	a.into("rotate_webhook", obj{"webhook_id": w.WebhookID}, &rot)
	if !whsecBase64.MatchString(rot.SigningSecret) || rot.SigningSecret == w.SigningSecret {
		t.Fatalf("rotate: %+v", rot)
	}
	if d := standardPost(t, rot.IngestURL, rot.SigningSecret, "msg_after", body); d.Status != 202 || d.Created != 1 {
		t.Fatalf("after rotate: %d %s", d.Status, d.Raw)
	}
	_, full := a.listWebhooks()
	mustContainNone(t, "list_webhooks", full, w.SigningSecret, rot.SigningSecret, "whsec_")

	// A Slack url_verification shows in the event list as a handshake, with no todo.
	s := a.createWebhook("slack", "inbox")
	ping := []byte(`{"token":"x","challenge":"ch4ll3ng3","type":"url_verification"}`)
	hdr := provider.Sign("slack", []byte(s.SigningSecret), ping, time.Now(), "", "")
	if r := post(t, s.IngestURL, ping, hdr); r.Status != 200 || r.Raw != "ch4ll3ng3" {
		t.Fatalf("url_verification: %d %q", r.Status, r.Raw)
	}
	var events struct {
		Events []struct {
			Disposition string `json:"disposition"`
			EventType   string `json:"event_type"`
		} `json:"events"`
	}
	a.into("list_webhook_events", obj{"webhook_id": s.WebhookID}, &events)
	if len(events.Events) != 1 || events.Events[0].Disposition != "handshake" || events.Events[0].EventType != "url_verification" ||
		todoCount(t, s.WebhookID) != 0 {
		t.Fatalf("events: %+v", events)
	}
}

func hmacOf(secret, msg string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// A 20 MiB push, as GitHub may send, reaches the agent whole through claim_next.
func TestLargeGitHubPushIsClaimableThroughMCP(t *testing.T) {
	ep := vend(t, human(t), grant{webhookMax: 1, sources: []string{"github"}, webhookQueues: []string{"inbox"}})
	a := connect(t, ep)
	w := a.createWebhook("github", "inbox")
	pad := strings.Repeat("x", 20<<20-200)
	body := `{"ref":"refs/heads/main","repository":{"full_name":"octo/monorepo"},"pad":"` + pad + `"}`
	d := github(t, w.IngestURL, w.SigningSecret, "push", []byte(body))
	if d.Status != 202 || d.Created != 1 {
		t.Fatalf("20 MiB push: %d %.200s", d.Status, d.Raw)
	}
	var claimed struct {
		Todo struct {
			ID      string `json:"id"`
			Payload struct {
				Pad string `json:"pad"`
			} `json:"payload"`
		} `json:"todo"`
	}
	a.into("claim_next", obj{}, &claimed)
	if claimed.Todo.ID != d.ID || claimed.Todo.Payload.Pad != pad {
		t.Fatalf("claim_next: id %q (want %q), pad %d bytes", claimed.Todo.ID, d.ID, len(claimed.Todo.Payload.Pad))
	}
}
