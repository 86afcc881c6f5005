package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// replayWindow bounds how far a signed timestamp may sit from Now, in either direction.
const replayWindow = 300 * time.Second

// failure is the internal reason a check failed; Verify turns it into ErrUnauthorized.
type failure string

func (f failure) Error() string { return string(f) }

const (
	errMissingSig  failure = "missing signature header"
	errMalformed   failure = "malformed signature header"
	errMismatch    failure = "signature mismatch"
	errStale       failure = "timestamp outside replay window"
	errBadBody     failure = "body is not a JSON object"
	errNoEventID   failure = "missing event_id"
	errIDMismatch  failure = "X-Cairn-Event-Id does not match event_id"
	errBadCreated  failure = "missing or malformed created_at"
	errMissingTime failure = "missing or malformed timestamp header"
)

// mac is HMAC-SHA256 over the concatenated parts, written piecewise so the body is never copied.
func mac(secret []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// macMatches decodes a hex signature and compares it in constant time.
func macMatches(want []byte, hexSig string) bool {
	got, err := hex.DecodeString(hexSig)
	return err == nil && hmac.Equal(got, want)
}

// single returns a header only when it is sent exactly once: two signatures or two timestamps
// are ambiguous, and ambiguity is a failure, not a choice.
func single(h http.Header, name string) (string, bool) {
	vs := h.Values(name)
	if len(vs) != 1 {
		return "", false
	}
	return vs[0], true
}

// unixSeconds parses a plain decimal timestamp (no sign, no spaces, no fraction).
func unixSeconds(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// fresh reports whether unix seconds lie within the replay window around now (bounds inclusive).
// Comparing against bounds, not subtracting, keeps absurd timestamps from overflowing.
func fresh(unix int64, now time.Time) bool {
	w := int64(replayWindow / time.Second)
	return unix >= now.Unix()-w && unix <= now.Unix()+w
}

// verifyForge covers github and gitea: a hex HMAC of the body in one header (with an optional
// prefix), delivery id and event type in others. Neither signs a time, so there is no replay defence;
// the idempotency key absorbs replays.
func verifyForge(source string, secret []byte, r Request, sigHeader, prefix, idHeader, eventHeader string) (Verdict, error) {
	sig, ok := single(r.Header, sigHeader)
	if !ok {
		return Verdict{}, errMissingSig
	}
	hexSig, ok := strings.CutPrefix(sig, prefix)
	if !ok || hexSig == "" {
		return Verdict{}, errMalformed
	}
	if !macMatches(mac(secret, r.Body), hexSig) {
		return Verdict{}, errMismatch
	}
	event := cleanEvent(r.Header.Get(eventHeader))
	id, bad := usableID(r.Header.Get(idHeader))
	return Verdict{
		Verified:      true,
		VerifyDetail:  "hmac-sha256 ok",
		DeliveryID:    id,
		BadDeliveryID: bad,
		EventType:     event,
		Title:         forgeTitle(source, event, r.Body),
		// Both forges send "ping" once when a hook is created (and on "test delivery"): it
		// proves the URL and the secret, and is nothing for an agent to do.
		Handshake: event == "ping",
	}, nil
}

// parseStripeSig splits "t=<unix>,v1=<hex>[,v1=<hex>…]". Other schemes (v0) are ignored and
// undecodable v1 entries are skipped, as Stripe's own libraries do during secret rotation.
func parseStripeSig(s string) (ts string, sigs []string, ok bool) {
	for _, item := range strings.Split(s, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(item), "=")
		if !found {
			return "", nil, false
		}
		switch k {
		case "t":
			if ts != "" {
				return "", nil, false // two timestamps: which one was signed?
			}
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	return ts, sigs, ts != "" && len(sigs) > 0
}

func verifyStripe(secret []byte, r Request) (Verdict, error) {
	header, ok := single(r.Header, "Stripe-Signature")
	if !ok {
		return Verdict{}, errMissingSig
	}
	ts, sigs, ok := parseStripeSig(header)
	if !ok {
		return Verdict{}, errMalformed
	}
	unix, ok := unixSeconds(ts)
	if !ok {
		return Verdict{}, errMalformed
	}
	want := mac(secret, []byte(ts), []byte("."), r.Body)
	matched := false
	for _, s := range sigs {
		// No early exit: the work done should not depend on which entry matched.
		if macMatches(want, s) {
			matched = true
		}
	}
	if !matched {
		return Verdict{}, errMismatch
	}
	if !fresh(unix, r.Now) {
		return Verdict{}, errStale
	}
	body, ok := parseObject(r.Body)
	if !ok {
		return Verdict{}, errBadBody // the delivery id lives in the body
	}
	id, _ := body.str("id")
	typ, _ := body.str("type")
	typ = cleanEvent(typ)
	id, bad := usableID(id)
	return Verdict{
		Verified:      true,
		VerifyDetail:  "stripe v1 hmac-sha256 ok",
		DeliveryID:    id,
		BadDeliveryID: bad,
		EventType:     typ,
		Title:         join("stripe", typ),
	}, nil
}

func verifySlack(secret []byte, r Request) (Verdict, error) {
	sig, ok := single(r.Header, "X-Slack-Signature")
	if !ok {
		return Verdict{}, errMissingSig
	}
	hexSig, ok := strings.CutPrefix(sig, "v0=")
	if !ok || hexSig == "" {
		return Verdict{}, errMalformed
	}
	ts, ok := single(r.Header, "X-Slack-Request-Timestamp")
	if !ok {
		return Verdict{}, errMissingTime
	}
	unix, ok := unixSeconds(ts)
	if !ok {
		return Verdict{}, errMissingTime
	}
	if !macMatches(mac(secret, []byte("v0:"), []byte(ts), []byte(":"), r.Body), hexSig) {
		return Verdict{}, errMismatch
	}
	if !fresh(unix, r.Now) {
		return Verdict{}, errStale
	}
	// Slack slash commands and interactivity post form bodies, not JSON: without an event_id the
	// delivery id is the body hash, so a non-JSON body just has no event type.
	v := Verdict{Verified: true, VerifyDetail: "slack v0 hmac-sha256 ok"}
	typ := ""
	if body, ok := parseObject(r.Body); ok {
		typ, _ = body.str("type")
		switch typ {
		case "url_verification":
			// Setting the Events API Request URL: Slack accepts the URL only if the 200 answer
			// is the challenge. An unusable challenge answers empty, which Slack rejects.
			v.Handshake = true
			challenge, _ := body.str("challenge")
			v.Challenge = plainChallenge(challenge)
		case "event_callback":
			if inner, ok := body.obj("event").str("type"); ok && inner != "" {
				typ = inner
			}
		}
		// A retry (X-Slack-Retry-Num) repeats the event_id; deduplicating on it holds even
		// if a retried body ever differs from the first (event_callback, app_rate_limited).
		id, _ := body.str("event_id")
		v.DeliveryID, v.BadDeliveryID = usableID(id)
	}
	v.EventType = cleanEvent(typ)
	v.Title = join("slack", v.EventType)
	return v, nil
}

func verifyCairn(secret []byte, r Request) (Verdict, error) {
	sig, ok := single(r.Header, "X-Cairn-Signature")
	if !ok {
		return Verdict{}, errMissingSig
	}
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok || hexSig == "" {
		return Verdict{}, errMalformed
	}
	if !macMatches(mac(secret, r.Body), hexSig) {
		return Verdict{}, errMismatch
	}
	// Only now is the body trusted: its replay defences are signed fields.
	body, ok := parseObject(r.Body)
	if !ok {
		return Verdict{}, errBadBody
	}
	eventID, ok := body.str("event_id")
	if !ok || eventID == "" {
		return Verdict{}, errNoEventID
	}
	if hdr := r.Header.Values("X-Cairn-Event-Id"); len(hdr) > 0 {
		if len(hdr) != 1 || hdr[0] != eventID {
			return Verdict{}, errIDMismatch
		}
	}
	createdRaw, _ := body.str("created_at")
	created, err := time.Parse(time.RFC3339, createdRaw)
	if err != nil {
		return Verdict{}, errBadCreated
	}
	if d := created.Sub(r.Now); d < -replayWindow || d > replayWindow { // Sub saturates, no overflow
		return Verdict{}, errStale
	}
	kind, _ := body.str("kind")
	kind = cleanEvent(kind)
	id, bad := usableID(eventID)
	return Verdict{
		Verified:      true,
		VerifyDetail:  "cairn hmac-sha256 ok",
		DeliveryID:    id,
		BadDeliveryID: bad,
		EventType:     kind,
		Title:         cairnTitle(kind, body),
	}, nil
}

// verifyGeneric checks nothing: the ingest token in the URL already authenticated the caller.
func verifyGeneric(r Request) Verdict {
	id, bad := usableID(r.Header.Get("X-Delivery-Id"))
	if id == "" {
		var bad2 bool
		id, bad2 = usableID(r.Header.Get("Webhook-Id")) // Standard Webhooks' name for the same thing
		bad = id == "" && (bad || bad2)
	}
	event := cleanEvent(r.Header.Get("X-Event-Type"))
	return Verdict{
		VerifyDetail:  "ingest token",
		DeliveryID:    id,
		BadDeliveryID: bad,
		EventType:     event,
		Title:         generic(event),
	}
}

// plainChallenge passes a Slack challenge through only when it is short printable ASCII (Slack's
// are about 50 letters and digits), since it is echoed verbatim as the response body.
func plainChallenge(s string) string {
	if len(s) > 256 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return ""
		}
	}
	return s
}
