package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveDebug serves net/http/pprof on addr until ctx ends. It is for the operator only: its own
// listener (never the public mux), off unless SWITCHBOARD_DEBUG_ADDR is set. A heap profile
// with ?gc=1 runs a garbage collection first, so /metrics read after it shows the live heap.
func serveDebug(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	log.Info("debug listener (pprof)", "addr", ln.Addr().String())
	go func() { _ = hs.Serve(ln) }()
	return nil
}
