package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The published vector of the Standard Webhooks reference libraries (libraries/go
// webhook_symmetric_test.go, TestSymmetricWebhookSign, and the same values in the other languages).
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTS     = "1614265330"
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vectorHeaders(sig string) http.Header {
	return http.Header{"Webhook-Id": {vectorID}, "Webhook-Timestamp": {vectorTS}, "Webhook-Signature": {sig}}
}

// standardSig signs the spec's way, independently of the verifier: the key is the base64 after whsec_.
func standardSig(secret, id, ts, body string) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestStandardPublishedVector(t *testing.T) {
	if got := standardSig(vectorSecret, vectorID, vectorTS, vectorBody); got != vectorSig {
		t.Fatalf("test helper disagrees with the vector: %s", got)
	}
	at := time.Unix(1614265330, 0)
	v, err := Verify("standard", []byte(vectorSecret), Request{Header: vectorHeaders(vectorSig), Body: []byte(vectorBody), Now: at})
	if err != nil {
		t.Fatalf("vector refused: %v (%s)", err, v.VerifyDetail)
	}
	expect(t, v, true, "standard webhooks v1 hmac-sha256 ok", vectorID, "", "webhook")
	// The reference libraries accept the secret without its prefix too.
	if _, err := Verify("standard", []byte(strings.TrimPrefix(vectorSecret, "whsec_")),
		Request{Header: vectorHeaders(vectorSig), Body: []byte(vectorBody), Now: at}); err != nil {
		t.Fatalf("unprefixed secret: %v", err)
	}
	// Sign (used by demos and benchmarks) produces the vector's signature.
	if h := Sign("standard", []byte(vectorSecret), []byte(vectorBody), at, vectorID, ""); h.Get("Webhook-Signature") != vectorSig {
		t.Fatalf("Sign = %q", h.Get("Webhook-Signature"))
	}
}

func TestStandard(t *testing.T) {
	secret := NewStandardSecret()
	other := NewStandardSecret()
	body := `{"type":"user.created","timestamp":"2026-03-04T05:06:07Z","data":{"id":"u_1"}}`
	ts := strconv.FormatInt(testNow.Unix(), 10)
	good := standardSig(secret, "msg_1", ts, body)
	old := standardSig(other, "msg_1", ts, body)
	h := http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {good}}
	at := func(d time.Duration) http.Header {
		s := strconv.FormatInt(testNow.Add(d).Unix(), 10)
		return http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {s}, "Webhook-Signature": {standardSig(secret, "msg_1", s, body)}}
	}
	sec := []byte(secret)
	runCases(t, "standard", []tc{
		{name: "valid", header: h, body: body, secret: sec, check: func(t *testing.T, v Verdict) {
			expect(t, v, true, "standard webhooks v1 hmac-sha256 ok", "msg_1", "user.created", "webhook user.created")
		}},
		{name: "rotation: old and new listed, new secret", header: with(h, "Webhook-Signature", old+" "+good), body: body, secret: sec},
		{name: "rotation: only the old one listed", header: with(h, "Webhook-Signature", old), body: body, secret: sec, want: ErrUnauthorized},
		{name: "other schemes are skipped", header: with(h, "Webhook-Signature", "v1a,AAAA v2,"+good[3:]+" "+good), body: body, secret: sec},
		{name: "only other schemes", header: with(h, "Webhook-Signature", "v1a,"+good[3:]), body: body, secret: sec, want: ErrUnauthorized},
		{name: "4m59s old", header: at(-299 * time.Second), body: body, secret: sec},
		{name: "6 minutes old", header: at(-6 * time.Minute), body: body, secret: sec, want: ErrUnauthorized},
		{name: "6 minutes ahead", header: at(6 * time.Minute), body: body, secret: sec, want: ErrUnauthorized},
		{name: "tampered body", header: h, body: body + " ", secret: sec, want: ErrUnauthorized},
		{name: "wrong secret", header: h, body: body, secret: []byte(other), want: ErrUnauthorized},
		{name: "secret that is not base64", header: h, body: body, secret: []byte("whsec_not base64!"), want: ErrUnauthorized},
		{name: "the secret string itself is not the key", header: with(h, "Webhook-Signature",
			"v1,"+base64.StdEncoding.EncodeToString(mac(sec, []byte("msg_1."+ts+"."+body)))), body: body, secret: sec, want: ErrUnauthorized},
		{name: "missing signature", header: with(h, "Webhook-Signature", ""), body: body, secret: sec, want: ErrUnauthorized},
		{name: "missing id", header: with(h, "Webhook-Id", ""), body: body, secret: sec, want: ErrUnauthorized},
		{name: "missing timestamp", header: with(h, "Webhook-Timestamp", ""), body: body, secret: sec, want: ErrUnauthorized},
		{name: "id swapped after signing", header: with(h, "Webhook-Id", "msg_2"), body: body, secret: sec, want: ErrUnauthorized},
		{name: "timestamp swapped after signing", header: with(h, "Webhook-Timestamp", strconv.FormatInt(testNow.Unix()-1, 10)), body: body, secret: sec, want: ErrUnauthorized},
		{name: "empty v1", header: with(h, "Webhook-Signature", "v1,"), body: body, secret: sec, want: ErrUnauthorized},
		{name: "bad base64", header: with(h, "Webhook-Signature", "v1,!!"), body: body, secret: sec, want: ErrUnauthorized},
		{name: "fractional timestamp", header: with(h, "Webhook-Timestamp", ts+".0"), body: body, secret: sec, want: ErrUnauthorized},
		{name: "two signature headers", header: func() http.Header {
			d := h.Clone()
			d.Add("Webhook-Signature", good)
			return d
		}(), body: body, secret: sec, want: ErrUnauthorized},
		{name: "non-JSON body is verified, without type", header: http.Header{"Webhook-Id": {"m"}, "Webhook-Timestamp": {ts},
			"Webhook-Signature": {standardSig(secret, "m", ts, "x")}}, body: "x", secret: sec,
			check: func(t *testing.T, v Verdict) {
				expect(t, v, true, "standard webhooks v1 hmac-sha256 ok", "m", "", "webhook")
			}},
	})
}

