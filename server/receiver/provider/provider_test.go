package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var (
	testSecret = []byte("whsec_0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab")
	testNow    = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
)

// tc is one Verify case. A nil want means success; check then inspects the verdict.
type tc struct {
	name   string
	header http.Header
	body   string
	secret []byte // nil means testSecret
	now    time.Time
	want   error
	check  func(t *testing.T, v Verdict)
}

func runCases(t *testing.T, source string, cases []tc) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			secret, now := c.secret, c.now
			if secret == nil {
				secret = testSecret
			}
			if now.IsZero() {
				now = testNow
			}
			v, err := Verify(source, secret, Request{Header: c.header, Body: []byte(c.body), Now: now})
			if err != c.want { // sentinels are returned bare, so == must work for callers
				t.Fatalf("err = %v (%s), want %v", err, v.VerifyDetail, c.want)
			}
			if err != nil {
				if v.Verified || v.DeliveryID != "" || v.EventType != "" || v.Title != "" {
					t.Fatalf("failed verdict leaks fields: %+v", v)
				}
				return
			}
			if c.check != nil {
				c.check(t, v)
			}
		})
	}
}

// with returns a copy of h with name set to value ("" deletes it).
func with(h http.Header, name, value string) http.Header {
	h = h.Clone()
	if value == "" {
		h.Del(name)
	} else {
		h.Set(name, value)
	}
	return h
}

func expect(t *testing.T, v Verdict, verified bool, detail, id, event, title string) {
	t.Helper()
	got := [5]string{strconv.FormatBool(v.Verified), v.VerifyDetail, v.DeliveryID, v.EventType, v.Title}
	want := [5]string{strconv.FormatBool(verified), detail, id, event, title}
	if got != want {
		t.Fatalf("verdict\n got %q\nwant %q", got, want)
	}
}

func hexMAC(secret []byte, s string) string { return hex.EncodeToString(mac(secret, []byte(s))) }

func TestTrustMode(t *testing.T) {
	for _, s := range Sources {
		want := ModeSigned
		if s == "generic" {
			want = ModeToken
		}
		if got := TrustMode(s); got != want {
			t.Errorf("TrustMode(%q) = %q, want %q", s, got, want)
		}
	}
	if got := TrustMode("gitlab"); got != "" {
		t.Errorf("unknown source has mode %q", got)
	}
	if _, err := Verify("gitlab", testSecret, Request{}); err != ErrUnknownSource {
		t.Errorf("unknown source: err = %v", err)
	}
}

func TestSignedSourcesNeedSecret(t *testing.T) {
	for _, s := range Sources {
		h := Sign(s, testSecret, []byte(`{}`), testNow, "d", "e")
		_, err := Verify(s, nil, Request{Header: h, Body: []byte(`{}`), Now: testNow})
		if s == "generic" {
			if err != nil {
				t.Errorf("generic with no secret: %v", err)
			}
			continue
		}
		if err != ErrNoSecret {
			t.Errorf("%s with no secret: err = %v, want ErrNoSecret", s, err)
		}
	}
}

func TestEmptyRequestNeverPanicsNorVerifies(t *testing.T) {
	for _, s := range Sources {
		v, err := Verify(s, testSecret, Request{})
		if s == "generic" {
			if err != nil || v.Verified {
				t.Errorf("generic: %+v %v", v, err)
			}
			continue
		}
		if err != ErrUnauthorized || v.Verified {
			t.Errorf("%s: %+v %v", s, v, err)
		}
	}
}

