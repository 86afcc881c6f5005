package mcpapi

// A tool call on a stateful session is answered, by default, as a one-event text/event-stream
// response. The SDK can answer it as plain application/json instead (StreamableHTTPOptions.
// JSONResponse), which both sides parse with less work: in the MCP benchmark the server's CPU
// per call fell by about a tenth (a sixth with two calls per todo), the go-sdk client's by up to
// a sixth. But the option reaches a transport only through StreamableHTTPHandler, which we
// cannot use (channel.go needs each session's Connection), and go-sdk v1.8.0 keeps the
// transport's field unexported ("TODO(rfindley): jsonResponse should be exported ... to allow
// users to write their own streamable HTTP handler"). Until it is, this file sets that one field
// by name. It changes only the framing of responses to single-message POSTs; notifications (the
// doorbell) still take the standalone GET stream. If a later SDK renames the field, preferJSON
// reports false, sessions keep working with event-stream responses, a warning is logged at
// start, and tests/e2e's TestToolCallsAnsweredAsJSON fails.

import (
	"reflect"
	"unsafe"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// preferJSON asks t to answer single-message POSTs with application/json. It reports whether
// the SDK still has the field.
func preferJSON(t *mcp.StreamableServerTransport) bool {
	f := reflect.ValueOf(t).Elem().FieldByName("jsonResponse")
	if !f.IsValid() || f.Kind() != reflect.Bool {
		return false
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().SetBool(true)
	return true
}
