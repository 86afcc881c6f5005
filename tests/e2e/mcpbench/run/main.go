// Command run measures the agent surface: claim_next+complete cycles per second over MCP at
// 1, 4 and 16 sessions beside raw SQL, the same drain with complete+next, CPU per cycle for
// client, server and PostgreSQL, and the doorbell's latency.
//
//	SWITCHBOARD_TEST_DATABASE_URL=postgres://... go run ./tests/e2e/mcpbench/run [-d 5s] [-inprocess]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"switchboard/server"
	"switchboard/tests/e2e/mcpbench"
	"switchboard/tests/testdb"
)

func main() {
	d := flag.Duration("d", 30*time.Second, "longest duration of each drive")
	inproc := flag.Bool("inprocess", false, "run the server in this process (CPU is then not split)")
	workers := flag.String("workers", "1,4,16", "session counts")
	prefill := flag.Int("prefill", 3000, "todos created before each drive (each drive ends when they are done)")
	env := flag.String("env", "", "extra environment for the server process, KEY=VALUE[,KEY=VALUE]")
	dbParams := flag.String("db-params", "", "extra database URL parameters for the server, e.g. default_query_exec_mode=exec")
	flag.Parse()
	// The harness is the agents' side (MCP clients, or the raw SQL baseline): give it the same
	// GC target as switchboard serve (server.TuneGC), so the SDK client's garbage does not make
	// the shared CPUs spend their time collecting.
	server.TuneGC()
	if err := run(*d, *inproc, *workers, *prefill, *env, *dbParams); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(1)
	}
}

func run(d time.Duration, inproc bool, workers string, prefill int, env, dbParams string) error {
	// Ctrl-C ends the drives early; the server and the database are still cleaned up.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dbURL, drop, err := testdb.Create(ctx)
	if err != nil {
		return err
	}
	defer drop()

	serverDB := dbURL
	if dbParams != "" {
		sep := "?"
		if strings.Contains(serverDB, "?") {
			sep = "&"
		}
		serverDB += sep + dbParams
	}
	var srv *mcpbench.Server
	if inproc {
		cfg := server.DefaultConfig()
		cfg.Limits.ToolRate, cfg.Limits.ToolBurst = 1e6, 1e6
		srv, err = mcpbench.StartInProcess(ctx, serverDB, cfg)
	} else {
		dir, _ := os.MkdirTemp("", "mcpbench")
		defer os.RemoveAll(dir)
		var bin string
		if bin, err = mcpbench.Build(ctx, dir); err != nil {
			return err
		}
		var extra []string
		if env != "" {
			extra = strings.Split(env, ",")
		}
		srv, err = mcpbench.StartProcess(ctx, bin, serverDB, extra...)
	}
	if err != nil {
		return err
	}
	defer srv.Stop()
	pid := srv.PID
	if inproc {
		pid = 0
	}

	for _, w := range strings.Split(workers, ",") {
		var n int
		fmt.Sscan(w, &n)
		ep, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
		if err != nil {
			return err
		}
		fill := func() error { return mcpbench.Prefill(ctx, dbURL, ep.ID, prefill) }
		if err := fill(); err != nil {
			return err
		}
		sql, err := mcpbench.DriveSQL(ctx, dbURL, ep.ID, n, d)
		if err != nil {
			return err
		}
		if err := fill(); err != nil {
			return err
		}
		two, err := mcpbench.DriveMCP(ctx, ep, n, d, mcpbench.ClaimThenComplete, pid)
		if err != nil {
			return err
		}
		if err := fill(); err != nil {
			return err
		}
		one, err := mcpbench.DriveMCP(ctx, ep, n, d, mcpbench.CompleteWithNext, pid)
		if err != nil {
			return err
		}
		fmt.Printf("raw SQL          %s\n", sql)
		fmt.Printf("MCP claim+compl. %s  = %.2fx SQL\n", two, two.PerSec()/sql.PerSec())
		fmt.Printf("MCP compl.+next  %s  = %.2fx SQL\n\n", one, one.PerSec()/sql.PerSec())
	}
	ep, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
	if err != nil {
		return err
	}
	for _, gap := range []time.Duration{60 * time.Millisecond, 5 * time.Millisecond} {
		p50, p99, err := mcpbench.DoorbellLatency(ctx, ep, dbURL, 200, gap)
		if err != nil {
			return err
		}
		fmt.Printf("doorbell latency (pushes %v apart): p50 %v  p99 %v\n", gap, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
	}
	return nil
}
