// Package provider verifies inbound webhook deliveries per source type (CONTRACT.md §5) and
// extracts what ingestion needs from them: a delivery id, an event type and a todo title.
//
// It is pure: no database, no HTTP server, no clock of its own (Request.Now is injected).
package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// Sources known to switchboard; signed ones need a secret.
var Sources = []string{"github", "gitea", "stripe", "slack", "cairn", "standard", "generic"}

// Trust modes. Nothing weaker than "token" exists: an unknown source has no mode at all.
const (
	ModeSigned = "signed"
	ModeToken  = "token"
)

// TrustMode derives the trust mode from the source type; "" means the source is unknown.
func TrustMode(source string) string {
	switch source {
	case "github", "gitea", "stripe", "slack", "cairn", "standard":
		return ModeSigned
	case "generic":
		return ModeToken
	}
	return ""
}

// Request is one delivery as the receiver saw it.
type Request struct {
	Header http.Header
	Body   []byte    // the raw, already size-bounded body
	Now    time.Time // injected clock for replay windows
}

// Verdict is what Verify learned about a delivery.
type Verdict struct {
	TrustMode    string // "signed" or "token"
	Verified     bool   // true only after a successful HMAC check
	VerifyDetail string // e.g. "hmac-sha256 ok"; on failure, a short reason fit for logs (never a secret)
	DeliveryID   string // provider delivery id; "" means: use sha256(body)
	// BadDeliveryID: the delivery named an id that cannot serve as one (over 256 bytes, not
	// UTF-8, control characters); the receiver refuses it rather than use the body hash.
	BadDeliveryID bool
	EventType     string
	Title         string // human-legible todo title, ≤ 200 bytes, one line
	// Handshake marks a verified delivery that is the sender checking the URL (Slack's
	// url_verification, a forge's ping), not work: it is stored, but no todo is made.
	Handshake bool
	// Challenge is what Slack expects back, verbatim, as the 200 body of a url_verification.
	Challenge string
}

var (
	ErrUnauthorized  = errors.New("signature verification failed") // -> HTTP 401
	ErrNoSecret      = errors.New("webhook has no signing secret") // -> HTTP 503
	ErrUnknownSource = errors.New("unknown source type")
)

// Verify checks the delivery exactly as the contract table says and extracts delivery id, event
// type and title. Errors are exactly the sentinels above (comparable with == or errors.Is); on
// failure the returned Verdict carries only TrustMode and, in VerifyDetail, why it failed.
func Verify(source string, secret []byte, r Request) (Verdict, error) {
	mode := TrustMode(source)
	if mode == "" {
		return Verdict{}, ErrUnknownSource
	}
	if mode == ModeSigned && len(secret) == 0 {
		return Verdict{TrustMode: mode, VerifyDetail: "no signing secret"}, ErrNoSecret
	}
	var (
		v   Verdict
		err error
	)
	switch source {
	case "github":
		v, err = verifyForge("github", secret, r, "X-Hub-Signature-256", "sha256=", "X-GitHub-Delivery", "X-GitHub-Event")
	case "gitea":
		v, err = verifyForge("gitea", secret, r, "X-Gitea-Signature", "", "X-Gitea-Delivery", "X-Gitea-Event")
	case "stripe":
		v, err = verifyStripe(secret, r)
	case "slack":
		v, err = verifySlack(secret, r)
	case "cairn":
		v, err = verifyCairn(secret, r)
	case "standard":
		v, err = verifyStandard(secret, r)
	case "generic":
		v = verifyGeneric(r)
	}
	v.TrustMode = mode
	if err != nil {
		// Nothing half-extracted leaks out of a failed check.
		var reason failure
		errors.As(err, &reason)
		return Verdict{TrustMode: mode, VerifyDetail: string(reason)}, ErrUnauthorized
	}
	return v, nil
}

// IdempotencyKey returns "<webhookID>:<deliveryID or hex sha256(body)>".
func IdempotencyKey(webhookID string, v Verdict, body []byte) string {
	id := v.DeliveryID
	if id == "" {
		sum := sha256.Sum256(body)
		id = hex.EncodeToString(sum[:])
	}
	return webhookID + ":" + id
}

// Body caps, as each provider can send: GitHub caps its payloads at 25 MB, and no other source
// documents more than DefaultMaxBody. These are the defaults of the ingest_max_body_* settings.
const (
	DefaultMaxBody = 5 << 20
	GitHubMaxBody  = 25 << 20
)

// MaxBody is the default body cap of a source type.
func MaxBody(source string) int64 {
	if source == "github" {
		return GitHubMaxBody
	}
	return DefaultMaxBody
}