func TestGitHub(t *testing.T) {
	push := `{"ref":"refs/heads/main","repository":{"full_name":"octo/repo"}}`
	h := Sign("github", testSecret, []byte(push), testNow, "72d3162e-cc78-11e3", "push")
	pr := `{"action":"opened","number":42,"repository":{"full_name":"octo/repo"}}`
	issue := `{"action":"opened","issue":{"number":7},"repository":{"full_name":"octo/repo"}}`
	form := "payload=" + url.QueryEscape(push)
	long := strings.Repeat("d", 257)
	runCases(t, "github", []tc{
		{name: "valid push", header: h, body: push, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "hmac-sha256 ok", "72d3162e-cc78-11e3", "push", "github push: octo/repo")
		}},
		{name: "pull request number", header: Sign("github", testSecret, []byte(pr), testNow, "d", "pull_request"), body: pr,
			check: func(t *testing.T, v Verdict) {
				expect(t, v, true, "hmac-sha256 ok", "d", "pull_request", "github pull_request: octo/repo #42")
			}},
		{name: "issue number", header: Sign("github", testSecret, []byte(issue), testNow, "d", "issues"), body: issue,
			check: func(t *testing.T, v Verdict) {
				expect(t, v, true, "hmac-sha256 ok", "d", "issues", "github issues: octo/repo #7")
			}},
		{name: "form encoded payload", header: Sign("github", testSecret, []byte(form), testNow, "d", "push"), body: form,
			check: func(t *testing.T, v Verdict) {
				expect(t, v, true, "hmac-sha256 ok", "d", "push", "github push: octo/repo")
			}},
		{name: "no repository degrades", header: Sign("github", testSecret, []byte(`[]`), testNow, "", "push"), body: `[]`,
			check: func(t *testing.T, v Verdict) { expect(t, v, true, "hmac-sha256 ok", "", "push", "github push") }},
		{name: "no event no id", header: Sign("github", testSecret, []byte(`x`), testNow, "", ""), body: `x`,
			check: func(t *testing.T, v Verdict) { expect(t, v, true, "hmac-sha256 ok", "", "", "github") }},
		{name: "oversized delivery id falls back to body hash", header: Sign("github", testSecret, []byte(push), testNow, long, "push"), body: push,
			check: func(t *testing.T, v Verdict) {
				if v.DeliveryID != "" {
					t.Fatalf("DeliveryID = %q", v.DeliveryID)
				}
			}},
		{name: "uppercase hex is still hex", header: with(h, "X-Hub-Signature-256", "sha256="+strings.ToUpper(hexMAC(testSecret, push))), body: push},
		{name: "tampered body", header: h, body: push + " ", want: ErrUnauthorized},
		{name: "wrong secret", header: h, body: push, secret: []byte("whsec_other"), want: ErrUnauthorized},
		{name: "secret without prefix is a different key", header: h, body: push, secret: testSecret[len("whsec_"):], want: ErrUnauthorized},
		{name: "missing header", header: with(h, "X-Hub-Signature-256", ""), body: push, want: ErrUnauthorized},
		{name: "sha1 header alone is not enough", header: with(with(h, "X-Hub-Signature-256", ""), "X-Hub-Signature", "sha1=00"), body: push, want: ErrUnauthorized},
		{name: "missing prefix", header: with(h, "X-Hub-Signature-256", hexMAC(testSecret, push)), body: push, want: ErrUnauthorized},
		{name: "wrong prefix", header: with(h, "X-Hub-Signature-256", "sha1="+hexMAC(testSecret, push)), body: push, want: ErrUnauthorized},
		{name: "empty hex", header: with(h, "X-Hub-Signature-256", "sha256="), body: push, want: ErrUnauthorized},
		{name: "bad hex", header: with(h, "X-Hub-Signature-256", "sha256=zz"+hexMAC(testSecret, push)[2:]), body: push, want: ErrUnauthorized},
		{name: "truncated mac", header: with(h, "X-Hub-Signature-256", "sha256="+hexMAC(testSecret, push)[:62]), body: push, want: ErrUnauthorized},
		{name: "duplicate signature headers", header: func() http.Header {
			d := h.Clone()
			d.Add("X-Hub-Signature-256", "sha256=00")
			return d
		}(), body: push, want: ErrUnauthorized},
	})
}

