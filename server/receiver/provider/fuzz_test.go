package provider

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The fuzzers share one secret and one clock (testSecret, testNow) so that seeds carrying a valid
// signature stay valid: mutating from a passing input is what reaches the post-MAC code.
//
// The property throughout: Verify never panics, and it never answers Verified / nil error unless
// the MAC recomputed here with the real secret matches what the input carried.

// checkVerdict asserts what holds for every Verify outcome, whatever the input.
func checkVerdict(t *testing.T, source string, v Verdict, err error) {
	t.Helper()
	if err != nil {
		if err != ErrUnauthorized {
			t.Fatalf("unexpected error %v", err)
		}
		if v.Verified || v.DeliveryID != "" || v.Title != "" || v.EventType != "" {
			t.Fatalf("failed verdict leaks fields: %+v", v)
		}
		return
	}
	if v.TrustMode != TrustMode(source) || v.Verified != (v.TrustMode == ModeSigned) {
		t.Fatalf("trust: %+v", v)
	}
	if len(v.DeliveryID) > maxDeliveryID || !utf8.ValidString(v.DeliveryID) {
		t.Fatalf("bad delivery id %q", v.DeliveryID)
	}
	if len(v.EventType) > maxEventType || !utf8.ValidString(v.EventType) || strings.ContainsAny(v.EventType, "\r\n") {
		t.Fatalf("bad event type %q", v.EventType)
	}
	assertTitle(t, v.Title)
}

// hexEqualsMAC is the oracle: does this hex text decode to the MAC of parts under testSecret?
func hexEqualsMAC(hexSig string, parts ...string) bool {
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	b := make([][]byte, len(parts))
	for i, p := range parts {
		b[i] = []byte(p)
	}
	return hmac.Equal(got, mac(testSecret, b...))
}

// seeds are shared by f.Add and by the testdata/fuzz writer below.
type seeds func() [][]any

func addSeeds(f *testing.F, s seeds) {
	for _, args := range s() {
		f.Add(args...)
	}
}

func forgeSeeds(source string) seeds {
	return func() [][]any {
		body := `{"number":1,"repository":{"full_name":"o/r"}}`
		sig := Sign(source, testSecret, []byte(body), testNow, "", "")
		good := sig.Get("X-Hub-Signature-256") + sig.Get("X-Gitea-Signature")
		return [][]any{
			{good, "delivery-1", "pull_request", []byte(body)},
			{"sha256=" + strings.Repeat("0", 64), "", "push", []byte(body)},
			{"sha256=zz", strings.Repeat("d", 300), "", []byte("payload=%7B%7D")},
			{"", "", "", []byte(nil)},
		}
	}
}

func fuzzForge(f *testing.F, source, sigHeader, prefix, idHeader, eventHeader string) {
	addSeeds(f, forgeSeeds(source))
	f.Fuzz(func(t *testing.T, sig, delivery, event string, body []byte) {
		h := http.Header{sigHeader: {sig}, idHeader: {delivery}, eventHeader: {event}}
		v, err := Verify(source, testSecret, Request{Header: h, Body: body, Now: testNow})
		checkVerdict(t, source, v, err)
		if err != nil {
			return
		}
		hexSig, ok := strings.CutPrefix(sig, prefix)
		if !ok || !hexEqualsMAC(hexSig, string(body)) {
			t.Fatalf("verified without a matching MAC: %q", sig)
		}
		if v.DeliveryID != "" && v.DeliveryID != delivery {
			t.Fatalf("delivery id %q not from header %q", v.DeliveryID, delivery)
		}
	})
}

func FuzzGitHubHeader(f *testing.F) {
	fuzzForge(f, "github", "X-Hub-Signature-256", "sha256=", "X-Github-Delivery", "X-Github-Event")
}

func FuzzGiteaHeader(f *testing.F) {
	fuzzForge(f, "gitea", "X-Gitea-Signature", "", "X-Gitea-Delivery", "X-Gitea-Event")
}

