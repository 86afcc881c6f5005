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

// The go-sdk patch 6 (server/third_party/go-sdk/SWITCHBOARD.md): once a request is answered,
// nothing of it stays with its session. The connection's handler queue was popped by reslicing,
// which kept the last request taken (its params, its HTTP headers) in the backing array for as
// long as the session lived: after one 900 KiB argument, each session held that much.
func TestSDKSessionKeepsNoAnsweredRequest(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	post := func(tr *mcp.StreamableServerTransport, body string) int {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		w := httptest.NewRecorder()
		tr.ServeHTTP(w, r)
		return w.Code
	}
	const n, size = 8, 900 << 10
	big := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"a":"` +
		strings.Repeat("x", size) + `"}}}`
	var sessions []*mcp.ServerSession
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		tr := &mcp.StreamableServerTransport{SessionID: fmt.Sprint("s", i), JSONResponse: true}
		ss, err := srv.Connect(context.Background(), &channelTransport{inner: tr}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, ss)
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`, big,
		} {
			if code := post(tr, body); code >= 300 {
				t.Fatalf("POST answered %d", code)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n*size/2 {
		t.Fatalf("%d sessions hold %d KiB after one %d KiB call each: answered requests are kept", n, grew>>10, size>>10)
	}
	for _, ss := range sessions {
		_ = ss.Close()
	}
}

// Patch 6 again: a batch (2025-03-26) of thousands of calls leaves no map sized for thousands
// in its session once answered (Go maps do not shrink).
func TestSDKSessionShrinksAfterBatch(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	post := func(tr *mcp.StreamableServerTransport, body string) int {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2025-03-26")
		w := httptest.NewRecorder()
		tr.ServeHTTP(w, r)
		return w.Code
	}
	const n, calls = 8, 10_000
	pings := make([]string, calls)
	for i := range pings {
		pings[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i+10)
	}
	batch := "[" + strings.Join(pings, ",") + "]"
	var sessions []*mcp.ServerSession
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		tr := &mcp.StreamableServerTransport{SessionID: fmt.Sprint("s", i), JSONResponse: true}
		ss, err := srv.Connect(context.Background(), &channelTransport{inner: tr}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, ss)
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`, batch,
		} {
			if code := post(tr, body); code >= 300 {
				t.Fatalf("POST answered %d", code)
			}
		}
	}
	runtime.GC()
	runtime.GC() // twice: encoding/json's pooled buffers go with the second
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n*256<<10 {
		t.Fatalf("%d sessions hold %d KiB after one batch of %d pings each", n, grew>>10, calls)
	}
	for _, ss := range sessions {
		_ = ss.Close()
	}
}
