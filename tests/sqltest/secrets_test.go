package sqltest

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// signedHook makes a webhook of a signed source type straight in the table, with a minted secret.
func (d *DB) signedHook(ep, source string) string {
	d.t.Helper()
	var id string
	if err := d.QueryRow(ctx(), `INSERT INTO switchboard.webhooks (endpoint_id, source_type, trust_mode, target_queue, ingest_token, signing_secret)
		VALUES ($1, $2, 'signed', 'inbox', $3, 'whsec_minted') RETURNING id`, ep, source, randomHex(16)).Scan(&id); err != nil {
		d.t.Fatal(err)
	}
	return id
}

// set-secret checks the provider's shape per type, refuses the types whose sender takes the
// minted secret, and never names the input in its message.
func TestSetSecretShapes(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	std := "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	cases := []struct {
		source, secret string
		ok             bool
	}{
		{"stripe", "whsec_oZ8nus9PHnoltEtWZ3pGITZdeHWHoqnL", true},
		{"stripe", "whsec_" + strings.Repeat("ab", 32), true},
		{"stripe", "sk_live_" + strings.Repeat("a", 24), false},
		{"stripe", "whsec_short", false},
		{"slack", strings.Repeat("0a", 16), true},
		{"slack", strings.Repeat("0A", 16), false},
		{"slack", strings.Repeat("0a", 15), false},
		{"standard", std, true},
		{"standard", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true}, // 24 bytes, the spec's vector
		{"standard", "whsec_" + base64.StdEncoding.EncodeToString([]byte("16 bytes is less")), false},
		{"standard", strings.TrimPrefix(std, "whsec_"), false},
		{"standard", "whsec_not base64!", false},
		{"github", "whsec_" + strings.Repeat("ab", 32), false},
	}
	for _, c := range cases {
		id := d.signedHook(ep, c.source)
		_, err := call(d.Pool, `SELECT switchboard.webhook_set_secret($1, $2)`, id, c.secret)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s %.10s…: %v", c.source, c.secret, err)
		case !c.ok && sqlstateOf(err) != invalidArgument:
			t.Errorf("%s %.10s…: %v, want invalid_argument", c.source, c.secret, err)
		case err != nil && strings.Contains(err.Error(), c.secret):
			t.Errorf("%s: the refusal names the secret", c.source)
		}
	}
	id := d.signedHook(ep, "slack")
	for _, ttl := range []string{"-1 second", "31 days"} {
		if _, err := call(d.Pool, `SELECT switchboard.webhook_set_secret($1, $2, $3::interval)`, id, strings.Repeat("ab", 16), ttl); sqlstateOf(err) != invalidArgument {
			t.Errorf("ttl %s: %v, want invalid_argument", ttl, err)
		}
	}
	if _, err := call(d.Pool, `SELECT switchboard.webhook_set_secret($1, $2)`, "00000000-0000-4000-8000-000000000000", strings.Repeat("ab", 16)); sqlstateOf(err) != notFound {
		t.Errorf("unknown webhook: %v, want not_found", err)
	}
	// What it answers and what the receiver reads: the previous secret only within the TTL.
	out := d.mustCall(`SELECT switchboard.webhook_set_secret($1, $2, '1 hour')`, id, strings.Repeat("cd", 16))
	if out["secret_source"] != "provider" || out["previous_secret_until"] == nil || out["ingest_token"] != nil || out["signing_secret"] != nil {
		t.Fatalf("set-secret answer %v", out)
	}
	var prev *string
	if err := d.QueryRow(ctx(), `SELECT f.previous_secret FROM switchboard.webhooks w, switchboard.webhook_for_ingest(w.ingest_token) f WHERE w.id = $1`, id).Scan(&prev); err != nil || prev == nil || *prev != "whsec_minted" {
		t.Fatalf("webhook_for_ingest previous secret: %v %v", prev, err)
	}
	d.exec(`UPDATE switchboard.webhooks SET previous_secret_until = now() - interval '1 second' WHERE id = $1`, id)
	if err := d.QueryRow(ctx(), `SELECT f.previous_secret FROM switchboard.webhooks w, switchboard.webhook_for_ingest(w.ingest_token) f WHERE w.id = $1`, id).Scan(&prev); err != nil || prev != nil {
		t.Fatalf("webhook_for_ingest after the TTL: %v %v", prev, err)
	}
	d.exec(`SELECT switchboard.expire_credentials()`)
	var kept bool
	if err := d.QueryRow(ctx(), `SELECT previous_secret IS NOT NULL FROM switchboard.webhooks WHERE id = $1`, id).Scan(&kept); err != nil || kept {
		t.Fatalf("expire_credentials left the expired previous secret: %v %v", kept, err)
	}
}

// webhook_refused adds counts and keeps the newest refusal, whatever order two servers'
// writes arrive in; a deleted webhook counts nothing.
func TestWebhookRefusedCoalesces(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	id := d.signedHook(ep, "stripe")
	now := time.Now()
	d.exec(`SELECT switchboard.webhook_refused($1, 5, 1, 0, 0, $2, 'stale_timestamp', NULL)`, id, now)
	d.exec(`SELECT switchboard.webhook_refused($1, 2, 0, 1, 3, $2, 'bad_signature', 'evt_old')`, id, now.Add(-time.Minute))
	var out map[string]any
	if err := d.QueryRow(ctx(), `SELECT switchboard.webhook_json(w) -> 'refusals' FROM switchboard.webhooks w WHERE id = $1`, id).Scan(&out); err != nil {
		t.Fatal(err)
	}
	last, _ := out["last"].(map[string]any)
	if out["total"] != 12.0 || out["bad_signature"] != 7.0 || out["unparseable"] != 3.0 || last["reason"] != "stale_timestamp" || last["delivery_id"] != nil {
		t.Fatalf("refusals %v", out)
	}
	gone := d.signedHook(ep, "slack")
	d.exec(`UPDATE switchboard.webhooks SET ingest_token = NULL, signing_secret = NULL, deleted_at = now() WHERE id = $1`, gone)
	d.exec(`SELECT switchboard.webhook_refused($1, 1, 0, 0, 0, now(), 'bad_signature', NULL)`, gone)
	var n int
	if err := d.QueryRow(ctx(), `SELECT count(*) FROM switchboard.webhook_refusals WHERE webhook_id = $1`, gone).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a deleted webhook's refusals were kept: %d %v", n, err)
	}
}
