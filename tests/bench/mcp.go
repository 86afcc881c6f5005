package main

// The agent's path: the same claim_next+complete drain through a real `switchboard serve`
// process over MCP (two tool calls per todo, and complete with next: one), beside the raw SQL
// functions on as many connections and the thinnest HTTP layer over the same calls (the shim:
// net/http and JSON, no MCP), in the same run; and the doorbell's latency.

import (
	"context"
	"fmt"
	"time"

	"switchboard/tests/e2e/mcpbench"
)

func init() {
	register(Section{Name: "mcp", Order: 35, Run: mcpSection,
		Doc: "claim_next+complete over MCP (and complete with next) at 1/4/16 sessions beside raw SQL; doorbell latency"})
}

const mcpPrefill = 2000 // todos per drive; a drive ends when they are done

func mcpSection(ctx context.Context, b *Bench) ([]Row, error) {
	cfg := b.Cfg
	dbURL, err := b.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	// The drives count this cluster's PostgreSQL CPU, not every postgres process on the machine.
	postmaster, err := clusterOf(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	mcpbench.Postmaster = postmaster
	defer func() { mcpbench.Postmaster = 0 }()
	dir, err := b.BuildDir()
	if err != nil {
		return nil, err
	}
	bin, err := b.ServerBin(ctx)
	if err != nil {
		return nil, err
	}
	shimBin, err := mcpbench.BuildShim(ctx, dir)
	if err != nil {
		return nil, err
	}
	// A server process of its own, so its CPU is measured apart from the clients'.
	srv, err := mcpbench.StartProcess(ctx, bin, dbURL, "SWITCHBOARD_TOOL_RATE=1000000/s", "SWITCHBOARD_TOOL_BURST=1000000")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	shim, err := mcpbench.StartProcess(ctx, shimBin, dbURL)
	if err != nil {
		return nil, err
	}
	defer shim.Stop()
	ceilingBin, err := mcpbench.BuildCeiling(ctx, dir)
	if err != nil {
		return nil, err
	}
	ceiling, err := mcpbench.StartProcess(ctx, ceilingBin, dbURL)
	if err != nil {
		return nil, err
	}
	defer ceiling.Stop()
	ceilingEP := mcpbench.Endpoint{URL: ceiling.URL + "/mcp/ceiling", Credential: "none"}

	longest := max(4*cfg.Duration, 10*time.Second)
	var rows []Row
	for _, n := range cfg.Workers {
		ep, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
		if err != nil {
			return rows, err
		}
		drive := func(what string, f func() (mcpbench.Result, error)) (mcpbench.Result, error) {
			if err := mcpbench.Prefill(ctx, dbURL, ep.ID, mcpPrefill); err != nil {
				return mcpbench.Result{}, err
			}
			r, err := f()
			b.Logf("mcp %-14s %2d: %s", what, n, r)
			return r, err
		}
		// cfg.Rounds alternating rounds (SQL, shim, two calls, next; then the reverse), summed.
		var sql, hop, two, one, modern, top mcpbench.Result
		steps := []struct {
			what string
			sum  *mcpbench.Result
			run  func() (mcpbench.Result, error)
		}{
			{"raw SQL", &sql, func() (mcpbench.Result, error) {
				return mcpbench.DriveSQL(ctx, dbURL, ep.ID, n, longest)
			}},
			{"HTTP shim", &hop, func() (mcpbench.Result, error) {
				return mcpbench.DriveShim(ctx, shim.URL, ep.ID, n, longest, shim.PID)
			}},
			{"claim+complete", &two, func() (mcpbench.Result, error) {
				return mcpbench.DriveMCP(ctx, ep, n, longest, mcpbench.ClaimThenComplete, srv.PID)
			}},
			{"complete+next", &one, func() (mcpbench.Result, error) {
				return mcpbench.DriveMCP(ctx, ep, n, longest, mcpbench.CompleteWithNext, srv.PID)
			}},
		}
		if n == 16 {
			// The same two calls on MCP 2026-07-28: no session, any replica could answer.
			steps = append(steps, struct {
				what string
				sum  *mcpbench.Result
				run  func() (mcpbench.Result, error)
			}{"2026 claim+compl", &modern, func() (mcpbench.Result, error) {
				return mcpbench.DriveMCPVersion(ctx, ep, n, longest, mcpbench.ClaimThenComplete, srv.PID, "2026-07-28")
			}}, struct {
				what string
				sum  *mcpbench.Result
				run  func() (mcpbench.Result, error)
			}{"go-sdk ceiling", &top, func() (mcpbench.Result, error) {
				// Its claim_next is never empty: it runs for cfg.Duration, not until a backlog is done.
				return mcpbench.DriveMCP(ctx, ceilingEP, n, cfg.Duration, mcpbench.ClaimThenComplete, ceiling.PID)
			}})
		}
		for round := 0; round < cfg.Rounds; round++ {
			for i := range steps {
				st := steps[i]
				if round%2 == 1 {
					st = steps[len(steps)-1-i]
				}
				r, err := drive(st.what, st.run)
				if err != nil {
					return rows, err
				}
				*st.sum = st.sum.Add(r)
			}
		}
		cpu := func(r mcpbench.Result) string {
			return fmt.Sprintf("CPU per todo: client %v, server %v, postgres %v",
				r.PerCycle(r.ClientCPU).Round(10*time.Microsecond), r.PerCycle(r.ServerCPU).Round(10*time.Microsecond),
				r.PerCycle(r.PGCPU).Round(10*time.Microsecond))
		}
		twoRow := Row{Section: "mcp", Name: fmt.Sprintf("MCP claim_next + complete, %d session(s)", n),
			Value: two.PerSec(), Unit: "todos/s", Baseline: sql.PerSec(), Ratio: Ratio(two.PerSec(), sql.PerSec()),
			Note: cpu(two)}
		oneRow := Row{Section: "mcp", Name: fmt.Sprintf("MCP complete with next, %d session(s)", n),
			Value: one.PerSec(), Unit: "todos/s", Baseline: sql.PerSec(), Ratio: Ratio(one.PerSec(), sql.PerSec()),
			Note: cpu(one)}
		if n == 16 {
			twoRow.Target, twoRow.Pass = ">= 0.50 x SQL", AtLeast(twoRow.Ratio, 0.5)
			oneRow.Target, oneRow.Pass = ">= 0.70 x SQL", AtLeast(oneRow.Ratio, 0.7)
			twoRow.BaseName = "switchboard.claim_next + switchboard.complete over pgx, same number of connections"
		}
		hopRow := Row{Section: "mcp", Name: fmt.Sprintf("  same two calls, HTTP without MCP, %d", n),
			Value: hop.PerSec(), Unit: "todos/s", Baseline: sql.PerSec(), Ratio: Ratio(hop.PerSec(), sql.PerSec()),
			Note: cpu(hop) + " (server: the shim)"}
		if n == 16 {
			hopRow.Note = "the shim (tests/e2e/mcpbench/shim) makes the server's store calls behind plain net/http + " +
				"encoding/json, with no MCP, sessions, auth or limits; " + hopRow.Note
		}
		rows = append(rows, twoRow, hopRow, oneRow)
		if n == 16 {
			rows = append(rows, Row{Section: "mcp", Name: "MCP claim_next + complete on 2026-07-28 (sessionless), 16 clients",
				Value: modern.PerSec(), Unit: "todos/s", Baseline: two.PerSec(), Ratio: Ratio(modern.PerSec(), two.PerSec()),
				BaseName: "the same two calls on 2025-11-25 sessions (the row above)", Target: ">= 1.00 x session path",
				Pass: AtLeast(Ratio(modern.PerSec(), two.PerSec()), 1.0), Note: cpu(modern)},
				Row{Section: "mcp", Name: "MCP claim_next + complete, 16 sessions, against the go-sdk transport",
					Value: two.PerSec(), Unit: "todos/s", Baseline: top.PerSec(), Ratio: Ratio(two.PerSec(), top.PerSec()),
					BaseName: "the same go-sdk clients against tests/e2e/mcpbench/ceiling: go-sdk's own handler, the same two tools and schemas, canned answers of the same size, no SQL",
					Target:   ">= 0.60 x go-sdk ceiling", Pass: AtLeast(Ratio(two.PerSec(), top.PerSec()), 0.6),
					Note: "ceiling " + cpu(top) + " (server: the ceiling)"})
		}
	}

	ep, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
	if err != nil {
		return rows, err
	}
	p50, p99, err := mcpbench.DoorbellLatency(ctx, ep, dbURL, 200, 60*time.Millisecond)
	if err != nil {
		return rows, err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rows = append(rows,
		Row{Section: "mcp", Name: "doorbell latency p50 (todo committed -> notification)", Value: ms(p50), Unit: "ms"},
		Row{Section: "mcp", Name: "doorbell latency p99", Value: ms(p99), Unit: "ms",
			Target: "< 50 ms", Pass: func() *bool { p := p99 < 50*time.Millisecond; return &p }(),
			Note: "200 todos pushed 60 ms apart (outside the 40 ms coalescing window)"})
	return rows, nil
}
