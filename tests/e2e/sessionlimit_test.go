package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"switchboard/tests/e2e/agentclient"
)

// want429 checks a refused initialize: 429, a Retry-After, and a JSON error naming the limit.
func want429(t *testing.T, resp *http.Response, limit string) {
	t.Helper()
	var body struct {
		Error struct{ Code, Message, Limit string }
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(raw, &body) != nil ||
		body.Error.Code != "rate_limited" || body.Error.Limit != limit || body.Error.Message == "" {
		t.Fatalf("want 429 naming %s: %d %s", limit, resp.StatusCode, raw)
	}
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
}

// 65 initializes on one endpoint (default limits): the 65th gets 429; the first 64 still answer
// tool calls, and a closed session makes room for a new one.
func TestSessionCapPerEndpoint(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	other := e.vend("bob", []string{"inbox"}, nil)
	clients := make([]*agentclient.Client, 64)
	for i := range clients {
		clients[i] = e.connect(t, ep, &agentclientOptionsNoStream)
	}
	want429(t, rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(initBody), mcpHeaders), "SWITCHBOARD_MAX_SESSIONS_PER_ENDPOINT")
	if n := e.srv.MCP().SessionCount(ep.ID); n != 64 {
		t.Fatalf("%d sessions, want 64", n)
	}
	// The cap is per endpoint: another endpoint's agent is not affected.
	e.connect(t, other, &agentclientOptionsNoStream)
	ctx := ctxT(t)
	for i, c := range clients {
		if _, err := c.Call(ctx, "list_todos", map[string]any{}); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	if err := clients[0].Close(); err != nil {
		t.Fatal(err)
	}
	// The 64 initializes spent the burst: the next one waits for the rate (2/s) to refill.
	eventually(t, soon, "an initialize after a close", func() bool {
		return rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(initBody), mcpHeaders).StatusCode == http.StatusOK
	})
}

// initialize is rate-limited per endpoint (default 2/s, burst 64), without touching live
// sessions. The session cap is raised here so that the rate is what refuses.
func TestInitializeRateLimited(t *testing.T) {
	e := newEnv(t, func(c *serverConfig) { c.MaxSessionsPerEndpoint = 1000 })
	ep := e.vend("ann", []string{"inbox"}, nil)
	start := time.Now()
	c := e.connect(t, ep, &agentclientOptionsNoStream) // 1 of the burst
	ok := 1
	var resp *http.Response
	for ; ok < 100; ok++ {
		resp = rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(initBody), mcpHeaders)
		if resp.StatusCode != http.StatusOK {
			break
		}
	}
	// The burst, plus what the rate (2/s) refilled while the loop ran.
	if most := 64 + int(2*time.Since(start).Seconds()) + 1; ok < 64 || ok > most {
		t.Fatalf("%d initializes before the first refusal, want 64..%d", ok, most)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(strings.NewReader(string(raw)))
	want429(t, resp, "SWITCHBOARD_INIT_RATE")
	if !strings.Contains(string(raw), "2/s") {
		t.Fatalf("message does not give the rate: %s", raw)
	}
	if _, err := c.Call(ctxT(t), "list_todos", map[string]any{}); err != nil {
		t.Fatal(err)
	}
}
