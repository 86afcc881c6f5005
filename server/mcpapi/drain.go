package mcpapi

// Draining: the first step of a graceful shutdown (a rolling restart). A draining handler
// refuses what would start something long-lived here — a new session (a POST without
// Mcp-Session-Id) and a GET stream — with 503 and Connection: close, so a balancer sends it to
// another replica (docs/haproxy.cfg retries a 503 there), while the calls of existing sessions
// are served to the end. Waiting claim_next calls are answered by the doorbell (Bell.EndWaits).
// This is the one hook on the request path (ServeHTTP, before authentication). A request of the
// sessionless protocol (Mcp-Protocol-Version 2026-07-28 and later) carries no session id on any
// request, so it is let through here: serveListen (modern.go) refuses a new listen stream
// (subscriptions/listen) with the same answer, and its plain calls are served.

import "net/http"

// Drain makes the handler refuse new sessions and streams from now on.
func (h *Handler) Drain() { h.draining.Store(true) }

// Draining reports whether Drain was called.
func (h *Handler) Draining() bool { return h.draining.Load() }

// refuseWhileDraining answers 503 to a request that would start a session or a stream while
// draining, and reports whether it did.
func (h *Handler) refuseWhileDraining(w http.ResponseWriter, r *http.Request) bool {
	if !h.draining.Load() {
		return false
	}
	// Sessionless protocol: see above.
	if r.Header.Get(versionHeader) >= newProtocol {
		return false
	}
	if r.Method == http.MethodGet || r.Method == http.MethodPost && r.Header.Get(sessionHeader) == "" {
		refuseDraining(w)
		return true
	}
	return false
}

// refuseDraining is the 503 of a draining replica: the client connects again, to another one.
func refuseDraining(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "unavailable", "server is shutting down: connect again")
}
