// Package httpx holds the HTTP plumbing every route of the server shares: the security headers
// set on every response and a response writer that remembers its status for logs and metrics.
// It imports nothing of switchboard's, so the server and the handlers it mounts both use it.
package httpx

import (
	"net/http"
	"strings"
)

// securityHeaders are set on every response of the server (contract §4.1).
var securityHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'"},
	{"X-Frame-Options", "DENY"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "strict-origin-when-cross-origin"},
	{"Cache-Control", "no-store"},
}

// setSecurityHeaders sets them all. A handler may add directives to the base policy (the OAuth
// consent page adds its style hash, form-action and frame-ancestors): a policy that starts with
// the base one is kept: it names what that page needs and nothing else can loosen the base.
func setSecurityHeaders(h http.Header) {
	for _, kv := range securityHeaders {
		if kv[0] == "Content-Security-Policy" && strings.HasPrefix(h.Get(kv[0]), kv[1]+";") {
			continue
		}
		h.Set(kv[0], kv[1])
	}
}

// SecureHeaders sets the security headers before the handler runs and again at the moment the
// response header is written, so a handler that overwrites one (the go-sdk sets
// Cache-Control: no-cache on streams) cannot send it.
func SecureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w.Header())
		next.ServeHTTP(&headerWriter{ResponseWriter: w}, r)
	})
}

// headerWriter enforces the security headers at WriteHeader time; it keeps http.Flusher (SSE)
// and Unwrap (http.ResponseController).
type headerWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *headerWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		setSecurityHeaders(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *headerWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *headerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// StatusWriter records the final status of a response for request logs and metrics, keeping
// http.Flusher (streams) and Unwrap (http.ResponseController) working.
type StatusWriter struct {
	http.ResponseWriter
	Status int // 0 until the first final status or write
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 && code >= 200 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
