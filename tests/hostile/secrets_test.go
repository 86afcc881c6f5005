package hostile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"switchboard/server/receiver/provider"
	"switchboard/tests/testproc"
)

// Provider-issued secrets (issue 25): Stripe, Slack and Standard Webhooks producers sign with a
// secret they issue. These tests drive the real binary: create_webhook over MCP, deliveries to
// the ingest URL, `switchboard webhook set-secret` with the secret on stdin, list_webhooks and
// `switchboard webhook list` for the refusals, /metrics for their counts.

// created is the part of a create_webhook answer these tests read.
type created struct {
	ID           string `json:"webhook_id"`
	URL          string `json:"ingest_url"`
	Secret       string `json:"signing_secret"`
	SecretIssuer string `json:"secret_issuer"`
	NextStep     string `json:"next_step"`
	SecretSource string `json:"secret_source"`
}

func (c created) token() string { return c.URL[strings.LastIndex(c.URL, "/")+1:] }

func createHook(t *testing.T, s *mcpSession, source string) created {
	t.Helper()
	a := s.call("create_webhook", `{"source_type":"`+source+`","target_queue":"inbox"}`)
	var c created
	if a.code != "ok" || json.Unmarshal([]byte(a.text), &c) != nil || c.ID == "" || c.Secret == "" {
		t.Fatalf("create_webhook %s: %s %.300s", source, a.code, a.text)
	}
	return c
}

// listed is one webhook of list_webhooks.
type listed struct {
	ID                  string `json:"webhook_id"`
	SecretSource        string `json:"secret_source"`
	PreviousSecretUntil string `json:"previous_secret_until"`
	Refusals            struct {
		Total          int64 `json:"total"`
		BadSignature   int64 `json:"bad_signature"`
		StaleTimestamp int64 `json:"stale_timestamp"`
		TooLarge       int64 `json:"too_large"`
		Unparseable    int64 `json:"unparseable"`
		Last           *struct {
			At         string `json:"at"`
			Reason     string `json:"reason"`
			DeliveryID string `json:"delivery_id"`
		} `json:"last"`
	} `json:"refusals"`
}

