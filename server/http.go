package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"switchboard/server/httpx"
)

// routeFamily names a request's route for metrics and logs. Paths themselves are not logged
// outside /mcp: an ingest URL carries a credential.
func routeFamily(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/mcp/"):
		return "mcp"
	case strings.HasPrefix(p, "/webhooks/"):
		return "webhook"
	case p == "/healthz" || p == "/readyz":
		return "health"
	case p == "/metrics":
		return "metrics"
	}
	return "other"
}

// accessLog writes one line per request for routes that do not log themselves (MCP does, with
// its endpoint, verb and code) and counts every response.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		family := routeFamily(r)
		if family == "mcp" && (r.Method == http.MethodGet || r.Header.Get("Mcp-Method") == "subscriptions/listen" ||
			r.Header.Get("Mcp-Method") == "events/stream") {
			// An MCP GET is a stream that lives as long as its session, and a 2026-07-28 listen
			// as long as its client wants (the SDK refuses an Mcp-Method that is not the body's):
			// the server's read and write timeouts, meant for one request and its answer, do not
			// apply to them, and shutting down ends them rather than waiting.
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Time{})
			_ = rc.SetWriteDeadline(time.Time{})
		} else {
			s.inflight.Add(1)
			defer s.inflight.Add(-1)
		}
		sw := &httpx.StatusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.Status
		if status == 0 {
			status = http.StatusOK
		}
		s.metrics.HTTPRequests.WithLabelValues(family, strconv.Itoa(status)).Inc()
		if family == "mcp" {
			return
		}
		pattern := r.Pattern
		if pattern == "" {
			pattern = "(no route)"
		}
		level := s.log.Info
		if family == "health" || family == "metrics" {
			level = s.log.Debug
		}
		level("http request", "method", r.Method, "route", pattern, "status", status,
			"duration_ms", float64(time.Since(start).Microseconds())/1000)
	})
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body + "\n"))
}

// healthz: the process is up.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, `{"status":"ok"}`)
}

// readyz: the database answers and the server is not shutting down.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, `{"status":"draining"}`)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("readiness check failed", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, `{"status":"unavailable"}`)
		return
	}
	writeJSON(w, http.StatusOK, `{"status":"ready"}`)
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{})
}
