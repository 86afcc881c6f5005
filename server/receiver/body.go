package receiver

import (
	"fmt"
	"net/http"
)

// bodyLimit is the cap of the webhook's source type: the ingest_max_body_<source> setting as
// webhook_for_ingest read it, else the provider's default (BodyLimit).
func bodyLimit(h *webhook) int64 {
	if h.MaxBody > 0 {
		return h.MaxBody
	}
	return BodyLimit(h.Source)
}

// tooLarge is the 413 a sender can read: which limit, for which source type.
func tooLarge(limit int64, source string) *refusal {
	return &refusal{status: http.StatusRequestEntityTooLarge, code: "payload_too_large",
		message: fmt.Sprintf("body exceeds %s, the limit for %s webhooks", size(limit), source)}
}

func size(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
