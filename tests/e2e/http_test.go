package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

var wantSecurityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "strict-origin-when-cross-origin",
	"Cache-Control":           "no-store",
}

func checkSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, v := range wantSecurityHeaders {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	other := e.vend("bob", []string{"inbox"}, nil)
	url := e.url(ep)
	big := bytes.Repeat([]byte("x"), 2<<20)

	cases := []struct {
		name, method, url, cred string
		body                    []byte
		hdr                     map[string]string
		status                  int
	}{
		{"healthz", "GET", e.base + "/healthz", "", nil, nil, 200},
		{"readyz", "GET", e.base + "/readyz", "", nil, nil, 200},
		{"metrics", "GET", e.base + "/metrics", "", nil, nil, 200},
		{"unknown path", "GET", e.base + "/nope", "", nil, nil, 404},
		{"mcp root", "GET", e.base + "/mcp/", "", nil, nil, 404},
		{"401", "POST", url, "", []byte(initBody), mcpHeaders, 401},
		{"403", "POST", e.url(other), ep.Cred, []byte(initBody), mcpHeaders, 403},
		{"413", "POST", url, ep.Cred, big, mcpHeaders, 413},
		{"404 session", "POST", url, ep.Cred, []byte(initBody), map[string]string{
			"Mcp-Session-Id": "nope", "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, 404},
		{"405", "PUT", url, ep.Cred, nil, nil, 405},
		{"415", "POST", url, ep.Cred, []byte(initBody), map[string]string{"Content-Type": "text/plain", "Accept": "application/json, text/event-stream"}, 415},
		{"initialize", "POST", url, ep.Cred, []byte(initBody), mcpHeaders, 200},
		{"webhook route (none here)", "POST", e.base + "/webhooks/w/abc", "", []byte("{}"), nil, 0},
	}
	for _, tc := range cases {
		resp := rawRequest(t, tc.method, tc.url, tc.cred, tc.body, tc.hdr)
		if tc.status != 0 && resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		checkSecurityHeaders(t, tc.name, resp.Header)
	}

	// The SSE GET stream (the SDK sets Cache-Control: no-cache on it; we send no-store).
	c := e.connect(t, ep, &agentclientOptionsNoStream)
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+ep.Cred)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.Session.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	checkSecurityHeaders(t, "SSE GET", resp.Header)
	// And the response of a tool call.
	post := toolCallRaw(t, url, ep.Cred, c.Session.ID())
	checkSecurityHeaders(t, "tools/call", post.Header)
}

// toolCallRaw posts list_todos on an open session, outside the SDK client.
func toolCallRaw(t *testing.T, url, cred, session string) *http.Response {
	t.Helper()
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_todos","arguments":{}}}`
	post := rawRequest(t, "POST", url, cred, []byte(call), map[string]string{"Mcp-Session-Id": session,
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-06-18"})
	if post.StatusCode != 200 {
		t.Fatalf("tools/call: %d", post.StatusCode)
	}
	return post
}

// A tool call is answered as one application/json JSON-RPC response, not a one-event stream
// (the transport option JSONResponse, patch 2 of server/third_party/go-sdk), while the
// doorbell still rings on the session's GET stream.
func TestToolCallsAnsweredAsJSON(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	post := toolCallRaw(t, e.url(ep), ep.Cred, c.Session.ID())
	if ct := post.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("tools/call answered as %q, want application/json", ct)
	}
	var msg struct {
		ID     int `json:"id"`
		Result struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if err := json.NewDecoder(post.Body).Decode(&msg); err != nil || msg.ID != 7 || msg.Result.IsError {
		t.Fatalf("tools/call body: %+v %v", msg, err)
	}
	id := e.push(ep, "inbox", "rings on the stream")
	if _, err := c.WaitNotification(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
}

// A 2 MiB body is refused with 413 before any JSON-RPC parsing: the body is not even JSON, and
// the answer is the same whether the length is declared or the body is chunked.
func TestBodyCapBeforeJSONRPC(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	url := e.url(ep)
	junk := bytes.Repeat([]byte("x"), 2<<20)

	resp := rawRequest(t, "POST", url, ep.Cred, junk, mcpHeaders)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared length: %d", resp.StatusCode)
	}

	// Chunked (no Content-Length): the cap applies while reading.
	req, _ := http.NewRequest("POST", url, io.MultiReader(bytes.NewReader(junk)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+ep.Cred)
	for k, v := range mcpHeaders {
		req.Header.Set(k, v)
	}
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if r2.StatusCode != http.StatusRequestEntityTooLarge {
		b, _ := io.ReadAll(r2.Body)
		t.Fatalf("chunked: %d %s", r2.StatusCode, b)
	}
	// Same for an existing session: a chunked oversized call is refused by the cap, not parsed.
	c := e.connect(t, ep, &agentclientOptionsNoStream)
	req, _ = http.NewRequest("POST", url, io.MultiReader(bytes.NewReader(junk)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+ep.Cred)
	req.Header.Set("Mcp-Session-Id", c.Session.ID())
	for k, v := range mcpHeaders {
		req.Header.Set(k, v)
	}
	r3, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Body.Close()
	if r3.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked in session: %d", r3.StatusCode)
	}
	checkSecurityHeaders(t, "chunked 413", r3.Header)
}

// The DNS-rebinding guard: on a loopback listener, a Host that is neither loopback nor the
// configured base URL's host is refused.
func TestHostCheck(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	send := func(host string) int {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := initBody
		req := "POST /mcp/" + ep.Slug + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + ep.Cred +
			"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\n" +
			"Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("evil.example.com"); got != http.StatusForbidden {
		t.Fatalf("rebinding host: %d", got)
	}
	if got := send("localhost:1234"); got != http.StatusOK {
		t.Fatalf("localhost: %d", got)
	}

	pub := e.startServer(func(c *serverConfig) { c.BaseURL = "https://switchboard.example.org" })
	conn, err := net.Dial("tcp", strings.TrimPrefix(pub.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "GET /healthz HTTP/1.1\r\nHost: switchboard.example.org\r\nConnection: close\r\n\r\n"
	_, _ = conn.Write([]byte(req))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz via public host: %d", resp.StatusCode)
	}
	// Through the public name the MCP surface answers (401 without a credential, not 403).
	if got := sendTo(t, pub.base, "switchboard.example.org", "/mcp/"+ep.Slug); got != http.StatusUnauthorized {
		t.Fatalf("base URL host: %d", got)
	}
}

func sendTo(t *testing.T, base, host, path string) int {
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
	_, _ = conn.Write([]byte(req))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestMetricsExposeCounts(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	call[claimNext](t, c, "claim_next", nil)
	wantCode(t, c, "not_found", "get_todo", map[string]any{"id": "nope"})
	e.push(ep, "inbox", "x")
	resp := rawRequest(t, "GET", e.base+"/metrics", "", nil, nil)
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`switchboard_tool_calls_total{code="ok",verb="claim_next"} 1`,
		`switchboard_tool_calls_total{code="not_found",verb="get_todo"} 1`,
		`switchboard_doorbell_sent_total`,
		`switchboard_doorbell_dropped_total`,
		`switchboard_reaper_runs_total`,
		`switchboard_queue_todos{endpoint="` + ep.Slug + `",queue="inbox",state="pending"} 1`,
		`switchboard_mcp_sessions 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