// listHook is the webhook id as list_webhooks shows it; answers collects every answer's text.
func listHook(t *testing.T, s *mcpSession, id string, answers *[]string) listed {
	t.Helper()
	a := s.call("list_webhooks", `{}`)
	*answers = append(*answers, a.text)
	var out struct {
		Webhooks []listed `json:"webhooks"`
	}
	if a.code != "ok" || json.Unmarshal([]byte(a.text), &out) != nil {
		t.Fatalf("list_webhooks: %s %.300s", a.code, a.text)
	}
	for _, w := range out.Webhooks {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("webhook %s not in list_webhooks", id)
	return listed{}
}

// waitRefusals waits until list_webhooks counts want bad signatures (refusal counts are
// written at most once a second per webhook).
func waitRefusals(t *testing.T, s *mcpSession, id string, want int64, answers *[]string) listed {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w := listHook(t, s, id, answers)
		if w.Refusals.BadSignature == want {
			return w
		}
		if w.Refusals.BadSignature > want || time.Now().After(deadline) {
			t.Fatalf("bad_signature refusals %d, want %d (%+v)", w.Refusals.BadSignature, want, w.Refusals)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cli runs the switchboard binary against the test database with stdin; it returns stdout and
// stderr together (everything a human or an agent watching the terminal would see).
func (p *proc) cli(stdin string, args ...string) (string, int) {
	p.t.Helper()
	cmd := exec.Command(testproc.Switchboard(p.t), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+p.dsn)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		p.t.Fatal(err)
	}
	return out.String(), code
}

func (p *proc) setSecret(id, secret string, extra ...string) string {
	p.t.Helper()
	out, code := p.cli(secret+"\n", append([]string{"webhook", "set-secret", id, "--json"}, extra...)...)
	if code != 0 {
		p.t.Fatalf("webhook set-secret: exit %d: %s", code, out)
	}
	var w struct {
		SecretSource string `json:"secret_source"`
	}
	if err := json.Unmarshal([]byte(out), &w); err != nil || w.SecretSource != "provider" {
		p.t.Fatalf("webhook set-secret answer: %v %s", err, out)
	}
	return out
}

func (p *proc) events(id string) string {
	return p.scalar(`SELECT count(*)::text FROM switchboard.webhook_events WHERE webhook_id = $1`, id)
}

func standardSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// providerCase is one provider-issued source type: a secret of its provider's shape and a body.
type providerCase struct {
	source, issuer string
	secret         func() string
	body           string
	deliveryID     string // what the refusal record names ("" when the provider keeps it in the body)
}

var providerCases = []providerCase{
	{"stripe", "provider", func() string { return "whsec_" + randHex(16) }, `{"id":"evt_%s","type":"invoice.paid"}`, ""},
	{"slack", "provider", func() string { return randHex(16) }, `{"type":"event_callback","event_id":"Ev%s","event":{"type":"message"}}`, ""},
	{"standard", "either", standardSecret, `{"type":"user.created","data":{"n":"%s"}}`, "msg_"},
}

// Per provider-issued type: the provider's delivery is refused and counted until the human sets
// its secret; then it is accepted and claimable and the minted secret no longer verifies; a
// wrongly signed one is refused, counted, and stores nothing. No secret is in any CLI output,
// MCP answer or log line.
func TestProviderIssuedSecrets(t *testing.T) {
	p := start(t, "SWITCHBOARD_LOG_LEVEL=debug")
	ep := p.vend("ann")
	s := p.session(ep)
	var answers, outputs, secrets []string
	for _, c := range providerCases {
		t.Run(c.source, func(t *testing.T) {
			hook := createHook(t, s, c.source)
			if hook.SecretIssuer != c.issuer || !strings.Contains(hook.NextStep, "switchboard webhook set-secret "+hook.ID) ||
				hook.SecretSource != "switchboard" {
				t.Fatalf("create_webhook %s: issuer %q source %q next_step %q", c.source, hook.SecretIssuer,
					hook.SecretSource, hook.NextStep)
			}
			provSecret := c.secret()
			secrets = append(secrets, provSecret, hook.Secret)
			n := randHex(4)
			body := []byte(strings.Replace(c.body, "%s", n, 1))
			id := ""
			if c.deliveryID != "" {
				id = c.deliveryID + n
			}
			signed := provider.Sign(c.source, []byte(provSecret), body, time.Now(), id, "")

			// Before the secret is set: refused, counted, nothing stored.
			if a := p.deliver(hook.token(), body, signed); a.status != http.StatusUnauthorized {
				t.Fatalf("provider-signed delivery before set-secret: %d %s", a.status, a.text)
			}
			w := waitRefusals(t, s, hook.ID, 1, &answers)
			if w.Refusals.Last == nil || w.Refusals.Last.Reason != "bad_signature" || w.Refusals.Last.DeliveryID != id {
				t.Fatalf("last refusal %+v, want bad_signature with delivery id %q", w.Refusals.Last, id)
			}
			if got := p.events(hook.ID); got != "0" {
				t.Fatalf("%s events stored for a refused delivery", got)
			}

			// The human sets the provider's secret, on stdin.
			outputs = append(outputs, p.setSecret(hook.ID, provSecret))
			if w := listHook(t, s, hook.ID, &answers); w.SecretSource != "provider" {
				t.Fatalf("secret_source %q after set-secret", w.SecretSource)
			}
			if a := p.deliver(hook.token(), body, signed); a.status != http.StatusAccepted {
				t.Fatalf("provider-signed delivery after set-secret: %d %s", a.status, a.text)
			}
			if c := claimNext(t, s); c.Empty || c.Todo.ID == "" {
				t.Fatal("the accepted delivery is not claimable")
			}

			// The minted secret no longer verifies, and neither does a wrong one.
			body2 := []byte(strings.Replace(c.body, "%s", randHex(4), 1))
			for i, sec := range []string{hook.Secret, c.secret()} {
				if a := p.deliver(hook.token(), body2, provider.Sign(c.source, []byte(sec), body2, time.Now(), id+"x", "")); a.status != http.StatusUnauthorized {
					t.Fatalf("delivery signed with secret %d after set-secret: %d %s", i, a.status, a.text)
				}
				waitRefusals(t, s, hook.ID, int64(2+i), &answers)
			}
			if got := p.events(hook.ID); got != "1" {
				t.Fatalf("%s events stored, want only the accepted one", got)
			}

			// rotate_webhook would cut the provider off: refused, naming the command to use.
			a := s.call("rotate_webhook", `{"webhook_id":"`+hook.ID+`"}`)
			answers = append(answers, a.text)
			if a.code != "invalid_argument" || !strings.Contains(a.text, "switchboard webhook set-secret "+hook.ID) {
				t.Fatalf("rotate_webhook with a provider secret: %s %s", a.code, a.text)
			}
		})
	}

	// /metrics counts the refusals by source type and reason.
	for _, c := range providerCases {
		series := `switchboard_ingest_refusals_total{reason="bad_signature",source="` + c.source + `"}`
		if got := metric(t, p, series); got != 3 {
			t.Errorf("%s = %v, want 3", series, got)
		}
	}
	// The operator's list names the refusals and whose secret is in force, never a secret.
	out, code := p.cli("", "webhook", "list", "--human", "ann")
	outputs = append(outputs, out)
	if code != 0 || !strings.Contains(out, "provider") || !strings.Contains(out, "bad_signature at ") {
		t.Fatalf("webhook list: exit %d\n%s", code, out)
	}
	out, _ = p.cli("", "webhook", "list", "--json")
	outputs = append(outputs, out)
	// Bad input answers one line with exit 2, not echoing the secret.
	bad := "whsec_" + randHex(20) + "!"
	out, code = p.cli(bad, "webhook", "set-secret", p.scalar(`SELECT id::text FROM switchboard.webhooks WHERE source_type = 'slack'`))
	outputs = append(outputs, out)
	secrets = append(secrets, bad)
	if code != 2 || strings.Count(out, "\n") != 1 {
		t.Fatalf("set-secret with a malformed secret: exit %d %q", code, out)
	}

	time.Sleep(200 * time.Millisecond)
	everything := strings.Join(append(append(answers, outputs...), p.logs.String()), "\n")
	for _, sec := range secrets {
		if strings.Contains(everything, sec[len(sec)-16:]) {
			t.Errorf("a secret (%.8s…) appears in a CLI output, MCP answer or log line", sec)
		}
	}
}

// Rotation: with --previous-ttl, deliveries signed with the old and the new secret are both
// accepted until the TTL ends; then only the new one is. Without it the old one stops at once.
func TestProviderSecretRotation(t *testing.T) {
	p := start(t)
	ep := p.vend("ann")
	s := p.session(ep)
	hook := createHook(t, s, "stripe")
	old, next, third := "whsec_"+randHex(16), "whsec_"+randHex(16), "whsec_"+randHex(16)
	p.setSecret(hook.ID, old)
	n := 0
	deliver := func(secret string) int {
		n++
		body := []byte(`{"id":"evt_rot` + strconv.Itoa(n) + `","type":"charge.succeeded"}`)
		return p.deliver(hook.token(), body, provider.Sign("stripe", []byte(secret), body, time.Now(), "", "")).status
	}
	if got := deliver(old); got != http.StatusAccepted {
		t.Fatalf("old secret before the rotation: %d", got)
	}
	const ttl = 3 * time.Second
	p.setSecret(hook.ID, next, "--previous-ttl", ttl.String())
	until := time.Now().Add(ttl)
	var answers []string
	if w := listHook(t, s, hook.ID, &answers); w.PreviousSecretUntil == "" {
		t.Fatal("list_webhooks does not say until when the previous secret verifies")
	}
	for _, sec := range []string{old, next, old, next} {
		if got := deliver(sec); got != http.StatusAccepted {
			t.Fatalf("within the TTL, a delivery signed with the %s secret: %d", map[string]string{old: "old", next: "new"}[sec], got)
		}
	}
	if time.Now().After(until) {
		t.Fatal("the deliveries within the TTL took longer than the TTL")
	}
	time.Sleep(time.Until(until) + 200*time.Millisecond)
	if got := deliver(old); got != http.StatusUnauthorized {
		t.Fatalf("old secret after the TTL: %d", got)
	}
	if got := deliver(next); got != http.StatusAccepted {
		t.Fatalf("new secret after the TTL: %d", got)
	}
	// Without --previous-ttl the secret in force stops at once, even in a server that holds the
	// webhook in its cache.
	p.setSecret(hook.ID, third)
	if got := deliver(next); got != http.StatusUnauthorized {
		t.Fatalf("previous secret after set-secret without a TTL: %d", got)
	}
	if got := deliver(third); got != http.StatusAccepted {
		t.Fatalf("the secret just set: %d", got)
	}
	if got := p.events(hook.ID); got != "7" {
		t.Fatalf("%s events stored, want the 7 accepted deliveries", got)
	}
}

// Stripe's own library agrees: a delivery signed as stripe-go signs one
// (webhook.GenerateTestSignedPayload) with a whsec_ secret set through the CLI verifies, and
// the signature our Sign makes passes stripe-go's own check.
func TestStripeLibraryAgrees(t *testing.T) {
	p := start(t)
	ep := p.vend("ann")
	s := p.session(ep)
	hook := createHook(t, s, "stripe")
	secret := "whsec_" + randHex(16)
	p.setSecret(hook.ID, secret)
	body := []byte(`{"id":"evt_lib1","object":"event","type":"payment_intent.succeeded","data":{"object":{}}}`)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: time.Now()})
	a := p.deliver(hook.token(), body, http.Header{"Stripe-Signature": {signed.Header}, "Content-Type": {"application/json"}})
	if a.status != http.StatusAccepted {
		t.Fatalf("stripe-go signed delivery: %d %s", a.status, a.text)
	}
	if c := claimNext(t, s); c.Empty {
		t.Fatal("the stripe-go signed delivery is not claimable")
	}
	ours := provider.Sign("stripe", []byte(secret), body, time.Now(), "", "")
	if err := webhook.ValidatePayload(body, ours.Get("Stripe-Signature"), secret); err != nil {
		t.Fatalf("stripe-go refuses our signature: %v", err)
	}
}