func stripeSeeds() [][]any {
	body := `{"id":"evt_1","type":"invoice.paid"}`
	good := Sign("stripe", testSecret, []byte(body), testNow, "", "").Get("Stripe-Signature")
	return [][]any{
		{good, []byte(body), testNow.Unix()},
		{good + ",v1=00,v0=11", []byte(body), testNow.Unix() + 300},
		{"t=1,v1=zz", []byte(body), int64(1)},
		{"t=,v1=,t=", []byte("[]"), int64(-1 << 63)},
		{"garbage", []byte(nil), int64(0)},
	}
}

func FuzzStripeHeader(f *testing.F) {
	addSeeds(f, stripeSeeds)
	f.Fuzz(func(t *testing.T, header string, body []byte, nowUnix int64) {
		h := http.Header{"Stripe-Signature": {header}}
		v, err := Verify("stripe", testSecret, Request{Header: h, Body: body, Now: time.Unix(nowUnix, 0)})
		checkVerdict(t, "stripe", v, err)
		if err != nil {
			return
		}
		// Some t=<ts> item must pair with some v1 that is the MAC of "<ts>.<body>", ts in window.
		var stamps, sigs []string
		for _, item := range strings.Split(header, ",") {
			k, val, _ := strings.Cut(strings.TrimSpace(item), "=")
			switch k {
			case "t":
				stamps = append(stamps, val)
			case "v1":
				sigs = append(sigs, val)
			}
		}
		for _, ts := range stamps {
			n, perr := strconv.ParseInt(ts, 10, 64)
			for _, s := range sigs {
				if perr == nil && n >= nowUnix-300 && n <= nowUnix+300 && hexEqualsMAC(s, ts, ".", string(body)) {
					return
				}
			}
		}
		t.Fatalf("verified without a matching, fresh MAC: %q", header)
	})
}

func slackSeeds() [][]any {
	body := `{"type":"event_callback","event":{"type":"app_mention"}}`
	h := Sign("slack", testSecret, []byte(body), testNow, "", "")
	ts := h.Get("X-Slack-Request-Timestamp")
	return [][]any{
		{h.Get("X-Slack-Signature"), ts, []byte(body), testNow.Unix()},
		{h.Get("X-Slack-Signature"), ts, []byte("command=%2Fx"), testNow.Unix() - 300},
		{"v0=", "+1", []byte(nil), int64(0)},
		{"v1=abc", "99999999999999999999", []byte("{}"), int64(1 << 62)},
	}
}

func FuzzSlackHeader(f *testing.F) {
	addSeeds(f, slackSeeds)
	f.Fuzz(func(t *testing.T, sig, ts string, body []byte, nowUnix int64) {
		h := http.Header{"X-Slack-Signature": {sig}, "X-Slack-Request-Timestamp": {ts}}
		v, err := Verify("slack", testSecret, Request{Header: h, Body: body, Now: time.Unix(nowUnix, 0)})
		checkVerdict(t, "slack", v, err)
		if err != nil {
			return
		}
		hexSig, ok := strings.CutPrefix(sig, "v0=")
		n, perr := strconv.ParseInt(ts, 10, 64)
		if !ok || perr != nil || n < nowUnix-300 || n > nowUnix+300 || !hexEqualsMAC(hexSig, "v0:", ts, ":", string(body)) {
			t.Fatalf("verified without a matching, fresh MAC: %q %q", sig, ts)
		}
		var doc map[string]any
		_ = json.Unmarshal(body, &doc)
		if id, _ := doc["event_id"].(string); v.DeliveryID != "" && v.DeliveryID != id {
			t.Fatalf("slack delivery id must be the event_id or the body hash, got %q", v.DeliveryID)
		}
	})
}

func standardSeeds() [][]any {
	body := `{"type":"user.created","data":{}}`
	h := Sign("standard", testSecret, []byte(body), testNow, "msg_1", "")
	sig, ts := h.Get("Webhook-Signature"), h.Get("Webhook-Timestamp")
	return [][]any{
		{"msg_1", ts, sig, []byte(body), testNow.Unix()},
		{"msg_1", ts, "v1,AAAA " + sig, []byte(body), testNow.Unix() + 300},
		{"", "+1", "v1,", []byte(nil), int64(0)},
		{"m", "99999999999999999999", "v1a,abc v2,=", []byte("{}"), int64(1 << 62)},
	}
}