func TestGitea(t *testing.T) {
	body := `{"number":3,"repository":{"full_name":"team/app"}}`
	h := Sign("gitea", testSecret, []byte(body), testNow, "g-1", "pull_request")
	runCases(t, "gitea", []tc{
		{name: "valid", header: h, body: body, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "hmac-sha256 ok", "g-1", "pull_request", "gitea pull_request: team/app #3")
		}},
		{name: "github-style prefix is malformed", header: with(h, "X-Gitea-Signature", "sha256="+hexMAC(testSecret, body)), body: body, want: ErrUnauthorized},
		{name: "tampered body", header: h, body: `{"number":4,"repository":{"full_name":"team/app"}}`, want: ErrUnauthorized},
		{name: "wrong secret", header: h, body: body, secret: []byte("whsec_x"), want: ErrUnauthorized},
		{name: "missing header", header: with(h, "X-Gitea-Signature", ""), body: body, want: ErrUnauthorized},
		{name: "bad hex", header: with(h, "X-Gitea-Signature", "not-hex"), body: body, want: ErrUnauthorized},
		{name: "github header does not count", header: with(with(h, "X-Gitea-Signature", ""), "X-Hub-Signature-256", "sha256="+hexMAC(testSecret, body)), body: body, want: ErrUnauthorized},
	})
}

func stripeHeader(secret []byte, t int64, body string) string {
	ts := strconv.FormatInt(t, 10)
	return "t=" + ts + ",v1=" + hexMAC(secret, ts+"."+body)
}

func TestStripe(t *testing.T) {
	body := `{"id":"evt_1NG8Du2eZvKYlo2C","object":"event","type":"invoice.paid"}`
	now := testNow.Unix()
	sig := func(h string) http.Header { return http.Header{"Stripe-Signature": {h}} }
	good := stripeHeader(testSecret, now, body)
	goodHex := good[strings.Index(good, "v1=")+3:]
	ts := strconv.FormatInt(now, 10)
	runCases(t, "stripe", []tc{
		{name: "valid", header: Sign("stripe", testSecret, []byte(body), testNow, "", ""), body: body, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "stripe v1 hmac-sha256 ok", "evt_1NG8Du2eZvKYlo2C", "invoice.paid", "stripe invoice.paid")
		}},
		{name: "any v1 may match", header: sig("t=" + ts + ",v1=" + hexMAC([]byte("whsec_old"), ts+"."+body) + ",v1=" + goodHex), body: body},
		{name: "undecodable v1 beside a good one", header: sig("t=" + ts + ",v1=zz,v1=" + goodHex), body: body},
		{name: "v0 is ignored", header: sig(good + ",v0=deadbeef"), body: body},
		{name: "window edge past", header: sig(stripeHeader(testSecret, now-300, body)), body: body},
		{name: "window edge future", header: sig(stripeHeader(testSecret, now+300, body)), body: body},
		{name: "no id uses body hash", header: sig(stripeHeader(testSecret, now, `{"type":"ping"}`)), body: `{"type":"ping"}`,
			check: func(t *testing.T, v Verdict) {
				expect(t, v, true, "stripe v1 hmac-sha256 ok", "", "ping", "stripe ping")
			}},
		{name: "case-different key is not id", header: sig(stripeHeader(testSecret, now, `{"ID":"x"}`)), body: `{"ID":"x"}`,
			check: func(t *testing.T, v Verdict) { expect(t, v, true, "stripe v1 hmac-sha256 ok", "", "", "stripe") }},
		{name: "stale", header: sig(stripeHeader(testSecret, now-301, body)), body: body, want: ErrUnauthorized},
		{name: "future", header: sig(stripeHeader(testSecret, now+301, body)), body: body, want: ErrUnauthorized},
		{name: "tampered body", header: sig(good), body: strings.Replace(body, "paid", "void", 1), want: ErrUnauthorized},
		{name: "timestamp swapped after signing", header: sig("t=" + strconv.FormatInt(now+1, 10) + ",v1=" + goodHex), body: body, want: ErrUnauthorized},
		{name: "wrong secret", header: sig(good), body: body, secret: []byte("whsec_x"), want: ErrUnauthorized},
		{name: "missing header", header: http.Header{}, body: body, want: ErrUnauthorized},
		{name: "no t", header: sig("v1=" + goodHex), body: body, want: ErrUnauthorized},
		{name: "no v1", header: sig("t=" + ts + ",v0=" + goodHex), body: body, want: ErrUnauthorized},
		{name: "two t", header: sig("t=" + ts + ",t=" + ts + ",v1=" + goodHex), body: body, want: ErrUnauthorized},
		{name: "signed t not a number", header: sig("t=1e9,v1=" + hexMAC(testSecret, "1e9."+body)), body: body, want: ErrUnauthorized},
		{name: "negative t", header: sig("t=-5,v1=" + hexMAC(testSecret, "-5."+body)), body: body, want: ErrUnauthorized},
		{name: "item without =", header: sig(good + ",junk"), body: body, want: ErrUnauthorized},
		{name: "garbage", header: sig("garbage"), body: body, want: ErrUnauthorized},
		{name: "signed non-json body", header: sig(stripeHeader(testSecret, now, "hello")), body: "hello", want: ErrUnauthorized},
		{name: "signed json array", header: sig(stripeHeader(testSecret, now, "[]")), body: "[]", want: ErrUnauthorized},
	})
}

