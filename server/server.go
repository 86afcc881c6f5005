// Package server assembles Switchboard's HTTP server: the MCP agent surface (/mcp/{slug}) with
// the todo and webhook tool families, the webhook receiver (/webhooks/w/{token}), the OAuth
// authorization server for hosted agents (server/oauth), the human console (/console/,
// server/console), health and metrics, the doorbell
// listener and the reaper, over one PostgreSQL pool.
//
//	srv, err := server.New(cfg, pool, logger)
//	err = srv.ListenAndServe(ctx) // until ctx ends, then graceful shutdown
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/bodybudget"
	"switchboard/server/console"
	"switchboard/server/doorbell"
	"switchboard/server/events"
	"switchboard/server/httpx"
	"switchboard/server/mcpapi"
	"switchboard/server/metrics"
	"switchboard/server/oauth"
	"switchboard/server/receiver"
	"switchboard/server/revocation"
	"switchboard/server/rules"
	"switchboard/server/store"
	"switchboard/server/todotools"
	"switchboard/server/tool"
	"switchboard/server/webhooktools"
)

// Server is one Switchboard server process's worth of parts.
type Server struct {
	cfg     Config
	baseURL string
	log     *slog.Logger
	store   *store.Store
	metrics *metrics.Metrics
	tools   *tool.Registry
	bell    *doorbell.Bell
	mcp     *mcpapi.Handler
	console *console.Console
	events  *events.Runner
	hooks   *events.Client
	mux     *http.ServeMux
	handler http.Handler

	serveOnce sync.Once
	inflight  atomic.Int64 // requests being served, MCP GET and listen streams excepted
	draining  atomic.Bool  // shutting down: not ready
}

// New builds a server over an open pool. Nothing runs until Serve or ListenAndServe.
func New(cfg Config, pool *pgxpool.Pool, log *slog.Logger) (*Server, error) {
	if pool == nil {
		return nil, errors.New("server: nil pool")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	def := DefaultConfig()
	if cfg.Addr == "" {
		cfg.Addr = def.Addr
	}
	if cfg.Limits == (mcpapi.Limits{}) {
		cfg.Limits = def.Limits
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = def.ShutdownTimeout
	}
	if cfg.BodyBudget <= 0 {
		cfg.BodyBudget = def.BodyBudget
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = def.ReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = def.WriteTimeout
	}
	s := &Server{
		cfg:     cfg,
		baseURL: cfg.baseURL(cfg.Addr),
		log:     log,
		store:   store.New(pool),
		metrics: metrics.New(),
		tools:   &tool.Registry{},
		mux:     http.NewServeMux(),
	}
	s.tools.Add(todotools.Tools()...)
	s.tools.Add(webhooktools.Tools(webhooktools.New(s.store, s.baseURL))...)
	s.metrics.Registry.MustRegister(newDepthCollector(s.store), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchboard_http_requests_in_flight",
		Help: "HTTP requests being served (MCP GET and listen streams excepted): each holds its body and decoded arguments.",
	}, func() float64 { return float64(s.inflight.Load()) }))
	revocations := revocation.New(s.onRevoked)
	s.hooks = events.NewClient(cfg.EventsAllowPrivateCallbacks)
	s.events = events.NewRunner(s.store, s.hooks, log, s.metrics.Registry)
	s.bell = doorbell.New(s.store, doorbell.Config{
		Window:      cfg.DoorbellWindow,
		Revocations: revocations,
		MaxWaiting:  cfg.MaxWaiting,
		Log:         log,
		Metrics:     s.metrics,
	})
	s.bell.OnSignal(s.events.Wake)
	s.mcp = mcpapi.New(mcpapi.Options{
		Store:       s.store,
		Tools:       s.tools,
		Bell:        s.bell,
		Revocations: revocations,
		Log:         log,
		Metrics:     s.metrics,
		BaseURL:     s.baseURL,
		Limits:      cfg.Limits,
		SessionIdle: cfg.SessionIdle,
		MaxSessions: cfg.MaxSessionsPerEndpoint,
		Callbacks:   s.hooks,
	})
	s.mux.Handle("/mcp/{slug}", s.mcp)
	s.mux.Handle("POST /webhooks/w/{token}", receiver.New(s.store, log, rules.NewCache(1024), s.metrics.Ingest).
		WithBudget(bodybudget.New(cfg.BodyBudget)).WithRefusalMetrics(s.metrics.IngestRefusals, s.metrics.IngestRefusalWrites))
	// The human console (server/console): passkey sign-in and the screens under /console/.
	co := cfg.Console
	co.Store, co.BaseURL, co.Log = s.store, s.baseURL, log
	con, err := console.New(co)
	if err != nil {
		return nil, err
	}
	con.Mount(s.mux)
	s.console = con
	// OAuth for hosted agents: the discovery documents a client reads after a 401, the
	// authorization server and its consent page (server/oauth), where a signed-in owner
	// approves without an approval code.
	oo := cfg.OAuth
	oo.BaseURL, oo.Log, oo.Registerer = s.baseURL, log, s.metrics.Registry
	oo.SignedIn = con.Session
	as, err := oauth.New(s.store, oo)
	if err != nil {
		return nil, err
	}
	as.Mount(s.mux)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", s.metricsHandler())
	s.handler = httpx.SecureHeaders(s.accessLog(s.mux))
	return s, nil
}

// Handle mounts another route on the server's mux (before Serve), e.g.
// Handle("POST /webhooks/w/{token}", receiver). It gets the security headers and the
// request log like every route.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Tools is the MCP tool registry: add tool families before Serve.
func (s *Server) Tools() *tool.Registry { return s.tools }

