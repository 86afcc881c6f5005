// Command shim is the thinnest HTTP layer over the todo functions, for the benchmark only: the
// claim_next and complete calls of switchboard serve (the same store calls, pool and JSON
// result shape) behind plain net/http and encoding/json, with no MCP, sessions, auth, limits or
// logging. Beside the SQL baseline and the MCP server it splits the agent path's overhead into
// "an HTTP hop" and "the MCP layer on top of it" (tests/bench, section mcp).
//
//	DATABASE_URL=postgres://... SWITCHBOARD_ADDR=127.0.0.1:8090 shim serve
//	POST /call/{endpoint}  {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"claim_next","arguments":{}}}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"switchboard/server"
	"switchboard/server/store"
)

type call struct {
	ID     json.RawMessage `json:"id"`
	Params struct {
		Name      string `json:"name"`
		Arguments struct {
			ID     string          `json:"id"`
			Result json.RawMessage `json:"result"`
		} `json:"arguments"`
	} `json:"params"`
}

// reply has the shape of an MCP tool result: the JSON as structured content and as text.
type reply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  struct {
		Content           []content       `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
}

type content struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func main() {
	if len(os.Args) != 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: DATABASE_URL=... SWITCHBOARD_ADDR=host:port shim serve")
		os.Exit(2)
	}
	server.TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := store.Open(ctx, os.Getenv("DATABASE_URL"), 0) // sized as switchboard serve's
	if err != nil {
		fmt.Fprintln(os.Stderr, "shim:", err)
		os.Exit(1)
	}
	defer pool.Close()
	st := store.New(pool)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /call/{endpoint}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var c call
		if err == nil {
			err = json.Unmarshal(body, &c)
		}
		if err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		ep := r.PathValue("endpoint")
		var out []byte
		switch c.Params.Name {
		case "claim_next":
			out, err = st.ClaimNext(r.Context(), ep, store.NextOptions{})
		case "complete":
			a := c.Params.Arguments
			out, err = st.Finish(r.Context(), store.Complete, ep, a.ID, a.Result, nil, nil)
		default:
			http.Error(w, "unknown tool", http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, store.Classify(err).Error(), http.StatusConflict)
			return
		}
		rep := reply{JSONRPC: "2.0", ID: c.ID}
		rep.Result.StructuredContent = out
		rep.Result.Content = []content{{"text", string(out)}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
	srv := &http.Server{Addr: os.Getenv("SWITCHBOARD_ADDR"), Handler: mux}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "shim:", err)
		os.Exit(1)
	}
}
