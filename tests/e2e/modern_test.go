package e2e

// MCP 2026-07-28 on the wire: sessionless requests with their version in _meta and the
// MCP-Protocol-Version header, checked by hand (the go-sdk client as released is in tests/sdk).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchboard/server/store"
)

const modernVersion = "2026-07-28"

// modernMeta is the per-request _meta of a 2026-07-28 client (SEP-2575).
func modernMeta(caps map[string]any) map[string]any {
	if caps == nil {
		caps = map[string]any{}
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    modernVersion,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-test", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

// modernRequest builds a 2026-07-28 POST of msg (a JSON-RPC message) with the headers a client
// sends; mcpMethod is the Mcp-Method header (a test of a mismatch names another method).
func modernRequest(url, cred, mcpMethod string, msg map[string]any) *http.Request {
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("MCP-Protocol-Version", modernVersion)
	req.Header.Set("Mcp-Method", mcpMethod)
	return req
}

// modernPost sends one 2026-07-28 request; name is the Mcp-Name header ("" none).
func modernPost(t *testing.T, url, cred, method, name string, params map[string]any) (*http.Response, map[string]any) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	if _, ok := params["_meta"]; !ok {
		params["_meta"] = modernMeta(nil)
	}
	req := modernRequest(url, cred, method, map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				_ = json.Unmarshal([]byte(d), &out)
			}
		}
	} else {
		_ = json.Unmarshal(raw, &out)
	}
	return resp, out
}

// A 2026-07-28 tools/call with no request before it is answered, and leaves no session: no
// Mcp-Session-Id on any answer, nothing counted as a session.
func TestModernToolCallFirst(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("modern", []string{"inbox"}, nil)
	id := e.push(ep, "inbox", "first")
	resp, out := modernPost(t, e.url(ep), ep.Cred, "tools/call", "claim_next",
		map[string]any{"name": "claim_next", "arguments": map[string]any{}})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, out)
	}
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		t.Fatalf("Mcp-Session-Id %q on a 2026-07-28 answer", s)
	}
	res, _ := out["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	todo, _ := sc["todo"].(map[string]any)
	if todo["id"] != id {
		t.Fatalf("claim_next answered %v", out)
	}
	if n := metricValue(t, e.base, "switchboard_mcp_sessions"); n != 0 {
		t.Fatalf("%v sessions after a 2026-07-28 call", n)
	}

	// server/discover names 2026-07-28, the capabilities and the instructions: the same as
	// initialize's (a hosted host reads them there).
	_, out = modernPost(t, e.url(ep), ep.Cred, "server/discover", "", nil)
	res, _ = out["result"].(map[string]any)
	versions, _ := res["supportedVersions"].([]any)
	if len(versions) == 0 || !strings.Contains(fmt.Sprint(versions), modernVersion) {
		t.Fatalf("server/discover: %v", out)
	}
	if init := e.connect(t, ep, nil).Session.InitializeResult(); res["instructions"] != init.Instructions {
		t.Fatalf("server/discover instructions %q, initialize's %q", res["instructions"], init.Instructions)
	}
	caps, _ := res["capabilities"].(map[string]any)
	rc, _ := caps["resources"].(map[string]any)
	if rc["subscribe"] != true {
		t.Fatalf("capabilities %v: want resources.subscribe", caps)
	}

	// tools/list: the allowlist, with a positive ttlMs.
	_, out = modernPost(t, e.url(ep), ep.Cred, "tools/list", "", nil)
	res, _ = out["result"].(map[string]any)
	if ttl, _ := res["ttlMs"].(float64); ttl <= 0 {
		t.Fatalf("tools/list ttlMs %v", res["ttlMs"])
	}
	// prompts/* is still not served.
	_, out = modernPost(t, e.url(ep), ep.Cred, "prompts/list", "", nil)
	if errObj, _ := out["error"].(map[string]any); errObj == nil || errObj["code"] != float64(-32601) {
		t.Fatalf("prompts/list: %v", out)
	}
}

// A Mcp-Method header that does not match the body is refused with -32020 (HeaderMismatch);
// so is an Mcp-Name that names another tool.
func TestModernHeaderMismatch(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("mismatch", []string{"inbox"}, nil)
	req := modernRequest(e.url(ep), ep.Cred, "tools/call", map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/list",
		"params": map[string]any{"_meta": modernMeta(nil)}})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode != 400 || out.Error.Code != -32020 {
		t.Fatalf("mismatched Mcp-Method: %d %s", resp.StatusCode, raw)
	}
	r2, out2 := modernPost(t, e.url(ep), ep.Cred, "tools/call", "list_todos",
		map[string]any{"name": "claim_next", "arguments": map[string]any{}})
	if errObj, _ := out2["error"].(map[string]any); r2.StatusCode != 400 || errObj["code"] != float64(-32020) {
		t.Fatalf("mismatched Mcp-Name: %d %v", r2.StatusCode, out2)
	}
}

