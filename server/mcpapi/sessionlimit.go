package mcpapi

// Bounded sessions: one credential must not be able to hold an unbounded number of sessions
// (each is a few goroutines and tens of KB, idle for up to SessionIdle). Per endpoint and per
// server process, live sessions are capped (Options.MaxSessions) and initialize is rate-limited
// (Limits.InitRate/InitBurst). Past either, a new initialize gets HTTP 429 with Retry-After and
// a JSON error naming the limit; existing sessions are untouched.

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"switchboard/server/store"
)

// capRetryAfter is the Retry-After of a refusal at the cap: a slot frees when a session is
// closed (DELETE) or idles out, which no clock here predicts.
const capRetryAfter = 60 * time.Second

// admitSession decides whether endpoint e may start a session now (a 2025 POST without a
// session id): under its cap and within its initialize rate. Admitted, the request holds a
// place under the cap until its session takes it (bindSession) or the request ends (unreserve),
// so concurrent initializes cannot pass the cap together.
func (h *Handler) admitSession(w http.ResponseWriter, e *endpointEntry, rq *request) bool {
	h.mu.Lock()
	full := e.streams() >= h.o.MaxSessions
	if !full {
		e.opening++
		rq.reserved = true
	}
	h.mu.Unlock()
	if full {
		h.tooManySessions(w)
		return false
	}
	r := e.buckets.init.Reserve()
	var d time.Duration
	if r.OK() {
		d = r.Delay()
	}
	if !r.OK() || d > 0 {
		if r.OK() {
			r.Cancel()
		}
		h.unreserve(rq)
		if !r.OK() {
			writeLimit(w, time.Minute, "SWITCHBOARD_INIT_RATE", "initialize is not allowed for this endpoint (rate 0)")
		} else {
			writeLimit(w, d, "SWITCHBOARD_INIT_RATE", fmt.Sprintf(
				"too many initialize requests for this endpoint (limit %g/s, burst %d): reuse your session, or retry in %s",
				float64(e.buckets.init.Limit()), e.buckets.init.Burst(), roundUp(d)))
		}
		return false
	}
	return true
}

// unreserve gives back the place an initialize request held, unless its session took it.
func (h *Handler) unreserve(rq *request) {
	h.mu.Lock()
	if rq.reserved {
		rq.reserved = false
		rq.entry.opening--
	}
	h.mu.Unlock()
}

func (h *Handler) tooManySessions(w http.ResponseWriter) {
	writeLimit(w, capRetryAfter, "SWITCHBOARD_MAX_SESSIONS_PER_ENDPOINT", fmt.Sprintf(
		"this endpoint has %d live sessions on this server, its limit: reuse one, or close one with DELETE and its Mcp-Session-Id",
		h.o.MaxSessions))
}

// writeLimit answers 429 with Retry-After (whole seconds, at least 1) and
// {"error":{"code":"rate_limited","message":...,"limit":<the setting>}}.
func writeLimit(w http.ResponseWriter, retry time.Duration, limit, message string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(retry.Seconds())))))
	writeError(w, http.StatusTooManyRequests, store.CodeRateLimited, message, "limit", limit)
}