func slackHeaders(secret []byte, ts, body string) http.Header {
	return http.Header{
		"X-Slack-Signature":         {"v0=" + hexMAC(secret, "v0:"+ts+":"+body)},
		"X-Slack-Request-Timestamp": {ts},
	}
}

func TestSlack(t *testing.T) {
	body := `{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","text":"hi"}}`
	ts := strconv.FormatInt(testNow.Unix(), 10)
	h := slackHeaders(testSecret, ts, body)
	stale := strconv.FormatInt(testNow.Unix()-301, 10)
	form := "command=%2Fdeploy&text=prod"
	runCases(t, "slack", []tc{
		{name: "valid event callback", header: h, body: body, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "slack v0 hmac-sha256 ok", "Ev1", "app_mention", "slack app_mention")
			if v.Handshake || v.Challenge != "" {
				t.Fatalf("an event is no handshake: %+v", v)
			}
		}},
		{name: "url verification", header: slackHeaders(testSecret, ts, `{"type":"url_verification","challenge":"c"}`), body: `{"type":"url_verification","challenge":"c"}`,
			check: func(t *testing.T, v Verdict) {
				expect(t, v, true, "slack v0 hmac-sha256 ok", "", "url_verification", "slack url_verification")
				if !v.Handshake || v.Challenge != "c" {
					t.Fatalf("handshake %v, challenge %q", v.Handshake, v.Challenge)
				}
			}},
		{name: "url verification with an unusable challenge answers empty", header: slackHeaders(testSecret, ts, `{"type":"url_verification","challenge":"a\nb"}`),
			body: `{"type":"url_verification","challenge":"a\nb"}`,
			check: func(t *testing.T, v Verdict) {
				if !v.Handshake || v.Challenge != "" {
					t.Fatalf("handshake %v, challenge %q", v.Handshake, v.Challenge)
				}
			}},
		{name: "unsigned url verification", header: with(h, "X-Slack-Signature", ""), body: `{"type":"url_verification","challenge":"c"}`, want: ErrUnauthorized},
		{name: "event callback without inner type", header: slackHeaders(testSecret, ts, `{"type":"event_callback"}`), body: `{"type":"event_callback"}`,
			check: func(t *testing.T, v Verdict) {
				expect(t, v, true, "slack v0 hmac-sha256 ok", "", "event_callback", "slack event_callback")
			}},
		{name: "signed form body", header: slackHeaders(testSecret, ts, form), body: form,
			check: func(t *testing.T, v Verdict) { expect(t, v, true, "slack v0 hmac-sha256 ok", "", "", "slack") }},
		{name: "stale", header: slackHeaders(testSecret, stale, body), body: body, want: ErrUnauthorized},
		{name: "future", header: slackHeaders(testSecret, strconv.FormatInt(testNow.Unix()+301, 10), body), body: body, want: ErrUnauthorized},
		{name: "timestamp swapped after signing", header: with(h, "X-Slack-Request-Timestamp", strconv.FormatInt(testNow.Unix()-1, 10)), body: body, want: ErrUnauthorized},
		{name: "tampered body", header: h, body: body[1:], want: ErrUnauthorized},
		{name: "wrong secret", header: h, body: body, secret: []byte("whsec_x"), want: ErrUnauthorized},
		{name: "missing signature", header: with(h, "X-Slack-Signature", ""), body: body, want: ErrUnauthorized},
		{name: "missing timestamp", header: with(h, "X-Slack-Request-Timestamp", ""), body: body, want: ErrUnauthorized},
		{name: "malformed signature", header: with(h, "X-Slack-Signature", "v1="+hexMAC(testSecret, "v0:"+ts+":"+body)), body: body, want: ErrUnauthorized},
		{name: "malformed timestamp", header: slackHeaders(testSecret, ts+".5", body), body: body, want: ErrUnauthorized},
	})
}

