package mcpapi

import (
	"context"
	"runtime"
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
