package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchboard/tests/e2e/agentclient"
	"switchboard/tests/testproc"
)

// A rolling restart of two `switchboard serve` replicas behind HAProxy (docs/haproxy.cfg) while
// 8 agents drain through it (half with GET streams, every claim_next waiting up to 2 s) and a
// sender delivers signed webhooks through it: each replica in turn gets SIGTERM, drains (503
// for new sessions and streams, waiting calls answered empty, in-flight calls finished) and
// exits 0, and a new one starts on its address. Nothing is lost or doubled, no delivery is
// refused, and no tool call fails: the only client errors are transport errors of calls on a
// stopped replica's session, retried on a new session.
func TestRollingRestartBehindHAProxy(t *testing.T) {
	testproc.HAProxy(t)
	bin := testproc.Switchboard(t)
	e := newEnv(t)
	env := []string{"SWITCHBOARD_TOOL_RATE=100000/s", "SWITCHBOARD_TOOL_BURST=100000"}
	addrs := []string{freeAddr(t), freeAddr(t)}
	terms := make([]func() int, 2)
	for i, a := range addrs {
		_, terms[i] = serveProcessAt(t, bin, e.dsn, a, env...)
	}
	lb := testproc.StartDocsHAProxy(t, freeAddr(t), addrs...)

	ep, hook, secret := liveEndpoint(t, e, lb)
	_, path, ok := strings.Cut(hook, "/webhooks/")
	if !ok {
		t.Fatalf("ingest url %q", hook)
	}
	l := &liveLoad{mcpURL: lb + "/mcp/" + ep.Slug, cred: ep.Cred, hookURL: lb + "/webhooks/" + path, secret: secret,
		reconnect: true, wait: 2}
	startLoad(t, l, 8, 20*time.Millisecond)
	time.Sleep(2 * time.Second)

	for i, a := range addrs {
		start := time.Now()
		if code := terms[i](); code != 0 {
			t.Fatalf("replica %d exit status %d", i+1, code)
		}
		t.Logf("replica %d drained and exited %v after SIGTERM", i+1, time.Since(start).Round(time.Millisecond))
		_, terms[i] = serveProcessAt(t, bin, e.dsn, a, env...)
		// HAProxy marks it up after two good checks a second apart.
		eventually(t, 10*time.Second, "haproxy sends to the new replica", func() bool {
			resp, err := http.Get(lb + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
		time.Sleep(3 * time.Second)
	}
	l.finish(e, ep)
}

// The drain itself: a claim_next waiting when shutdown begins answers {empty: true} at once; a
// draining handler answers 503 to a new session and to a GET stream, while calls of existing
// sessions are served.
func TestDrainAnswersWaitsAndRefusesNewSessions(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("dee", []string{"inbox"}, nil)
	c := e.connect(t, ep, &agentclient.Options{NoStream: true})

	e.srv.MCP().Drain() // what Serve does first on shutdown (besides Doorbell().EndWaits())
	init := rawRequest(t, "POST", e.url(ep), ep.Cred,
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`),
		map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	get := rawRequest(t, "GET", e.url(ep), ep.Cred, nil, map[string]string{"Accept": "text/event-stream",
		"Mcp-Session-Id": c.Session.ID()})
	if init.StatusCode != 503 || get.StatusCode != 503 {
		t.Fatalf("draining: initialize %d, GET stream %d; want 503", init.StatusCode, get.StatusCode)
	}
	call[json.RawMessage](t, c, "list_todos", nil) // an existing session is served

	waited := make(chan claimNext, 1)
	go func() { waited <- call[claimNext](t, c, "claim_next", map[string]any{"wait_seconds": 30}) }()
	eventually(t, 5*time.Second, "claim_next waiting", func() bool { return e.srv.Doorbell().Waiting(ep.ID) == 1 })
	start := time.Now()
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	defer func() { <-stopped }()
	select {
	case got := <-waited:
		if !got.Empty {
			t.Fatalf("claim_next on shutdown: %+v", got)
		}
		t.Logf("waiting claim_next answered empty %v after shutdown began", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("waiting claim_next not answered within 3 s of shutdown")
	}
}