func cairnBody(id, created, extra string) string {
	return `{"event_id":"` + id + `","kind":"artifact.created","created_at":"` + created + `"` + extra + `}`
}

func TestCairn(t *testing.T) {
	now := testNow.Format(time.RFC3339)
	body := cairnBody("ce_1", now, `,"title":"Q3 report","share_type":"public"`)
	signed := func(b, id string) http.Header { return Sign("cairn", testSecret, []byte(b), testNow, id, "") }
	nested := cairnBody("ce_2", now, `,"title":"Notes","share":{"type":"friends"}`)
	bare := cairnBody("ce_3", now, "")
	noID := `{"kind":"artifact.created","created_at":"` + now + `"}`
	emptyID := cairnBody("", now, "")
	numID := `{"event_id":5,"kind":"k","created_at":"` + now + `"}`
	staleB := cairnBody("ce_4", testNow.Add(-301*time.Second).Format(time.RFC3339), "")
	futureB := cairnBody("ce_5", testNow.Add(301*time.Second).Format(time.RFC3339), "")
	edgeB := cairnBody("ce_6", testNow.Add(-300*time.Second).Format(time.RFC3339Nano), "")
	badTime := cairnBody("ce_7", "yesterday", "")
	noTime := `{"event_id":"ce_8","kind":"k"}`
	runCases(t, "cairn", []tc{
		{name: "valid", header: signed(body, "ce_1"), body: body, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "cairn hmac-sha256 ok", "ce_1", "artifact.created", "cairn artifact.created: Q3 report (public)")
		}},
		{name: "no header id is fine", header: signed(body, ""), body: body},
		{name: "nested share type", header: signed(nested, ""), body: nested, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "cairn hmac-sha256 ok", "ce_2", "artifact.created", "cairn artifact.created: Notes (friends)")
		}},
		{name: "no title degrades", header: signed(bare, ""), body: bare, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "cairn hmac-sha256 ok", "ce_3", "artifact.created", "cairn artifact.created")
		}},
		{name: "window edge", header: signed(edgeB, ""), body: edgeB},
		{name: "missing event_id", header: signed(noID, ""), body: noID, want: ErrUnauthorized},
		{name: "empty event_id", header: signed(emptyID, ""), body: emptyID, want: ErrUnauthorized},
		{name: "numeric event_id", header: signed(numID, ""), body: numID, want: ErrUnauthorized},
		{name: "header id mismatch", header: signed(body, "ce_other"), body: body, want: ErrUnauthorized},
		{name: "empty header id present", header: func() http.Header {
			h := signed(body, "")
			h["X-Cairn-Event-Id"] = []string{""}
			return h
		}(), body: body, want: ErrUnauthorized},
		{name: "stale", header: signed(staleB, ""), body: staleB, want: ErrUnauthorized},
		{name: "future", header: signed(futureB, ""), body: futureB, want: ErrUnauthorized},
		{name: "bad created_at", header: signed(badTime, ""), body: badTime, want: ErrUnauthorized},
		{name: "missing created_at", header: signed(noTime, ""), body: noTime, want: ErrUnauthorized},
		{name: "signed non-json", header: signed("nope", ""), body: "nope", want: ErrUnauthorized},
		{name: "forged body fields under a bad mac", header: signed(body, "ce_1"), body: cairnBody("ce_9", now, ""), want: ErrUnauthorized},
		{name: "wrong secret", header: signed(body, ""), body: body, secret: []byte("whsec_x"), want: ErrUnauthorized},
		{name: "missing signature", header: http.Header{"X-Cairn-Event-Id": {"ce_1"}}, body: body, want: ErrUnauthorized},
		{name: "malformed signature", header: http.Header{"X-Cairn-Signature": {hexMAC(testSecret, body)}}, body: body, want: ErrUnauthorized},
	})
}