// FuzzStandardHeader: verified only if some space-separated v1 entry is the base64 MAC, under
// the decoded key, of id.ts.body, with ts fresh.
func FuzzStandardHeader(f *testing.F) {
	addSeeds(f, standardSeeds)
	key, _ := standardKey(testSecret)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte, nowUnix int64) {
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig}}
		v, err := Verify("standard", testSecret, Request{Header: h, Body: body, Now: time.Unix(nowUnix, 0)})
		checkVerdict(t, "standard", v, err)
		if err != nil {
			return
		}
		want := mac(key, []byte(id+"."+ts+"."), body)
		n, perr := strconv.ParseInt(ts, 10, 64)
		matched := false
		for _, e := range strings.Fields(sig) {
			if b, ok := strings.CutPrefix(e, "v1,"); ok {
				got, err := base64.StdEncoding.DecodeString(b)
				matched = matched || (err == nil && hmac.Equal(got, want))
			}
		}
		if id == "" || perr != nil || n < nowUnix-300 || n > nowUnix+300 || !matched {
			t.Fatalf("verified without a matching, fresh MAC: %q %q %q", id, ts, sig)
		}
		if v.DeliveryID != "" && v.DeliveryID != id {
			t.Fatalf("delivery id %q, webhook-id %q", v.DeliveryID, id)
		}
	})
}

func cairnSeeds() [][]any {
	body := cairnBody("ce_1", testNow.Format(time.RFC3339), `,"title":"T","share":{"type":"public"}`)
	good := Sign("cairn", testSecret, []byte(body), testNow, "", "").Get("X-Cairn-Signature")
	noID := `{"kind":"k","created_at":"` + testNow.Format(time.RFC3339) + `"}`
	return [][]any{
		{good, "ce_1", []byte(body), testNow.Unix()},
		{good, "", []byte(body), testNow.Unix() + 301},
		{Sign("cairn", testSecret, []byte(noID), testNow, "", "").Get("X-Cairn-Signature"), "", []byte(noID), testNow.Unix()},
		{"sha256=" + strings.Repeat("f", 64), "x", []byte(`{"event_id":"x"}`), int64(0)},
		{"sha256", "", []byte(nil), int64(0)},
	}
}

func FuzzCairnHeader(f *testing.F) {
	addSeeds(f, cairnSeeds)
	f.Fuzz(func(t *testing.T, sig, headerID string, body []byte, nowUnix int64) {
		h := http.Header{"X-Cairn-Signature": {sig}}
		if headerID != "" {
			h.Set("X-Cairn-Event-Id", headerID)
		}
		v, err := Verify("cairn", testSecret, Request{Header: h, Body: body, Now: time.Unix(nowUnix, 0)})
		checkVerdict(t, "cairn", v, err)
		if err != nil {
			return
		}
		hexSig, ok := strings.CutPrefix(sig, "sha256=")
		if !ok || !hexEqualsMAC(hexSig, string(body)) {
			t.Fatalf("verified without a matching MAC: %q", sig)
		}
		// An independent read of the signed body: event_id present, matching the header.
		var doc map[string]any
		if json.Unmarshal(body, &doc) != nil {
			t.Fatalf("verified a non-JSON body")
		}
		id, _ := doc["event_id"].(string)
		if id == "" || (headerID != "" && headerID != id) {
			t.Fatalf("event_id %q vs header %q accepted", id, headerID)
		}
		if v.DeliveryID != "" && v.DeliveryID != id {
			t.Fatalf("delivery id %q, event_id %q", v.DeliveryID, id)
		}
	})
}

func deliverySeeds() [][]any {
	return [][]any{
		{[]byte(cairnBody("ce_1", testNow.Format(time.RFC3339), `,"title":"T","share_type":"public"`)), "ce_1", "push"},
		{[]byte(`{"id":"evt_1","type":"invoice.paid"}`), "d-1", "pull_request"},
		{[]byte(`{"type":"event_callback","event":{"type":"message"}}`), strings.Repeat("x", 257), ""},
		{[]byte(`{"id":5,"event_id":null,"repository":"o/r"}`), "a\xffb", "x\r\ny"},
	}
}

