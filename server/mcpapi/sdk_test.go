package mcpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The go-sdk in server/third_party/go-sdk carries one patch (its SWITCHBOARD.md): decoding a
// message must not allocate segmentio's 32 KiB stream buffer. Without the patch (the replace
// line dropped from go.mod, or an SDK copied in without the change) every decode allocates at
// least that much.
func TestSDKDecodesWithoutBigBuffers(t *testing.T) {
	msg := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"claim_next","arguments":{}}}`)
	const n = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		if _, err := jsonrpc.DecodeMessage(msg); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 8<<10 {
		t.Fatalf("decoding one %d-byte message allocates %d bytes: the go-sdk patch is missing", len(msg), per)
	}
}

// The go-sdk hook (server/third_party/go-sdk/SWITCHBOARD.md): ServerSession.Notify sends a
// notification of an extension (the doorbell's notifications/claude/channel), and refuses the
// SDK's own methods, which have typed senders. The doorbell tests in tests/e2e see it delivered.
func TestSDKNotifiesExtensionsOnly(t *testing.T) {
	ctx := context.Background()
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, m := range []string{"notifications/progress", "tools/list", "claude/channel"} {
		if err := ss.Notify(ctx, m, map[string]any{}); err == nil {
			t.Errorf("Notify(%q) accepted", m)
		}
	}
	if err := ss.Notify(ctx, "notifications/claude/channel", map[string]any{"content": "x"}); err != nil {
		t.Fatalf("Notify: %v", err)
	}
}

// sessionsAfter connects n sessions of srv on transports of their own, sends each the bodies
// (after initialize) on protocol version, and reports how much the live heap grew while they
// stay open (two collections: encoding/json's pooled buffers go with the second).
func sessionsAfter(t *testing.T, srv *mcp.Server, n int, version string, bodies ...string) int64 {
	t.Helper()
	post := func(tr *mcp.StreamableServerTransport, body string) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", version)
		w := httptest.NewRecorder()
		tr.ServeHTTP(w, r)
		if w.Code >= 300 {
			t.Fatalf("POST answered %d", w.Code)
		}
	}
	initialize := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`, version)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var sessions []*mcp.ServerSession
	for i := range n {
		tr := &mcp.StreamableServerTransport{SessionID: fmt.Sprint("s", i)}
		ss, err := srv.Connect(context.Background(), tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, ss)
		for _, body := range append([]string{initialize, `{"jsonrpc":"2.0","method":"notifications/initialized"}`}, bodies...) {
			post(tr, body)
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, ss := range sessions {
		_ = ss.Close()
	}
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// go-sdk patch 07 (server/third_party/go-sdk/SWITCHBOARD.md): once a request is answered,
// nothing of it stays with its session. The connection's handler queue was popped by reslicing,
// which kept the last request taken (its params, its HTTP headers) in the backing array for as
// long as the session lived: after one 900 KiB argument, each session held that much.
func TestSDKSessionKeepsNoAnsweredRequest(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	const n, size = 8, 900 << 10
	big := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"a":"` +
		strings.Repeat("x", size) + `"}}}`
	if grew := sessionsAfter(t, srv, n, "2025-06-18", big); grew > n*size/2 {
		t.Fatalf("%d sessions hold %d KiB after one %d KiB call each: answered requests are kept", n, grew>>10, size>>10)
	}
}

// Patch 07 again: a batch (2025-03-26) of thousands of calls leaves no map sized for thousands
// in its session once answered (Go maps do not shrink).
func TestSDKSessionShrinksAfterBatch(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	const n, calls = 8, 10_000
	pings := make([]string, calls)
	for i := range pings {
		pings[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i+10)
	}
	if grew := sessionsAfter(t, srv, n, "2025-03-26", "["+strings.Join(pings, ",")+"]"); grew > n*256<<10 {
		t.Fatalf("%d sessions hold %d KiB after one batch of %d pings each", n, grew>>10, calls)
	}
}
