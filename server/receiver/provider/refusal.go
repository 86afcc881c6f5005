package provider

import "net/http"

// Reasons a refused delivery is counted under (switchboard.webhook_refusals, the metric
// switchboard_ingest_refusals_total).
const (
	ReasonBadSignature = "bad_signature"
	ReasonStale        = "stale_timestamp"
	ReasonTooLarge     = "too_large"
	ReasonUnparseable  = "unparseable"
)

// Reasons lists every reason, in the order of the counters.
var Reasons = []string{ReasonBadSignature, ReasonStale, ReasonTooLarge, ReasonUnparseable}

// RefusalReason is the counted reason of a Verify that failed with ErrUnauthorized, read from
// the failure's VerifyDetail: a timestamp outside the replay window is stale_timestamp, a signed
// body whose fields cannot be read (stripe, cairn) unparseable, every other failure (no
// signature, a malformed one, a mismatch) bad_signature.
func RefusalReason(v Verdict) string {
	switch failure(v.VerifyDetail) {
	case errStale:
		return ReasonStale
	case errBadBody, errNoEventID, errBadCreated:
		return ReasonUnparseable
	}
	return ReasonBadSignature
}

// maxRefusalID bounds the delivery id kept with a refusal (the column's CHECK).
const maxRefusalID = 128

// HeaderDeliveryID is the delivery id a refused delivery's headers name, for the record of the
// last refusal: only a plain id (at most 128 letters, digits and ._:-, as providers' ids are),
// since anyone holding the ingest URL can send these headers and an agent reads them. Stripe
// and Slack name their ids only in the body, which a refused delivery is not trusted for.
func HeaderDeliveryID(source string, h http.Header) string {
	var names []string
	switch source {
	case "github":
		names = []string{"X-GitHub-Delivery"}
	case "gitea":
		names = []string{"X-Gitea-Delivery"}
	case "cairn":
		names = []string{"X-Cairn-Event-Id"}
	case "standard":
		names = []string{"Webhook-Id", "Svix-Id"}
	case "generic":
		names = []string{"X-Delivery-Id", "Webhook-Id"}
	}
	for _, n := range names {
		if id, ok := single(h, n); ok && plainID(id) {
			return id
		}
	}
	return ""
}

func plainID(s string) bool {
	if s == "" || len(s) > maxRefusalID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}
