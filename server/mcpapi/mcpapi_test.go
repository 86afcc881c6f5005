package mcpapi

import (
	"net/http"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"switchboard/server/store"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]rate.Limit{"50/s": 50, "10/m": rate.Limit(10.0 / 60), " 0.5/s ": 0.5, "0/m": 0} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "50", "50/h", "x/s", "-1/s", "/s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

func TestBucketsSayWhenToRetry(t *testing.T) {
	b := newBuckets(Limits{ToolRate: 1, ToolBurst: 1, WebhookRate: rate.Limit(1.0 / 60), WebhookBurst: 1})
	if err := b.take(false); err != nil {
		t.Fatal(err)
	}
	if err := b.take(false); err == nil || err.Code != "rate_limited" || err.Message != "rate limit exceeded; retry in 1s" {
		t.Fatalf("tool: %v", err)
	}
	_ = b.take(true)
	if err := b.take(true); err == nil || err.Message != "rate limit exceeded; retry in 1m0s" {
		t.Fatalf("webhook: %v", err)
	}
	if got := roundUp(1500 * time.Microsecond); got != 2*time.Millisecond {
		t.Fatalf("roundUp %v", got)
	}
}

func TestIsLoopback(t *testing.T) {
	for _, h := range []string{"127.0.0.1:80", "localhost", "[::1]:8080", "::1", "LOCALHOST:1"} {
		if !isLoopback(h) {
			t.Errorf("%s not loopback", h)
		}
	}
	for _, h := range []string{"example.com", "10.0.0.1:80", "localhost.evil.com", ""} {
		if isLoopback(h) {
			t.Errorf("%s loopback", h)
		}
	}
}

// A credential lookup that raced a revocation (it read "active" just before the revocation
// committed, and returns after the notification was handled) must not open a new session.
func TestRevokedEndpointStaysClosed(t *testing.T) {
	h := New(Options{})
	ep := store.Endpoint{ID: "e1", Slug: "bot-1"}
	e, status := h.acquire(ep)
	if e == nil || status != http.StatusOK {
		t.Fatalf("acquire: %v %d", e, status)
	}
	h.release(e)
	h.Revoke(ep.ID)
	if e, status := h.acquire(ep); e != nil || status != http.StatusUnauthorized {
		t.Fatalf("acquire after revocation: %v %d, want 401", e, status)
	}
}