// A revoked credential gets 401 on 2026-07-28 too, and a wrong one at once.
func TestModernRevoked(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("revoked", []string{"inbox"}, nil)
	if resp, _ := modernPost(t, e.url(ep), ep.Cred, "tools/list", "", nil); resp.StatusCode != 200 {
		t.Fatalf("before revocation: %d", resp.StatusCode)
	}
	// The credential is trusted for its epoch (as a session is) until the revocation's
	// notification arrives, within milliseconds; a tool call is refused by the database at once.
	e.exec(`SELECT switchboard.endpoint_revoke($1)`, ep.ID)
	var resp *http.Response
	eventually(t, 5*time.Second, "401 for the revoked credential", func() bool {
		resp, _ = modernPost(t, e.url(ep), ep.Cred, "tools/list", "", nil)
		return resp.StatusCode == 401
	})
	if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("revoked credential: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp, _ := modernPost(t, e.url(ep), "sbk_wrong", "tools/list", "", nil); resp.StatusCode != 401 {
		t.Fatalf("unknown credential: %d", resp.StatusCode)
	}
}

// openListen opens a subscriptions/listen stream and returns it once its ack arrived.
func openListen(t *testing.T, url, cred string, caps map[string]any, notifications map[string]any) (*http.Response, *bufio.Reader) {
	t.Helper()
	req := modernRequest(url, cred, "subscriptions/listen", map[string]any{"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
		"params": map[string]any{"_meta": modernMeta(caps), "notifications": notifications}})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("listen: %d %s", resp.StatusCode, raw)
		return resp, nil
	}
	t.Cleanup(func() { resp.Body.Close() })
	rd := bufio.NewReader(resp.Body)
	if m := nextEvent(t, rd, 5*time.Second); m["method"] != "notifications/subscriptions/acknowledged" {
		t.Fatalf("first listen message %v", m)
	}
	return resp, rd
}

// streamEnd reports when a stream's body ends (the server closed it); the body is read and
// dropped until then.
func streamEnd(body io.Reader) <-chan time.Time {
	end := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, body)
		end <- time.Now()
	}()
	return end
}

// nextEvent reads the next SSE data line of a stream as JSON.
func nextEvent(t *testing.T, rd *bufio.Reader, within time.Duration) map[string]any {
	t.Helper()
	got := make(chan map[string]any, 1)
	go func() {
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				got <- nil
				return
			}
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
				var m map[string]any
				_ = json.Unmarshal([]byte(d), &m)
				got <- m
				return
			}
		}
	}()
	select {
	case m := <-got:
		return m
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
		return nil
	}
}

