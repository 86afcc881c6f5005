package mcpapi

import (
	"runtime"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
