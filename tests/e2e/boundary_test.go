package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rpcError reads a JSON-RPC error response body.
func rpcError(t *testing.T, resp *http.Response) (id any, code int64, message string) {
	t.Helper()
	var body struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &body); err != nil || body.JSONRPC != "2.0" {
		t.Fatalf("not a JSON-RPC response: %s", raw)
	}
	return body.ID, body.Error.Code, body.Error.Message
}

// A request other than initialize without Mcp-Session-Id is refused with HTTP 400 and an error
// that says what to do, and no session is made for it.
func TestSessionlessRequestIs400(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	for _, body := range []string{`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"claim_next","arguments":{}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`} {
		resp := rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(body), mcpHeaders)
		var got struct {
			Error struct{ Code, Message string }
		}
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &got) != nil || got.Error.Code != "invalid_argument" ||
			!strings.Contains(got.Error.Message, "Mcp-Session-Id") || !strings.Contains(got.Error.Message, "initialize") {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, raw)
		}
	}
	if n := e.srv.MCP().SessionCount(ep.ID); n != 0 {
		t.Fatalf("%d sessions after session-less requests", n)
	}
	if resp := rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(initBody), mcpHeaders); resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
}

// A server/discover probe (Claude Code sends one first) is answered by protocol version alone:
// whatever client sends it, it learns that 2026-07-28 is spoken, and no session is made. No
// client is served by its name (docs/clients.md says what each receives).
func TestServerDiscoverAnswered(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	hdr := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
	for k, v := range mcpHeaders {
		hdr[k] = v
	}
	for _, client := range []string{"claude-code", "another-client"} {
		resp := rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(`{"jsonrpc":"2.0","id":"probe-1","method":"server/discover",`+
			`"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",`+
			`"io.modelcontextprotocol/clientInfo":{"name":"`+client+`","version":"2.1.328"},`+
			`"io.modelcontextprotocol/clientCapabilities":{}}}}`), hdr)
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"2026-07-28"`) {
			t.Fatalf("%s: %d %s", client, resp.StatusCode, raw)
		}
	}
	if n := e.srv.MCP().SessionCount(ep.ID); n != 0 {
		t.Fatalf("%d sessions after the probes", n)
	}
}

// An unknown MCP-Protocol-Version is refused with the versions that would work (the SDK's
// message, in Switchboard's error shape).
func TestUnsupportedProtocolVersionNamed(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	hdr := map[string]string{"MCP-Protocol-Version": "1999-01-01"}
	for k, v := range mcpHeaders {
		hdr[k] = v
	}
	resp := rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(initBody), hdr)
	var body struct {
		Error struct{ Code, Message string }
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &body) != nil || body.Error.Code != "invalid_argument" ||
		!strings.Contains(body.Error.Message, "nsupported protocol version") || !strings.Contains(body.Error.Message, "2025-06-18") {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
}

// Methods of capabilities the server does not declare answer -32601, as initialize implies;
// resources are declared (the granted queues), and a URI that is not one is not found.
func TestUndeclaredCapabilitiesMethodNotFound(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, &agentclientOptionsNoStream)
	caps := c.Session.InitializeResult().Capabilities
	if caps.Resources == nil || !caps.Resources.Subscribe || caps.Prompts != nil || caps.Logging != nil ||
		caps.Completions != nil || caps.Tools == nil {
		t.Fatalf("capabilities %+v", caps)
	}
	ctx := ctxT(t)
	for method, call := range map[string]func() error{
		"resources/read": func() error {
			_, err := c.Session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///x"})
			return err
		},
		"resources/subscribe": func() error {
			return c.Session.Subscribe(ctx, &mcp.SubscribeParams{URI: "file:///x"})
		},
	} {
		var werr *jsonrpc.Error
		if err := call(); !errors.As(err, &werr) || werr.Code != mcp.CodeResourceNotFound {
			t.Errorf("%s of another URI: %v, want %d", method, err, mcp.CodeResourceNotFound)
		}
	}
	calls := map[string]func() error{
		"prompts/list": func() error { _, err := c.Session.ListPrompts(ctx, nil); return err },
		"prompts/get": func() error {
			_, err := c.Session.GetPrompt(ctx, &mcp.GetPromptParams{Name: "x"})
			return err
		},
		"logging/setLevel": func() error {
			return c.Session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"})
		},
	}
	for method, call := range calls {
		var werr *jsonrpc.Error
		if err := call(); !errors.As(err, &werr) || werr.Code != jsonrpc.CodeMethodNotFound {
			t.Errorf("%s: %v, want -32601", method, err)
		}
	}
	// Tools still work on the same session.
	if _, err := c.Call(ctx, "list_todos", map[string]any{}); err != nil {
		t.Fatal(err)
	}
}