// 64 listen streams fit one endpoint (the session cap); the 65th gets 429.
func TestModernListenCap(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("listeners", []string{"inbox"}, nil)
	uri := "switchboard://" + ep.Slug + "/queues/inbox"
	for i := range 64 {
		if resp, _ := openListen(t, e.url(ep), ep.Cred, nil, map[string]any{"resourceSubscriptions": []string{uri}}); resp.StatusCode != 200 {
			t.Fatalf("listen %d: %d", i+1, resp.StatusCode)
		}
	}
	resp, _ := openListen(t, e.url(ep), ep.Cred, nil, map[string]any{"resourceSubscriptions": []string{uri}})
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("65th listen: %d", resp.StatusCode)
	}
	resp.Body.Close()
	// The cap is shared: a 2025 session is refused too while 64 listens are open.
	resp = rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(initBody), mcpHeaders)
	if resp.StatusCode != 429 {
		t.Fatalf("initialize beside 64 listens: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

// A listen stream of a claude/channel client is rung for new work with
// notifications/claude/channel; one with a resource subscription hears resources/updated.
func TestModernListenRings(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("rings", []string{"inbox"}, nil)
	uri := "switchboard://" + ep.Slug + "/queues/inbox"
	_, channel := openListen(t, e.url(ep), ep.Cred, map[string]any{"experimental": map[string]any{"claude/channel": map[string]any{}}},
		map[string]any{})
	_, res := openListen(t, e.url(ep), ep.Cred, nil, map[string]any{"resourceSubscriptions": []string{uri}})
	start := time.Now()
	id := e.push(ep, "inbox", "ring me")
	m := nextEvent(t, res, time.Second)
	params, _ := m["params"].(map[string]any)
	if m["method"] != "notifications/resources/updated" || params["uri"] != uri {
		t.Fatalf("resource listener got %v", m)
	}
	t.Logf("resources/updated %v after the push", time.Since(start))
	m = nextEvent(t, channel, soon)
	params, _ = m["params"].(map[string]any)
	meta, _ := params["meta"].(map[string]any)
	if m["method"] != "notifications/claude/channel" || meta["todo_id"] != id {
		t.Fatalf("channel listener got %v", m)
	}

	// resources/read: counts and the oldest claimable rows.
	_, out := modernPost(t, e.url(ep), ep.Cred, "resources/read", uri, map[string]any{"uri": uri})
	result, _ := out["result"].(map[string]any)
	contents, _ := result["contents"].([]any)
	if len(contents) != 1 || !strings.Contains(fmt.Sprint(contents[0]), id) {
		t.Fatalf("resources/read: %v", out)
	}
	// Another endpoint's queue is not a resource of this one.
	_, out = modernPost(t, e.url(ep), ep.Cred, "resources/read", "switchboard://other/queues/inbox",
		map[string]any{"uri": "switchboard://other/queues/inbox"})
	if out["error"] == nil {
		t.Fatalf("read of another endpoint's queue: %v", out)
	}
}

// Shutting down ends the open listen streams: a listener does not hold the server up.
func TestModernListenShutdown(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("shutdown", []string{"inbox"}, nil)
	_, rd := openListen(t, e.url(ep), ep.Cred, map[string]any{"experimental": map[string]any{"claude/channel": map[string]any{}}},
		map[string]any{})
	start := time.Now()
	e.stop()                                       // fails the test when it hangs
	_, _ = io.ReadAll(rd)                          // ends with the stream
	if d := time.Since(start); d > 4*time.Second { // under the 5 s shutdown timeout, which would end it anyway
		t.Fatalf("shutdown with a listen stream open took %v", d)
	}
	t.Logf("shutdown with a listen stream open took %v", time.Since(start))
}

// Revoking an endpoint ends its listen streams, as it closes its sessions: a revoked
// credential hears nothing more, neither the channel nor resources/updated.
func TestModernListenRevoked(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("revoked-listens", []string{"inbox"}, nil)
	uri := "switchboard://" + ep.Slug + "/queues/inbox"
	_, channel := openListen(t, e.url(ep), ep.Cred, map[string]any{"experimental": map[string]any{"claude/channel": map[string]any{}}},
		map[string]any{})
	_, res := openListen(t, e.url(ep), ep.Cred, nil, map[string]any{"resourceSubscriptions": []string{uri}})
	ends := map[string]<-chan time.Time{"channel": streamEnd(channel), "resource": streamEnd(res)}
	e.exec(`SELECT switchboard.endpoint_revoke($1)`, ep.ID)
	for name, end := range ends {
		select {
		case <-end:
			t.Logf("%s listen stream ended", name)
		case <-time.After(soon):
			t.Fatalf("the %s listen stream outlived its endpoint's revocation by %v", name, soon)
		}
	}
}

// A listen stream has no next request for its credential to be checked on: a rotation closes
// the streams of the old credential (the new one's stays), and so does a recheck (an OAuth
// token revoked) of a credential that no longer resolves.
func TestModernListenCredentialChecked(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("rotated-listens", []string{"inbox"}, nil)
	caps := map[string]any{"experimental": map[string]any{"claude/channel": map[string]any{}}}
	_, rd := openListen(t, e.url(ep), ep.Cred, caps, map[string]any{})
	old := streamEnd(rd)
	next := ep
	next.Cred = "sbk_rotated_" + itoa(int(time.Now().UnixNano()))
	e.exec(`SELECT switchboard.endpoint_rotate($1, $2, $3, NULL)`, ep.ID, store.CredentialHash(next.Cred), next.Cred[:8])
	select {
	case <-old:
	case <-time.After(soon):
		t.Fatal("the old credential's listen stream outlived the rotation")
	}

	_, rd = openListen(t, e.url(next), next.Cred, caps, map[string]any{})
	kept := streamEnd(rd)
	e.srv.MCP().Recheck(ep.ID) // the credential still resolves: the stream stays
	select {
	case <-kept:
		t.Fatal("a recheck closed a listen stream whose credential resolves")
	case <-time.After(300 * time.Millisecond):
	}
	// No notification for this change (an OAuth revocation sends recheck:<endpoint>).
	e.exec(`UPDATE switchboard.endpoints SET credential_hash = $2 WHERE id = $1`, ep.ID, store.CredentialHash("sbk_gone"))
	e.srv.MCP().Recheck(ep.ID)
	select {
	case <-kept:
	case <-time.After(soon):
		t.Fatal("a listen stream whose credential no longer resolves outlived the recheck")
	}
}