// FuzzDeliveryID signs every input properly for every source, so the fuzzer spends its time in
// the post-MAC body parsing and delivery-id extraction rather than bouncing off the MAC.
func FuzzDeliveryID(f *testing.F) {
	addSeeds(f, deliverySeeds)
	f.Fuzz(func(t *testing.T, body []byte, id, event string) {
		for _, source := range Sources {
			h := Sign(source, testSecret, body, testNow, id, event)
			v, err := Verify(source, testSecret, Request{Header: h, Body: body, Now: testNow})
			checkVerdict(t, source, v, err)
			if err != nil {
				continue
			}
			var doc map[string]any
			_ = json.Unmarshal(body, &doc)
			want := id // github, gitea, generic: from the header Sign set
			switch source {
			case "stripe":
				want, _ = doc["id"].(string)
			case "cairn":
				want, _ = doc["event_id"].(string)
			case "slack":
				want, _ = doc["event_id"].(string)
			}
			if v.DeliveryID != "" && v.DeliveryID != want {
				t.Fatalf("%s: delivery id %q, want %q or body hash", source, v.DeliveryID, want)
			}
			if v.DeliveryID == "" && isPlainID(want) {
				t.Fatalf("%s: usable id %q dropped", source, want)
			}
		}
	})
}

// isPlainID is a conservative "certainly usable" test: short printable ASCII.
func isPlainID(s string) bool {
	if s == "" || len(s) > maxDeliveryID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func genericSeeds() [][]any {
	return [][]any{
		{"del-1", "msg_1", "order.created"},
		{strings.Repeat("x", 257), "msg_2", ""},
		{"", strings.Repeat("y", 256), "e"},
		{"\x00", "\xff", "\r\n"},
	}
}

func FuzzGenericDeliveryID(f *testing.F) {
	addSeeds(f, genericSeeds)
	f.Fuzz(func(t *testing.T, xDelivery, webhookID, event string) {
		h := http.Header{"X-Delivery-Id": {xDelivery}, "Webhook-Id": {webhookID}, "X-Event-Type": {event}}
		v, err := Verify("generic", nil, Request{Header: h, Now: testNow})
		checkVerdict(t, "generic", v, err)
		if err != nil || v.Verified {
			t.Fatalf("generic must pass unverified: %+v %v", v, err)
		}
		switch {
		case isPlainID(xDelivery) && v.DeliveryID != xDelivery:
			t.Fatalf("X-Delivery-Id %q ignored: %q", xDelivery, v.DeliveryID)
		case v.DeliveryID != "" && v.DeliveryID != xDelivery && v.DeliveryID != webhookID:
			t.Fatalf("delivery id %q from nowhere", v.DeliveryID)
		case v.DeliveryID == "" && isPlainID(webhookID):
			t.Fatalf("usable Webhook-Id %q dropped", webhookID)
		}
	})
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/* from the seed functions above (after changing
// testSecret, testNow or a seed): PROVIDER_WRITE_SEEDS=1 go test -run TestWriteFuzzSeeds .
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("PROVIDER_WRITE_SEEDS") == "" {
		t.Skip("set PROVIDER_WRITE_SEEDS=1 to rewrite testdata/fuzz")
	}
	all := map[string]seeds{
		"FuzzGitHubHeader":      forgeSeeds("github"),
		"FuzzGiteaHeader":       forgeSeeds("gitea"),
		"FuzzStripeHeader":      stripeSeeds,
		"FuzzSlackHeader":       slackSeeds,
		"FuzzCairnHeader":       cairnSeeds,
		"FuzzStandardHeader":    standardSeeds,
		"FuzzDeliveryID":        deliverySeeds,
		"FuzzGenericDeliveryID": genericSeeds,
	}
	for name, s := range all {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, args := range s() {
			var b strings.Builder
			b.WriteString("go test fuzz v1\n")
			for _, a := range args {
				switch a := a.(type) {
				case string:
					fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(a))
				case []byte:
					fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(a)))
				case int64:
					fmt.Fprintf(&b, "int64(%d)\n", a)
				default:
					t.Fatalf("unsupported seed type %T", a)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
