package mcpapi

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

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

// The go-sdk patch (server/third_party/go-sdk/SWITCHBOARD.md, patch 3) hands a session's
// incoming messages to its jsonrpc2 connection from the HTTP request that carried them: a
// connected session starts no goroutine of its own, and closing it still ends it. Without the
// patch (or without channelTransport passing PushTo on) each session parks one in Read.
func TestSDKSessionKeepsNoReaderGoroutine(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	const n = 20
	var sessions []*mcp.ServerSession
	runtime.GC()
	before := runtime.NumGoroutine()
	for i := range n {
		ct := &channelTransport{inner: &mcp.StreamableServerTransport{SessionID: fmt.Sprint("s", i)}}
		ss, err := srv.Connect(context.Background(), ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, ss)
	}
	if grew := runtime.NumGoroutine() - before; grew >= n {
		t.Fatalf("%d sessions started %d goroutines: the go-sdk patch is missing", n, grew)
	}
	for _, ss := range sessions {
		_ = ss.Close()
		done := make(chan struct{})
		go func() { _ = ss.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a closed session did not end")
		}
	}
}
