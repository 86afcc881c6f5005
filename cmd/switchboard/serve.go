package main

// `switchboard serve`: the HTTP server of package server (MCP agent surface, health, metrics,
// doorbell, reaper) until SIGINT/SIGTERM, then a graceful shutdown. Configuration comes from
// the environment (server.ConfigFromEnv: DATABASE_URL, SWITCHBOARD_ADDR, SWITCHBOARD_BASE_URL,
// SWITCHBOARD_REAPER_INTERVAL, rate limits, ...); --addr and --base-url override the first two.
// main.go depends on nothing in this file but runServe, and this file on nothing in main.go
// but usagef.

import (
	"context"
	"flag"
	"io"

	"switchboard/server"
)

// serveSetup lists what else mounts on the server (e.g. the webhook receiver); each entry adds
// routes with Handle or tool families with Tools().Add.
var serveSetup []func(*server.Server) error

// runServe serves until ctx ends (SIGINT/SIGTERM), then shuts down gracefully.
func runServe(ctx context.Context, args []string) error {
	cfg, err := server.ConfigFromEnv()
	if err != nil {
		return usagef("serve: %v", err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address (env SWITCHBOARD_ADDR)")
	fs.StringVar(&cfg.BaseURL, "base-url", cfg.BaseURL, "public base URL (env SWITCHBOARD_BASE_URL)")
	if err := fs.Parse(args); err != nil {
		return usagef("serve: %v", err)
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	if cfg.DatabaseURL == "" {
		return usagef("serve: DATABASE_URL is not set")
	}
	return server.Run(ctx, cfg, serveSetup...)
}
