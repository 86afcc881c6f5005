// Command ceiling is the go-sdk transport with nothing behind it, for the benchmark only: an
// MCP server on the SDK's own StreamableHTTPHandler (sessions, JSON responses, the SDK switchboard
// builds) with the two tools of the drain, claim_next and complete, whose input schemas are
// switchboard's and whose answers are a canned todo of the real answer's size. No SQL, auth,
// limits or logging. It is the ceiling an MCP claim_next+complete drain could reach on this
// machine with go-sdk at both ends (tests/bench, section mcp).
//
//	SWITCHBOARD_ADDR=127.0.0.1:8091 ceiling serve
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server"
	"switchboard/server/todotools"
	"switchboard/server/tool"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: SWITCHBOARD_ADDR=host:port ceiling serve")
		os.Exit(2)
	}
	server.TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s := mcp.NewServer(&mcp.Implementation{Name: "ceiling", Version: "bench"}, nil)
	var seq atomic.Uint64
	var reg tool.Registry
	reg.Add(todotools.Tools()...)
	for _, t := range reg.Published() {
		if t.Name != "claim_next" && t.Name != "complete" {
			continue
		}
		name := t.Name
		s.AddTool(t, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// Decode the arguments as a handler would, and answer a todo of the real size.
			var args map[string]json.RawMessage
			_ = json.Unmarshal(req.Params.Arguments, &args)
			out := todo(strconv.FormatUint(seq.Add(1), 10), name == "claim_next")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}, StructuredContent: out}, nil
		})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{JSONResponse: true, DisableLocalhostProtection: true})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {})
	mux.Handle("/mcp/", h)
	srv := &http.Server{Addr: os.Getenv("SWITCHBOARD_ADDR"), Handler: mux}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(1)
	}
}

// todo is an answer shaped and sized as switchboard's (claim_next: the todo with its lease and
// payload; complete: the todo done).
func todo(n string, claim bool) json.RawMessage {
	id := fmt.Sprintf("0193b3f0-0000-7000-8000-%012s", n)
	t := map[string]any{"id": id, "queue": "inbox", "state": "done", "attempt": 1, "max_attempts": 5,
		"title": "bench todo " + n, "source": "push", "kind": "push", "owner": nil, "lease_expires_at": nil,
		"next_retry_at": nil, "dead_letter": false, "created_at": "2026-12-02T01:00:00.000000Z", "payload_size": 24}
	if !claim {
		out, _ := json.Marshal(t)
		return out
	}
	t["state"], t["owner"], t["lease_expires_at"] = "claimed", "agent:bench", "2026-12-02T01:05:00.000000Z"
	t["payload"], t["routing"] = map[string]any{"n": n, "bench": true}, nil
	out, _ := json.Marshal(map[string]any{"empty": false, "todo": t})
	return out
}
