package main

// The peer (issue 37): Switchboard's PostgreSQL CPU per todo beside Graphile Worker's per job,
// measured the same way, in one run on one cluster: the cluster's CPU from /proc around each
// measured window (warm-up included, and the todos or jobs of the warm-up counted), at 16 workers.
//
//   Switchboard  one at a time (claim_next + complete), and claim_next {max: N} + complete
//                {items} at N = 10 and 50; through MCP (go-sdk clients against `switchboard
//                serve`, as the mcp section drives it) and through the SQL functions alone (pgx)
//   Graphile     Worker 0.18.0 unbatched (its defaults) and batched (a local queue of 50 and
//                batched completion), draining no-op jobs in a database of its own
//   floor        the bare hand-written SKIP LOCKED pair on bench_bare (no checks, no answer)
//   paced        the SQL functions one at a time and at 10, each worker pausing between its
//                statements so that the 16 run at the rate the MCP drive of the same kind last
//                reached: what the same statements cost PostgreSQL at the MCP drive's pace
//
// The targets are issue 37's, against the peer's unbatched figures of the same run.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"switchboard/tests/e2e/mcpbench"
)

func init() {
	register(Section{Name: "peer", Order: 23, Run: peerSection,
		Doc: "PostgreSQL CPU per todo, one at a time and at max 10 and 50, over MCP and SQL, beside Graphile Worker's per job unbatched and batched; drain rates at 16"})
}

const (
	peerWorkers = 16
	peerBatch   = 50 // Graphile's local queue in its batched run, as our largest batch
)

// peerPath is one measured path: todos (or jobs) finished over the whole run and the PostgreSQL
// CPU of that run; the rate is over the measured window.
type peerPath struct {
	todos  int64
	cpu    time.Duration
	rate   float64 // summed over rounds; divide by rounds
	errors int64   // tool calls that failed (MCP)
}

func (p peerPath) cpuPerTodo() float64 {
	return float64(p.cpu.Microseconds()) / 1000 / float64(max(p.todos, 1))
}