func TestGeneric(t *testing.T) {
	long := strings.Repeat("x", 257)
	max := strings.Repeat("y", 256)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	runCases(t, "generic", []tc{
		{name: "delivery id and event", header: h("X-Delivery-Id", "del-1", "Webhook-Id", "wh-1", "X-Event-Type", "order.created"), body: `{}`,
			check: func(t *testing.T, v Verdict) {
				if v.TrustMode != ModeToken {
					t.Fatalf("TrustMode = %q", v.TrustMode)
				}
				expect(t, v, false, "ingest token", "del-1", "order.created", "generic delivery: order.created")
			}},
		{name: "webhook-id fallback", header: h("Webhook-Id", "msg_2"), body: `x`,
			check: func(t *testing.T, v Verdict) { expect(t, v, false, "ingest token", "msg_2", "", "generic delivery") }},
		{name: "long delivery id falls back to webhook-id", header: h("X-Delivery-Id", long, "Webhook-Id", "msg_3"), body: `x`,
			check: func(t *testing.T, v Verdict) { expect(t, v, false, "ingest token", "msg_3", "", "generic delivery") }},
		{name: "long ids fall back to body hash", header: h("X-Delivery-Id", long, "Webhook-Id", long), body: `x`,
			check: func(t *testing.T, v Verdict) { expect(t, v, false, "ingest token", "", "", "generic delivery") }},
		{name: "256 bytes is allowed", header: h("Webhook-Id", max), body: `x`,
			check: func(t *testing.T, v Verdict) { expect(t, v, false, "ingest token", max, "", "generic delivery") }},
		{name: "invalid utf-8 id is not an id", header: h("X-Delivery-Id", "a\xffb"), body: `x`,
			check: func(t *testing.T, v Verdict) { expect(t, v, false, "ingest token", "", "", "generic delivery") }},
		{name: "no headers", header: nil, body: ``,
			check: func(t *testing.T, v Verdict) { expect(t, v, false, "ingest token", "", "", "generic delivery") }},
		{name: "signature headers do not make it verified", header: Sign("github", testSecret, []byte(`{}`), testNow, "d", "push"), body: `{}`,
			check: func(t *testing.T, v Verdict) { expect(t, v, false, "ingest token", "", "", "generic delivery") }},
	})
}

func TestTitlesAreOneShortLine(t *testing.T) {
	nasty := "line1\r\nline2\tx" + strings.Repeat("é", 300)
	body := `{"event_id":"ce","kind":"k\nk","created_at":"` + testNow.Format(time.RFC3339) + `","title":"` +
		strings.ReplaceAll(strings.ReplaceAll(nasty, "\r", `\r`), "\n", `\n`) + `","share_type":"public"}`
	body = strings.ReplaceAll(body, "\t", `\t`)
	v, err := Verify("cairn", testSecret, Request{Header: Sign("cairn", testSecret, []byte(body), testNow, "", ""), Body: []byte(body), Now: testNow})
	if err != nil {
		t.Fatal(err, v.VerifyDetail)
	}
	assertTitle(t, v.Title)
	if !strings.HasPrefix(v.Title, "cairn k k: line1  line2 x") || !strings.HasSuffix(v.Title, " (public)") {
		t.Fatalf("title = %q", v.Title)
	}
	if v.EventType != "k k" {
		t.Fatalf("event type = %q", v.EventType)
	}
	h := http.Header{"X-Event-Type": {strings.Repeat("ü", 300) + "\xff"}}
	g, _ := Verify("generic", nil, Request{Header: h})
	assertTitle(t, g.Title)
}

func assertTitle(t *testing.T, title string) {
	t.Helper()
	if len(title) > maxTitle || strings.ContainsAny(title, "\r\n") || !utf8.ValidString(title) {
		t.Fatalf("bad title (%d bytes): %q", len(title), title)
	}
}

