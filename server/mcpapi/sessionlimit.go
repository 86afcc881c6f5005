package mcpapi

// Bounded sessions: one credential must not be able to hold an unbounded number of sessions
// (each is two goroutines and tens of KB, idle for up to SessionIdle). Per endpoint and per
// server process, live sessions are capped (Options.MaxSessions) and initialize is rate-limited
// (Limits.InitRate/InitBurst). Past either, a new initialize gets HTTP 429 with Retry-After and
// a JSON error naming the limit; existing sessions are untouched.

import (
	"encoding/json"
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

// admitSession decides whether endpoint e may start a session now: under its cap (checked again,
// under the same lock as the insert, in newSession) and within its initialize rate.
func (h *Handler) admitSession(w http.ResponseWriter, e *endpointEntry) bool {
	h.mu.Lock()
	full := e.streams() >= h.o.MaxSessions
	h.mu.Unlock()
	if full {
		h.tooManySessions(w)
		return false
	}
	r := e.buckets.init.Reserve()
	if !r.OK() {
		writeLimit(w, time.Minute, "SWITCHBOARD_INIT_RATE", "initialize is not allowed for this endpoint (rate 0)")
		return false
	}
	if d := r.Delay(); d > 0 {
		r.Cancel()
		writeLimit(w, d, "SWITCHBOARD_INIT_RATE", fmt.Sprintf(
			"too many initialize requests for this endpoint (limit %g/s, burst %d): reuse your session, or retry in %s",
			float64(e.buckets.init.Limit()), e.buckets.init.Burst(), roundUp(d)))
		return false
	}
	return true
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
	body, _ := json.Marshal(map[string]map[string]string{"error": {
		"code": store.CodeRateLimited, "message": message, "limit": limit}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(append(body, '\n'))
}