// metric reads one series of /metrics (0 when absent).
func metric(t *testing.T, p *proc, series string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", p.base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// Every reason is counted, and a sender holding only the ingest URL cannot make the server write
// per refused delivery: 400 wrongly signed deliveries are all counted, in at most one write per
// second (plus one) of the burst.
func TestRefusalsCountedAndCoalesced(t *testing.T) {
	p := start(t)
	p.exec(`UPDATE switchboard.settings SET value = 1024 WHERE key = 'ingest_max_body_slack'`)
	ep := p.vend("ann")
	s := p.session(ep)
	hook := createHook(t, s, "slack")
	sign := func(body []byte, at time.Time) http.Header {
		return provider.Sign("slack", []byte(hook.Secret), body, at, "", "")
	}
	body := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}`)
	if a := p.deliver(hook.token(), body, sign(body, time.Now().Add(-10*time.Minute))); a.status != http.StatusUnauthorized {
		t.Fatalf("stale delivery: %d", a.status)
	}
	big := []byte(`{"x":"` + strings.Repeat("a", 2048) + `"}`)
	if a := p.deliver(hook.token(), big, sign(big, time.Now())); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("large delivery: %d", a.status)
	}
	nested := []byte(`{"a":` + deep(100) + `}`)
	if a := p.deliver(hook.token(), nested, sign(nested, time.Now())); a.status != http.StatusUnprocessableEntity {
		t.Fatalf("nested delivery: %d", a.status)
	}
	var answers []string
	deadline := time.Now().Add(10 * time.Second)
	for w := listHook(t, s, hook.ID, &answers); ; w = listHook(t, s, hook.ID, &answers) {
		r := w.Refusals
		if r.StaleTimestamp == 1 && r.TooLarge == 1 && r.Unparseable == 1 && r.Total == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals %+v, want one of each but bad_signature", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, reason := range []string{"stale_timestamp", "too_large", "unparseable"} {
		if got := metric(t, p, `switchboard_ingest_refusals_total{reason="`+reason+`",source="slack"}`); got != 1 {
			t.Errorf("metric %s = %v, want 1", reason, got)
		}
	}

	writes := metric(t, p, "switchboard_ingest_refusal_writes_total")
	const n, workers = 400, 8
	start := time.Now()
	done := make(chan struct{})
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < n/workers; i++ {
				h := sign(body, time.Now())
				h.Set("X-Slack-Signature", "v0="+randHex(32))
				req, _ := http.NewRequest("POST", p.base+"/webhooks/w/"+hook.token(), bytes.NewReader(body))
				req.Header = h
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	for w := 0; w < workers; w++ {
		<-done
	}
	burst := time.Since(start)
	waitRefusals(t, s, hook.ID, n, &answers)
	made := metric(t, p, "switchboard_ingest_refusal_writes_total") - writes
	t.Logf("%d refused deliveries in %s: %v writes of their counts", n, burst.Round(time.Millisecond), made)
	if limit := burst.Seconds() + 2; made > limit {
		t.Fatalf("%v writes for a %s burst, want at most %.0f", made, burst, limit)
	}
	if got := p.events(hook.ID); got != "0" {
		t.Fatalf("%s events stored for refused deliveries", got)
	}
}