// Metrics are the server's Prometheus collectors (shared with the webhook receiver).
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// Store is the server's store.
func (s *Server) Store() *store.Store { return s.store }

// BaseURL is the public base URL, without a trailing slash.
func (s *Server) BaseURL() string { return s.baseURL }

// Handler is the complete HTTP handler (all routes, security headers, request log).
func (s *Server) Handler() http.Handler { return s.handler }

// MCP is the agent-surface handler (session counts, for tests and operations).
func (s *Server) MCP() *mcpapi.Handler { return s.mcp }

// Console is the human console (server/console).
func (s *Server) Console() *console.Console { return s.console }

// Doorbell is the server's doorbell.
func (s *Server) Doorbell() *doorbell.Bell { return s.bell }

// ListenAndServe listens on cfg.Addr and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve runs the doorbell, the reaper and the HTTP server on ln until ctx ends, then shuts
// down gracefully: stop accepting, let in-flight requests finish, stop the reaper and the
// doorbell listener, close the MCP sessions (which ends their streams), and return. The pool
// belongs to the caller, who closes it afterwards. Serve may be called once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	err := errors.New("server: Serve called twice")
	s.serveOnce.Do(func() { err = s.serve(ctx, ln) })
	return err
}

func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.cfg.ReadTimeout,  // lifted for MCP GET streams (accessLog)
		WriteTimeout:      s.cfg.WriteTimeout, // likewise
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.bell.Start()
	s.mcp.Start()
	s.events.Start()
	// The CLI prints MCP URLs from this record; a server that cannot write it still serves.
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := s.store.RecordBaseURL(rctx, s.baseURL); err != nil {
		s.log.Warn("cannot record the base URL for the CLI", "err", store.Classify(err).Unwrap())
	}
	rcancel()
	reap := startReaper(s.store, s.cfg.ReaperInterval, s.cfg.PurgeInterval, s.log, s.metrics)
	s.log.Info("listening", "addr", ln.Addr().String(), "base_url", s.baseURL,
		"reaper_interval", s.cfg.ReaperInterval.String(), "purge_interval", s.cfg.PurgeInterval.String())

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}

	// Draining (a rolling restart): /readyz answers 503, new sessions and streams are refused,
	// waiting claim_next calls answer {empty: true}; in-flight calls finish below.
	s.draining.Store(true)
	s.mcp.Drain()
	s.bell.EndWaits()
	s.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- hs.Shutdown(sctx) }() // stop accepting; close idle connections
	// In-flight requests finish. MCP GET streams never do by themselves: they end with their
	// sessions, closed below.
	for s.inflight.Load() > 0 && sctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	reap.stop()
	s.events.Stop()
	s.bell.Close()
	s.mcp.Close()
	// Left now: connections with no request (Shutdown waits up to 5 s for ones that never sent
	// any) and streams ending. Give them a moment, then close what remains.
	var shutErr error
	select {
	case shutErr = <-shut:
	case <-time.After(500 * time.Millisecond):
		_ = hs.Close()
		shutErr = <-shut
	}
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	if shutErr != nil {
		_ = hs.Close()
		s.log.Warn("shutdown incomplete", "err", shutErr)
	}
	s.log.Info("stopped")
	return errors.Join(serveErr, shutErr)
}

// onRevoked acts on the revocation feed (server/revocation): a revoked endpoint's sessions
// close; after a rotation, sessions whose credential no longer resolves close (the endpoint
// stays); after OAuth access tokens were revoked nothing closes, but the endpoint's next
// requests are checked in the database, so a client that refreshed its token carries on and a
// revoked token gets 401.
func (s *Server) onRevoked(e revocation.Event) {
	switch e.Kind {
	case revocation.Recheck:
		s.mcp.Recheck(e.Endpoint)
	case revocation.Rotated:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.mcp.Rotated(ctx, e.Endpoint)
	default:
		s.mcp.Revoke(e.Endpoint)
	}
}

// NewLogger is the server's JSON logger on stderr.
func NewLogger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Run opens the pool named by cfg.DatabaseURL, builds the server, lets each setup function
// add to it (routes with Handle, tool families with Tools().Add), serves until ctx ends, then
// closes the pool.
func Run(ctx context.Context, cfg Config, setup ...func(*Server) error) error {
	if cfg.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	TuneGC()
	log := NewLogger(cfg.LogLevel)
	if cfg.DebugAddr != "" {
		if err := serveDebug(ctx, cfg.DebugAddr, log); err != nil {
			return fmt.Errorf("debug listener: %w", err)
		}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	pool, err := store.Open(octx, cfg.DatabaseURL, cfg.DBMaxConns)
	cancel()
	if err != nil {
		return err
	}
	defer pool.Close()
	srv, err := New(cfg, pool, log)
	if err != nil {
		return err
	}
	for _, f := range setup {
		if err := f(srv); err != nil {
			return err
		}
	}
	return srv.ListenAndServe(ctx)
}

// TuneGC raises the GC target to 400 unless GOGC is set, and returns the setting in force
// ("GOGC=..."). An MCP call allocates far more than it keeps (the go-sdk decodes and re-encodes
// each message several times) while the live heap stays small, so the default GOGC=100
// collects every few milliseconds under load: with the patched SDK (server/third_party/go-sdk)
// the server still spent about a fifth more CPU per call at 100 than at 400 in the MCP
// benchmark, for a heap of a few tens of MiB. The benchmark harnesses, which run go-sdk
// clients, use it too.
func TuneGC() string {
	if v := os.Getenv("GOGC"); v != "" {
		return "GOGC=" + v
	}
	debug.SetGCPercent(400)
	return "GOGC=400"
}