func TestNewStandardSecret(t *testing.T) {
	a, b := NewStandardSecret(), NewStandardSecret()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if !strings.HasPrefix(a, "whsec_") || err != nil || len(key) != 32 || a == b {
		t.Fatalf("%q %q %v", a, b, err)
	}
}

func TestHandshakes(t *testing.T) {
	ping := `{"zen":"Keep it logically awesome.","hook_id":1,"hook":{"type":"Repository"}}`
	for _, source := range []string{"github", "gitea"} {
		for event, want := range map[string]bool{"ping": true, "push": false} {
			h := Sign(source, testSecret, []byte(ping), testNow, "d", event)
			v, err := Verify(source, testSecret, Request{Header: h, Body: []byte(ping), Now: testNow})
			if err != nil || v.Handshake != want || v.Challenge != "" {
				t.Errorf("%s %s: %+v %v", source, event, v, err)
			}
		}
	}
	// A ping that is not signed by the hook's secret is refused like any delivery.
	h := Sign("github", []byte("whsec_other"), []byte(ping), testNow, "d", "ping")
	if _, err := Verify("github", testSecret, Request{Header: h, Body: []byte(ping), Now: testNow}); err != ErrUnauthorized {
		t.Errorf("unsigned ping: %v", err)
	}
}

// Svix-based senders that have not bought the webhook- header names (Clerk, Resend) send the
// same scheme under svix-id, svix-timestamp and svix-signature: the published vector verifies
// under those names too, and a webhook- header, when sent, is the one read.
func TestStandardSvixHeaderNames(t *testing.T) {
	now := time.Unix(1614265330, 0)
	svix := http.Header{"Svix-Id": {vectorID}, "Svix-Timestamp": {vectorTS}, "Svix-Signature": {vectorSig}}
	v, err := Verify("standard", []byte(vectorSecret), Request{Header: svix, Body: []byte(vectorBody), Now: now})
	if err != nil || !v.Verified || v.DeliveryID != vectorID {
		t.Fatalf("svix- names: %+v %v", v, err)
	}
	svix.Set("Webhook-Signature", "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if _, err := Verify("standard", []byte(vectorSecret), Request{Header: svix, Body: []byte(vectorBody), Now: now}); err != ErrUnauthorized {
		t.Fatalf("a wrong webhook-signature beside a right svix-signature: %v", err)
	}
}
