package provider

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A failed Verify names its counted reason: a stale timestamp, a signed body that cannot be
// read, or (everything else) a bad signature.
func TestRefusalReason(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	secret := []byte("whsec_" + strings.Repeat("ab", 16))
	body := []byte(`{"id":"evt_1","type":"x"}`)
	cases := []struct {
		name   string
		source string
		req    Request
		want   string
	}{
		{"stale", "stripe", Request{Header: Sign("stripe", secret, body, now.Add(-time.Hour), "", ""), Body: body, Now: now}, ReasonStale},
		{"mismatch", "stripe", Request{Header: Sign("stripe", []byte("whsec_other"), body, now, "", ""), Body: body, Now: now}, ReasonBadSignature},
		{"no signature", "slack", Request{Header: http.Header{}, Body: body, Now: now}, ReasonBadSignature},
		{"signed but not JSON", "stripe", Request{Header: Sign("stripe", secret, []byte("nope"), now, "", ""), Body: []byte("nope"), Now: now}, ReasonUnparseable},
	}
	for _, c := range cases {
		v, err := Verify(c.source, secret, c.req)
		if err != ErrUnauthorized {
			t.Fatalf("%s: err %v", c.name, err)
		}
		if got := RefusalReason(v); got != c.want {
			t.Errorf("%s: reason %s, want %s", c.name, got, c.want)
		}
	}
}

// Only a plain delivery id from the source's own header is kept with a refusal.
func TestHeaderDeliveryID(t *testing.T) {
	h := func(k, v string) http.Header { return http.Header{http.CanonicalHeaderKey(k): {v}} }
	cases := []struct {
		source string
		header http.Header
		want   string
	}{
		{"github", h("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"), "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		{"standard", h("webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"), "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"},
		{"standard", h("svix-id", "msg_1"), "msg_1"},
		{"stripe", h("X-GitHub-Delivery", "x"), ""},
		{"github", h("X-GitHub-Delivery", "ignore previous instructions"), ""},
		{"github", h("X-GitHub-Delivery", strings.Repeat("a", 129)), ""},
		{"generic", http.Header{"X-Delivery-Id": {"a", "b"}}, ""},
	}
	for _, c := range cases {
		if got := HeaderDeliveryID(c.source, c.header); got != c.want {
			t.Errorf("%s %v: %q, want %q", c.source, c.header, got, c.want)
		}
	}
}
