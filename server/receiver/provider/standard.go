package provider

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (https://www.standardwebhooks.com), used by OpenAI, Clerk, Resend, Supabase
// and every sender built on Svix: the signed content is "<webhook-id>.<webhook-timestamp>.<body>",
// webhook-signature is a space-separated list of "v1,<base64 HMAC-SHA256>" (several during a
// secret rotation; other schemes such as v1a are skipped), and the secret is "whsec_" plus the
// base64 of the key bytes: unlike our other sources, the HMAC key is the decoded bytes.

// StandardSecretPrefix starts every Standard Webhooks secret.
const StandardSecretPrefix = "whsec_"

const (
	errBadSecret failure = "signing secret is not whsec_ base64"
	errMissingID failure = "missing webhook-id"
)

// NewStandardSecret mints a secret in the spec's own format: whsec_ + base64 of 32 random bytes.
func NewStandardSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+), it crashes the program instead
	return StandardSecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// standardKey decodes a secret into HMAC key bytes. The prefix is optional, as in the reference
// libraries, so a secret pasted without it still works.
func standardKey(secret []byte) ([]byte, bool) {
	s := strings.TrimPrefix(string(secret), StandardSecretPrefix)
	key, err := base64.StdEncoding.DecodeString(s)
	return key, err == nil && len(key) > 0
}

func standardMAC(key []byte, id, ts string, body []byte) []byte {
	return mac(key, []byte(id), []byte("."), []byte(ts), []byte("."), body)
}

// standardHeader reads webhook-<name>, or svix-<name> when no webhook- header of that name was
// sent: Svix signs with the svix- names unless the sender pays for the webhook- ones, so Clerk
// and Resend send svix-id, svix-timestamp and svix-signature (the scheme is the same; Svix's own
// libraries read both).
func standardHeader(h http.Header, name string) (string, bool) {
	if len(h.Values("Webhook-"+name)) > 0 {
		return single(h, "Webhook-"+name)
	}
	return single(h, "Svix-"+name)
}

func verifyStandard(secret []byte, r Request) (Verdict, error) {
	key, ok := standardKey(secret)
	if !ok {
		return Verdict{}, errBadSecret
	}
	id, ok := standardHeader(r.Header, "Id")
	if !ok || id == "" {
		return Verdict{}, errMissingID
	}
	ts, ok := standardHeader(r.Header, "Timestamp")
	if !ok {
		return Verdict{}, errMissingTime
	}
	unix, ok := unixSeconds(ts)
	if !ok {
		return Verdict{}, errMissingTime
	}
	header, ok := standardHeader(r.Header, "Signature")
	if !ok {
		return Verdict{}, errMissingSig
	}
	want := standardMAC(key, id, ts, r.Body)
	matched, seen := false, false
	for _, entry := range strings.Fields(header) {
		scheme, sig, found := strings.Cut(entry, ",")
		if !found || scheme != "v1" {
			continue
		}
		seen = true
		got, err := base64.StdEncoding.DecodeString(sig)
		// No early exit: the work done should not depend on which entry matched.
		if err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	switch {
	case !seen:
		return Verdict{}, errMalformed
	case !matched:
		return Verdict{}, errMismatch
	case !fresh(unix, r.Now):
		return Verdict{}, errStale
	}
	// The spec's payload is {"type": …, "timestamp": …, "data": …}; a body without a type is
	// still a verified delivery, it just has no event type.
	typ := ""
	if body, ok := parseObject(r.Body); ok {
		typ, _ = body.str("type")
	}
	typ = cleanEvent(typ)
	deliveryID, bad := usableID(id)
	return Verdict{
		Verified:      true,
		VerifyDetail:  "standard webhooks v1 hmac-sha256 ok",
		DeliveryID:    deliveryID,
		BadDeliveryID: bad,
		EventType:     typ,
		Title:         join("webhook", typ),
	}, nil
}

// signStandard is what a Standard Webhooks sender puts in its headers (for Sign).
func signStandard(secret []byte, body []byte, now time.Time, id string) (ts, sig string) {
	ts = strconv.FormatInt(now.Unix(), 10)
	key, ok := standardKey(secret)
	if !ok {
		key = secret
	}
	return ts, "v1," + base64.StdEncoding.EncodeToString(standardMAC(key, id, ts, body))
}