func peerSection(ctx context.Context, b *Bench) ([]Row, error) {
	dbURL, err := b.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	f := &sqlFixture{url: dbURL, admin: admin}
	defer f.close()
	if _, err := admin.Exec(ctx, bareDDL); err != nil {
		return nil, err
	}
	postmaster, err := clusterOf(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	mcpbench.Postmaster = postmaster // the drives count this cluster's CPU, not the machine's
	defer func() { mcpbench.Postmaster = 0 }()

	bin, err := b.ServerBin(ctx)
	if err != nil {
		return nil, err
	}
	srv, err := mcpbench.StartProcess(ctx, bin, dbURL, "SWITCHBOARD_TOOL_RATE=1000000/s", "SWITCHBOARD_TOOL_BURST=1000000")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	ep, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
	if err != nil {
		return nil, err
	}
	var epID pgtype.UUID
	if err := epID.Scan(ep.ID); err != nil {
		return nil, err
	}
	f.endpoints = []pgtype.UUID{epID}

	// The backlog each path starts with: enough for its rate over the whole run, grown as rates
	// are measured.
	need := map[string]int{}
	fill := func(path, table string) error {
		if err := topUp(ctx, f, table, epID, max(b.Cfg.Prefill, need[path])); err != nil {
			return err
		}
		return f.vacuum(ctx)
	}
	grow := func(path string, todos int64) { need[path] = max(need[path], int(todos)*3/2) }

	// A path through pgx: op on 16 fresh sessions; counted is the todos the op finished (nil: one
	// per operation).
	sqlPath := func(path, table string, op Op, counted *atomic.Int64) (peerPath, error) {
		if err := fill(path, table); err != nil {
			return peerPath{}, err
		}
		conns, err := b.Connect(ctx, dbURL, peerWorkers)
		if err != nil {
			return peerPath{}, err
		}
		var before int64
		if counted != nil {
			before = counted.Load()
		}
		cpu0 := clusterCPU(postmaster)
		res, err := b.Run(ctx, conns, op)
		cpu := clusterCPU(postmaster) - cpu0
		CloseAll(conns)
		if err != nil {
			return peerPath{}, err
		}
		p := peerPath{todos: res.Total, cpu: cpu, rate: res.Rate()}
		if counted != nil {
			p.todos = counted.Load() - before
			p.rate *= float64(p.todos) / float64(max(res.Total, 1)) // todos, not batches
		}
		grow(path, p.todos)
		return p, nil
	}
	mcpPath := func(path string, mode mcpbench.Mode) (peerPath, error) {
		if err := fill(path, "switchboard.todos"); err != nil {
			return peerPath{}, err
		}
		r, err := mcpbench.DriveMCP(ctx, ep, peerWorkers, b.Cfg.Warmup+b.Cfg.Duration, mode, srv.PID)
		if err != nil {
			return peerPath{}, err
		}
		grow(path, r.Cycles)
		return peerPath{todos: r.Cycles, cpu: r.PGCPU, rate: r.PerSec(), errors: r.Errors}, nil
	}
	var n10, n50, n10p atomic.Int64
	// The rate each MCP drive last reached, for the paced SQL paths.
	lastRate := map[string]float64{}
	pace := func(mcp string, perCycle int) func() time.Duration {
		return func() time.Duration {
			if lastRate[mcp] <= 0 {
				return 0
			}
			return time.Duration(float64(peerWorkers*perCycle) / lastRate[mcp] * float64(time.Second))
		}
	}
	paths := []struct {
		name string
		run  func() (peerPath, error)
	}{
		{"sql 1", func() (peerPath, error) { return sqlPath("sql 1", "switchboard.todos", cycleOp(epID), nil) }},
		{"sql 10", func() (peerPath, error) {
			return sqlPath("sql 10", "switchboard.todos", batchCycleOp(epID, 10, &n10), &n10)
		}},
		{"sql 50", func() (peerPath, error) {
			return sqlPath("sql 50", "switchboard.todos", batchCycleOp(epID, 50, &n50), &n50)
		}},
		{"bare", func() (peerPath, error) { return sqlPath("bare", "bench_bare", handOp("bench_bare", epID), nil) }},
		{"mcp 1", func() (peerPath, error) { return mcpPath("mcp 1", mcpbench.ClaimThenComplete) }},
		{"mcp 10", func() (peerPath, error) { return mcpPath("mcp 10", mcpbench.Batch(10)) }},
		{"mcp 50", func() (peerPath, error) { return mcpPath("mcp 50", mcpbench.Batch(50)) }},
		{"sql 1 paced", func() (peerPath, error) {
			return sqlPath("sql 1 paced", "switchboard.todos", pacedCycleOp(epID, 1, nil, pace("mcp 1", 1)), nil)
		}},
		{"sql 10 paced", func() (peerPath, error) {
			return sqlPath("sql 10 paced", "switchboard.todos", pacedCycleOp(epID, 10, &n10p, pace("mcp 10", 10)), &n10p)
		}},
		{"graphile", func() (peerPath, error) { return graphilePath(ctx, b, postmaster, 0) }},
		{"graphile batched", func() (peerPath, error) { return graphilePath(ctx, b, postmaster, peerBatch) }},
	}
	peerNote := fmt.Sprintf("%s (node drain.mjs): concurrency 16, its defaults", peerDir)
	if _, err := os.Stat(peerDir + "/node_modules/.bin/node"); err != nil {
		peerNote = "not measured: the peer is not installed (npm ci --prefix " + peerDir + "; make bench does it)"
		paths = paths[:len(paths)-2]
	}
	got := map[string]peerPath{}
	for round := 0; round < b.Cfg.Rounds; round++ {
		for i := range paths {
			p := paths[i]
			if round%2 == 1 {
				p = paths[len(paths)-1-i]
			}
			r, err := p.run()
			if err != nil {
				return nil, fmt.Errorf("peer %s: %w", p.name, err)
			}
			b.Logf("peer %-16s round %d: %.0f todos/s, PG CPU %.3f ms/todo", p.name, round, r.rate, r.cpuPerTodo())
			lastRate[p.name] = r.rate
			acc := got[p.name]
			got[p.name] = peerPath{todos: acc.todos + r.todos, cpu: acc.cpu + r.cpu, rate: acc.rate + r.rate, errors: acc.errors + r.errors}
		}
	}
	rounds := float64(b.Cfg.Rounds)
	rate := func(name string) float64 { return got[name].rate / rounds }
	cpu := func(name string) float64 { return got[name].cpuPerTodo() }
	peer, peerRate := cpu("graphile"), rate("graphile")

	const sec = "peer"
	atMost := func(v, limit float64) *bool { p := v <= limit; return &p }
	cpuRow := func(name, label, target string, limit float64) Row {
		r := Row{Section: sec, Name: label, Value: cpu(name), Unit: "ms", Baseline: peer, Ratio: Ratio(peer, cpu(name)),
			Note: fmt.Sprintf("%.2fx Graphile's unbatched CPU per job; %.0f todos/s", Ratio(cpu(name), peer), rate(name))}
		if target != "" && peer > 0 {
			r.Target, r.Pass = target, atMost(cpu(name), limit*peer)
		}
		if n := got[name].errors; n > 0 {
			r.Note += fmt.Sprintf("; %d tool calls failed", n)
		}
		return r
	}
	rows := []Row{
		{Section: sec, Name: "Graphile Worker 0.18.0, unbatched, 16: PostgreSQL CPU per job", Value: peer, Unit: "ms",
			Note: fmt.Sprintf("%s; %.0f jobs/s; the baseline of the rows below", peerNote, peerRate)},
		{Section: sec, Name: fmt.Sprintf("  Graphile Worker, batched (local queue %d, batched completion), 16", peerBatch),
			Value: cpu("graphile batched"), Unit: "ms", Baseline: peer, Ratio: Ratio(peer, cpu("graphile batched")),
			Note: fmt.Sprintf("%.0f jobs/s", rate("graphile batched"))},
		cpuRow("mcp 1", "PostgreSQL CPU per todo, MCP claim_next+complete one at a time, 16", "<= 1.5 x peer", 1.5),
		cpuRow("mcp 10", "PostgreSQL CPU per todo, MCP claim_next {max: 10} + complete {items}, 16", "<= 0.5 x peer", 0.5),
		cpuRow("mcp 50", "PostgreSQL CPU per todo, MCP claim_next {max: 50} + complete {items}, 16", "", 0),
		cpuRow("sql 1", "  the same through the SQL functions (pgx): claim_next+complete, 16", "", 0),
		cpuRow("sql 10", "  the same: claim_next_many(10) + complete_many, 16", "", 0),
		cpuRow("sql 50", "  the same: claim_next_many(50) + complete_many, 16", "", 0),
		cpuRow("sql 1 paced", "  the SQL functions one at a time, paced to the MCP drive's rate, 16", "", 0),
		cpuRow("sql 10 paced", "  the SQL functions at 10, paced to the MCP drive's rate, 16", "", 0),
		cpuRow("bare", "  the floor: the bare hand-written pair on bench_bare, 16", "", 0),
	}
	drain := Row{Section: sec, Name: "MCP drain, 16 sessions at max 50", Value: rate("mcp 50"), Unit: "todos/s",
		Baseline: peerRate, Ratio: Ratio(rate("mcp 50"), peerRate), BaseName: "Graphile Worker unbatched at 16, same run",
		Note: fmt.Sprintf("one at a time %.0f/s, max 10 %.0f/s over MCP; Graphile batched %.0f jobs/s (%.2fx this)",
			rate("mcp 1"), rate("mcp 10"), rate("graphile batched"), Ratio(rate("graphile batched"), rate("mcp 50")))}
	if peerRate > 0 {
		drain.Target, drain.Pass = ">= 2.00 x peer unbatched", AtLeast(drain.Ratio, 2)
	}
	rows = append(rows, drain, Row{Section: sec, Name: "  Graphile Worker batched rate, 16", Value: rate("graphile batched"),
		Unit: "jobs/s", Baseline: peerRate, Ratio: Ratio(rate("graphile batched"), peerRate)})
	return rows, nil
}

// pacedCycleOp is cycleOp (max 1) or batchCycleOp (todos counts the todos finished) at the
// pace of an MCP drive: a cycle takes at least every() (no pause when 0), half of it between the
// claim and the completion, so that each backend waits for its next statement as it does
// behind the server.
func pacedCycleOp(ep pgtype.UUID, max int, todos *atomic.Int64, every func() time.Duration) Op {
	return func(ctx context.Context, _ int, c *pgx.Conn) (bool, error) {
		start, d := time.Now(), every()
		type todo struct {
			ID string `json:"id"`
		}
		var out struct {
			Todo  *todo  `json:"todo"`  // claim_next
			Todos []todo `json:"todos"` // claim_next_many
		}
		var claimed []byte
		var err error
		if max == 1 {
			err = c.QueryRow(ctx, "SELECT switchboard.claim_next($1)", ep).Scan(&claimed)
		} else {
			err = c.QueryRow(ctx, "SELECT switchboard.claim_next_many($1, $2)", ep, max).Scan(&claimed)
		}
		if err != nil {
			return false, fmt.Errorf("claim: %w", err)
		}
		if err := json.Unmarshal(claimed, &out); err != nil {
			return false, err
		}
		if out.Todo != nil {
			out.Todos = []todo{*out.Todo}
		}
		if len(out.Todos) == 0 {
			return false, nil
		}
		sleep(ctx, d/2-time.Since(start))
		if max == 1 {
			_, err = c.Exec(ctx, "SELECT switchboard.complete($1, $2)", ep, out.Todos[0].ID)
		} else {
			items, _ := json.Marshal(out.Todos)
			_, err = c.Exec(ctx, "SELECT switchboard.complete_many($1, $2)", ep, string(items))
		}
		if err != nil {
			return false, fmt.Errorf("complete: %w", err)
		}
		if todos != nil {
			todos.Add(int64(len(out.Todos)))
		}
		sleep(ctx, d-time.Since(start))
		return true, nil
	}
}

// clusterOf is the postmaster of the cluster serving url (for clusterCPU).
func clusterOf(ctx context.Context, url string) (int, error) {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	return postmasterOf(ctx, c)
}

// graphilePath is one Graphile Worker drain at peerWorkers (batch > 1: batched), in a database of
// its own on the same cluster.
func graphilePath(ctx context.Context, b *Bench, postmaster, batch int) (peerPath, error) {
	jobs, secs, cpu, err := runPeerOnce(ctx, b, peerWorkers, max(b.Cfg.Prefill, 40000)*min(3, max(1, batch)), postmaster, batch)
	if err != nil {
		return peerPath{}, err
	}
	return peerPath{todos: int64(jobs), cpu: cpu, rate: Ratio(jobs, secs)}, nil
}