func TestIdempotencyKey(t *testing.T) {
	body := []byte(`{"a":1}`)
	if got := IdempotencyKey("wh_1", Verdict{DeliveryID: "d-9"}, body); got != "wh_1:d-9" {
		t.Errorf("with id: %q", got)
	}
	sum := sha256.Sum256(body)
	if got, want := IdempotencyKey("wh_1", Verdict{}, body), "wh_1:"+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("body hash: %q, want %q", got, want)
	}
}

func TestSanitizeHeaders(t *testing.T) {
	listed := []string{"X-Hub-Signature", "X-Hub-Signature-256", "X-Gitea-Signature", "Stripe-Signature",
		"X-Slack-Signature", "X-Cairn-Signature", "Authorization", "Cookie", "X-Api-Key"}
	h := http.Header{}
	for _, name := range listed {
		h.Set(name, "s3cret-"+name)
	}
	h["x-api-key"] = []string{"lowercase-raw-key"} // non-canonical key straight into the map
	h.Add("Accept", "a")
	h.Add("Accept", "b")
	h["accept"] = []string{"c"}
	h.Set("X-GitHub-Event", "push")
	h.Set("X-Gitlab-Token", "tok")

	got := SanitizeHeaders(h)
	for _, name := range listed {
		if v := got[strings.ToLower(name)]; v != Redacted {
			t.Errorf("%s = %q, want redacted", name, v)
		}
	}
	for k, v := range got {
		if k != strings.ToLower(k) {
			t.Errorf("name %q not lower-cased", k)
		}
		if strings.Contains(v, "s3cret") || strings.Contains(v, "raw-key") || v == "tok" {
			t.Errorf("%s leaks %q", k, v)
		}
	}
	if got["accept"] != "a, b, c" || got["x-github-event"] != "push" || got["x-gitlab-token"] != Redacted {
		t.Errorf("got %v", got)
	}
	if len(SanitizeHeaders(nil)) != 0 {
		t.Error("nil header")
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	bodies := map[string]string{
		"github":   `{"repository":{"full_name":"o/r"}}`,
		"gitea":    `{"repository":{"full_name":"o/r"}}`,
		"stripe":   `{"id":"evt_9","type":"charge.succeeded"}`,
		"slack":    `{"type":"event_callback","event":{"type":"message"}}`,
		"cairn":    cairnBody("ce_rt", testNow.Format(time.RFC3339), `,"title":"T"`),
		"standard": `{"type":"invoice.paid","data":{}}`,
		"generic":  `{"anything":true}`,
	}
	wantID := map[string]string{"github": "dlv", "gitea": "dlv", "stripe": "evt_9", "slack": "", "cairn": "ce_rt",
		"standard": "dlv", "generic": "dlv"}
	for _, s := range Sources {
		secret := testSecret
		if s == "generic" {
			secret = nil
		}
		id := "dlv"
		if s == "cairn" {
			id = "ce_rt"
		}
		h := Sign(s, secret, []byte(bodies[s]), testNow, id, "push")
		v, err := Verify(s, secret, Request{Header: h, Body: []byte(bodies[s]), Now: testNow.Add(299 * time.Second)})
		if err != nil {
			t.Errorf("%s: %v (%s)", s, err, v.VerifyDetail)
			continue
		}
		if v.Verified != (TrustMode(s) == ModeSigned) || v.TrustMode != TrustMode(s) || v.DeliveryID != wantID[s] {
			t.Errorf("%s: %+v", s, v)
		}
		if h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: no content type", s)
		}
	}
	if len(Sign("gitlab", testSecret, nil, testNow, "d", "e")) != 0 {
		t.Error("unknown source got headers")
	}
}

func TestFailureDetailNamesReasonNotSecret(t *testing.T) {
	body := `{"id":"evt"}`
	h := http.Header{"Stripe-Signature": {stripeHeader(testSecret, testNow.Unix()-1000, body)}}
	v, err := Verify("stripe", testSecret, Request{Header: h, Body: []byte(body), Now: testNow})
	if !errors.Is(err, ErrUnauthorized) || v.VerifyDetail != string(errStale) {
		t.Fatalf("%v %q", err, v.VerifyDetail)
	}
}
