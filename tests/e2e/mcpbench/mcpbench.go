// Package mcpbench drives Switchboard the way agents do, for benchmarks: claim_next+complete
// cycles over MCP (or complete with next: one call per todo) on N sessions, the same cycle as
// raw SQL on N connections, the doorbell's latency, and the CPU each side spent.
//
// A typical run (see ./run for a complete program):
//
//	srv, _ := mcpbench.StartProcess(ctx, bin, dbURL)          // or StartInProcess
//	ep, _ := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
//	_ = mcpbench.Prefill(ctx, dbURL, ep.ID, 50000)
//	sql, _ := mcpbench.DriveSQL(ctx, dbURL, ep.ID, 16, 5*time.Second)
//	mcp, _ := mcpbench.DriveMCP(ctx, ep, 16, 5*time.Second, mcpbench.ClaimThenComplete, srv.PID)
//	p50, p99, _ := mcpbench.DoorbellLatency(ctx, ep, dbURL, 200, 60*time.Millisecond)
package mcpbench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/server"
	"switchboard/server/store"
	"switchboard/tests/e2e/agentclient"
)

// Endpoint is a vended endpoint to drive.
type Endpoint struct {
	ID, Slug, Credential string
	URL                  string // the MCP URL
}

// Vend creates a human (if new) and an endpoint with queue "bench" and every verb, with a
// fresh credential. base is the server's base URL.
func Vend(ctx context.Context, dbURL, human, base string) (Endpoint, error) {
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return Endpoint{}, err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `INSERT INTO switchboard.humans (name) VALUES ($1) ON CONFLICT DO NOTHING`, human); err != nil {
		return Endpoint{}, err
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	cred := "sbk_" + base64.RawURLEncoding.EncodeToString(b)
	var raw []byte
	if err := c.QueryRow(ctx, `SELECT switchboard.endpoint_vend($1, $2, $3, 'sbk_', ARRAY['bench'])`,
		human, "agent-"+randomSuffix(), store.CredentialHash(cred)).Scan(&raw); err != nil {
		return Endpoint{}, err
	}
	var out struct {
		ID   string `json:"endpoint_id"`
		Slug string `json:"slug"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return Endpoint{}, err
	}
	return Endpoint{ID: out.ID, Slug: out.Slug, Credential: cred, URL: strings.TrimRight(base, "/") + "/mcp/" + out.Slug}, nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// Prefill creates n pending todos in queue "bench" (in chunks, with the doorbell off meanwhile
// so the listener is not flooded).
func Prefill(ctx context.Context, dbURL, endpointID string, n int) error {
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var was float64
	if err := c.QueryRow(ctx, `SELECT value::float8 FROM switchboard.settings WHERE key = 'doorbell_enabled'`).Scan(&was); err != nil {
		return err
	}
	if _, err := c.Exec(ctx, `UPDATE switchboard.settings SET value = 0 WHERE key = 'doorbell_enabled'`); err != nil {
		return err
	}
	defer c.Exec(context.WithoutCancel(ctx), `UPDATE switchboard.settings SET value = $1 WHERE key = 'doorbell_enabled'`, was)
	for done := 0; done < n; done += 5000 {
		k := min(5000, n-done)
		if _, err := c.Exec(ctx, `SELECT switchboard.create_todo($1, 'bench', 'bench todo', '{"n": 1, "bench": true}')
		                            FROM generate_series(1, $2)`, endpointID, k); err != nil {
			return err
		}
	}
	// Vacuumed and checkpointed, so every drive starts at the same point of the checkpoint cycle.
	if _, err = c.Exec(ctx, `VACUUM ANALYZE switchboard.todos`); err != nil {
		return err
	}
	_, err = c.Exec(ctx, `CHECKPOINT`)
	return err
}

// Result is one measured drive.
type Result struct {
	Workers   int
	Cycles    int64 // todos finished
	Calls     int64 // tool calls (MCP) or statements (SQL)
	Errors    int64
	Elapsed   time.Duration
	ClientCPU time.Duration // this process (client side; plus the server when in-process)
	ServerCPU time.Duration // the server process (when driven with its pid), else 0
	PGCPU     time.Duration // all postgres processes on this machine
}

// Add sums two drives of the same kind (rounds of one measurement).
func (r Result) Add(o Result) Result {
	r.Workers = max(r.Workers, o.Workers)
	r.Cycles += o.Cycles
	r.Calls += o.Calls
	r.Errors += o.Errors
	r.Elapsed += o.Elapsed
	r.ClientCPU += o.ClientCPU
	r.ServerCPU += o.ServerCPU
	r.PGCPU += o.PGCPU
	return r
}

// PerSec is the cycle rate.
func (r Result) PerSec() float64 { return float64(r.Cycles) / r.Elapsed.Seconds() }

// PerCycle divides a CPU time by the cycles.
func (r Result) PerCycle(d time.Duration) time.Duration {
	if r.Cycles == 0 {
		return 0
	}
	return d / time.Duration(r.Cycles)
}

func (r Result) String() string {
	s := fmt.Sprintf("%2d workers: %7.0f cycles/s  client %v/cycle  postgres %v/cycle",
		r.Workers, r.PerSec(), r.PerCycle(r.ClientCPU).Round(time.Microsecond), r.PerCycle(r.PGCPU).Round(time.Microsecond))
	if r.ServerCPU > 0 {
		s += fmt.Sprintf("  server %v/cycle", r.PerCycle(r.ServerCPU).Round(time.Microsecond))
	}
	if r.Errors > 0 {
		s += fmt.Sprintf("  (%d errors)", r.Errors)
	}
	return s
}

// Mode is how MCP workers drain: ClaimThenComplete, CompleteWithNext or Batch(n).
type Mode struct {
	next bool // complete with next
	max  int  // > 0: claim_next {max}, then one complete {items}
}

var (
	// ClaimThenComplete: claim_next, then complete — two tool calls per todo.
	ClaimThenComplete = Mode{}
	// CompleteWithNext: complete with next — one tool call per todo.
	CompleteWithNext = Mode{next: true}
)

// Batch: claim_next {max: n}, then one complete {items} for the todos it got — two tool calls
// per batch (issue 37).
func Batch(n int) Mode { return Mode{max: n} }

// Postmaster, when set, is the PostgreSQL cluster whose CPU the drives count (PGCPU): its
// postmaster and the processes it forked. 0: every process named postgres on this machine,
// which on a shared machine counts the other clusters too.
var Postmaster int

// cpuMeter samples this process, the server process and postgres.
type cpuMeter struct {
	serverPID   int
	self, srv   time.Duration
	pg          time.Duration
	start       time.Time
	measureSelf bool
}

func startMeter(serverPID int) *cpuMeter {
	m := &cpuMeter{serverPID: serverPID, start: time.Now()}
	m.self = SelfCPU()
	m.srv, _ = ProcessCPU(serverPID)
	m.pg = pgCPU()
	return m
}

func (m *cpuMeter) stop(r *Result) {
	r.Elapsed = time.Since(m.start)
	r.ClientCPU = SelfCPU() - m.self
	if m.serverPID > 0 {
		if s, err := ProcessCPU(m.serverPID); err == nil {
			r.ServerCPU = s - m.srv
		}
	}
	r.PGCPU = pgCPU() - m.pg
}

func pgCPU() time.Duration {
	if Postmaster > 0 {
		return ClusterCPU(Postmaster)
	}
	return PostgresCPU()
}

// DriveMCP runs sessions workers for d and counts finished todos. serverPID (0: unknown)
// attributes server CPU.
func DriveMCP(ctx context.Context, ep Endpoint, sessions int, d time.Duration, mode Mode, serverPID int) (Result, error) {
	return DriveMCPVersion(ctx, ep, sessions, d, mode, serverPID, "")
}

// DriveMCPVersion is DriveMCP on a protocol version ("" 2025-11-25, a session each;
// "2026-07-28": sessionless clients).
func DriveMCPVersion(ctx context.Context, ep Endpoint, sessions int, d time.Duration, mode Mode, serverPID int, version string) (Result, error) {
	clients := make([]*agentclient.Client, sessions)
	tr := &http.Transport{MaxIdleConns: 4 * sessions, MaxIdleConnsPerHost: 4 * sessions}
	defer tr.CloseIdleConnections()
	for i := range clients {
		c, err := agentclient.Connect(ctx, ep.URL, ep.Credential, &agentclient.Options{NoStream: true, Transport: tr, ProtocolVersion: version})
		if err != nil {
			return Result{}, err
		}
		defer c.Close()
		clients[i] = c
	}
	// Warm up: a few cycles per session (connections, prepared statements).
	warm, cancel := context.WithTimeout(ctx, 2*time.Second)
	for _, c := range clients {
		for i := 0; i < 3; i++ {
			var cl struct {
				Empty bool
				Todo  struct{ ID string }
			}
			if err := c.CallInto(warm, "claim_next", nil, &cl); err != nil || cl.Empty {
				break
			}
			_, _ = c.Call(warm, "complete", map[string]any{"id": cl.Todo.ID})
		}
	}
	cancel()

	var cycles, calls, errs atomic.Int64
	m := startMeter(serverPID)
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mcpWorker(dctx, c, mode, &cycles, &calls, &errs)
		}()
	}
	wg.Wait()
	r := Result{Workers: sessions, Cycles: cycles.Load(), Calls: calls.Load(), Errors: errs.Load()}
	m.stop(&r)
	return r, nil
}

type claimOut struct {
	Empty bool `json:"empty"`
	Todo  struct {
		ID string `json:"id"`
	} `json:"todo"`
}

func mcpWorker(ctx context.Context, c *agentclient.Client, mode Mode, cycles, calls, errs *atomic.Int64) {
	if mode.max > 0 {
		batchWorker(ctx, c, mode.max, cycles, calls, errs)
		return
	}
	var held string
	for ctx.Err() == nil {
		if held == "" || !mode.next {
			var cl claimOut
			err := c.CallInto(ctx, "claim_next", nil, &cl)
			calls.Add(1)
			if err != nil {
				if ctx.Err() == nil {
					errs.Add(1)
				}
				continue
			}
			if cl.Empty {
				return
			}
			held = cl.Todo.ID
		}
		args := map[string]any{"id": held, "result": map[string]any{"ok": true}}
		if mode.next {
			args["next"] = map[string]any{}
		}
		var out struct {
			Next *claimOut `json:"next"`
		}
		err := c.CallInto(ctx, "complete", args, &out)
		calls.Add(1)
		held = ""
		if err != nil {
			if ctx.Err() == nil {
				errs.Add(1)
			}
			continue
		}
		cycles.Add(1)
		if out.Next != nil && !out.Next.Empty {
			held = out.Next.Todo.ID
		}
	}
}

// batchWorker claims up to max todos a call and completes them with one call; cycles counts
// the todos completed.
func batchWorker(ctx context.Context, c *agentclient.Client, max int, cycles, calls, errs *atomic.Int64) {
	type item struct {
		ID     string         `json:"id"`
		Result map[string]any `json:"result"`
	}
	for ctx.Err() == nil {
		var cl struct {
			Empty bool `json:"empty"`
			Todos []struct {
				ID string `json:"id"`
			} `json:"todos"`
		}
		err := c.CallInto(ctx, "claim_next", map[string]any{"max": max}, &cl)
		calls.Add(1)
		if err != nil {
			if ctx.Err() == nil {
				errs.Add(1)
			}
			continue
		}
		if cl.Empty || len(cl.Todos) == 0 {
			return
		}
		items := make([]item, len(cl.Todos))
		for i, t := range cl.Todos {
			items[i] = item{ID: t.ID, Result: map[string]any{"ok": true}}
		}
		var out struct {
			Results []struct {
				OK bool `json:"ok"`
			} `json:"results"`
		}
		// The batch is finished even when the drive's time is up: its todos were counted as
		// claimed, and a drive that left them held would leave the next one a backlog of leases.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		err = c.CallInto(fctx, "complete", map[string]any{"items": items}, &out)
		cancel()
		calls.Add(1)
		if err != nil {
			errs.Add(1)
			continue
		}
		for _, r := range out.Results {
			if r.OK {
				cycles.Add(1)
			}
		}
	}
}

// DriveShim runs the same cycle through the HTTP shim (./shim: plain net/http and JSON over
// the same store calls, no MCP) at base on sessions keep-alive clients for d. shimPID (0:
// unknown) attributes its CPU as ServerCPU.
func DriveShim(ctx context.Context, base, endpointID string, sessions int, d time.Duration, shimPID int) (Result, error) {
	tr := &http.Transport{MaxIdleConns: 4 * sessions, MaxIdleConnsPerHost: 4 * sessions}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	url := base + "/call/" + endpointID
	call := func(ctx context.Context, tool string, args any, out any) error {
		body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
			"params": map[string]any{"name": tool, "arguments": args}})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("shim %s: %d %s", tool, resp.StatusCode, bytes.TrimSpace(b))
		}
		var r struct {
			Result struct {
				StructuredContent json.RawMessage `json:"structuredContent"`
			} `json:"result"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		return json.Unmarshal(r.Result.StructuredContent, out)
	}
	cycle := func(ctx context.Context, _ int) (bool, error) {
		var cl claimOut
		if err := call(ctx, "claim_next", map[string]any{}, &cl); err != nil || cl.Empty {
			return false, err
		}
		var done map[string]any
		return true, call(ctx, "complete", map[string]any{"id": cl.Todo.ID, "result": map[string]any{"ok": true}}, &done)
	}
	for i := 0; i < sessions; i++ { // warm up: connections and prepared statements
		if _, err := cycle(ctx, i); err != nil {
			return Result{}, err
		}
	}
	return drive(ctx, sessions, d, shimPID, cycle)
}

// DriveSQL runs the same cycle as raw SQL (switchboard.claim_next then switchboard.complete)
// on workers connections for d: the baseline.
func DriveSQL(ctx context.Context, dbURL, endpointID string, workers int, d time.Duration) (Result, error) {
	conns := make([]*pgx.Conn, workers)
	for i := range conns {
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return Result{}, err
		}
		defer c.Close(context.WithoutCancel(ctx))
		conns[i] = c
		for j := 0; j < 3; j++ { // warm up: prepare the statements
			if _, err := sqlCycle(ctx, c, endpointID); err != nil {
				return Result{}, err
			}
		}
	}
	return drive(ctx, workers, d, 0, func(ctx context.Context, w int) (bool, error) {
		return sqlCycle(ctx, conns[w], endpointID)
	})
}

// drive runs cycle on workers goroutines for d (each stops when its cycle reports nothing left)
// and measures the cycles, two calls each, and the CPU spent (serverPID's as ServerCPU).
func drive(ctx context.Context, workers int, d time.Duration, serverPID int,
	cycle func(ctx context.Context, worker int) (bool, error)) (Result, error) {
	var cycles, errs atomic.Int64
	m := startMeter(serverPID)
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for dctx.Err() == nil {
				ok, err := cycle(dctx, w)
				if err != nil {
					if dctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				if !ok {
					return
				}
				cycles.Add(1)
			}
		}()
	}
	wg.Wait()
	r := Result{Workers: workers, Cycles: cycles.Load(), Calls: 2 * cycles.Load(), Errors: errs.Load()}
	m.stop(&r)
	return r, nil
}

func sqlCycle(ctx context.Context, c *pgx.Conn, ep string) (bool, error) {
	var raw []byte
	if err := c.QueryRow(ctx, `SELECT switchboard.claim_next($1)`, ep).Scan(&raw); err != nil {
		return false, err
	}
	var cl claimOut
	if err := json.Unmarshal(raw, &cl); err != nil {
		return false, err
	}
	if cl.Empty {
		return false, nil
	}
	if _, err := c.Exec(ctx, `SELECT switchboard.complete($1, $2, '{"ok": true}')`, ep, cl.Todo.ID); err != nil {
		return false, err
	}
	return true, nil
}

// DoorbellLatency pushes n todos one at a time, gap apart, through SQL and measures how long
// each takes to reach a connected session as notifications/claude/channel (from just before
// create_todo to the client reading the notification). A gap longer than doorbell_window_ms
// measures the signalled path; a shorter one measures coalesced todos (trailing re-check).
func DoorbellLatency(ctx context.Context, ep Endpoint, dbURL string, n int, gap time.Duration) (p50, p99 time.Duration, err error) {
	c, err := agentclient.Connect(ctx, ep.URL, ep.Credential, nil)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	select {
	case <-c.StreamReady():
	case <-time.After(10 * time.Second):
		return 0, 0, errors.New("stream did not open")
	}
	time.Sleep(200 * time.Millisecond) // let the ring on attach pass
	for len(c.Notifications()) > 0 {
		<-c.Notifications()
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	var lat []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		var id string
		if err := conn.QueryRow(ctx, `SELECT todo_id FROM switchboard.create_todo($1, 'bench', 'latency probe')`, ep.ID).Scan(&id); err != nil {
			return 0, 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		note, err := c.WaitNotification(wctx, id)
		cancel()
		if err != nil {
			return 0, 0, err
		}
		lat = append(lat, note.At.Sub(start))
		time.Sleep(gap)
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], nil
}

// SelfCPU is the user+system CPU time of this process.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU is the user+system CPU time of a process (Linux /proc).
func ProcessCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, errors.New("no pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may contain spaces) start after the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// PostgresCPU sums the CPU time of every process named postgres on this machine (the private
// cluster's backends), including exited children (cutime/cstime of the postmaster).
func PostgresCPU() time.Duration {
	var total time.Duration
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 15 {
			continue
		}
		var sum int64
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseInt(f[i], 10, 64)
			sum += v
		}
		total += time.Duration(sum) * time.Second / 100
	}
	return total
}

// ClusterCPU is the CPU time of one PostgreSQL cluster: its postmaster (with its exited
// children) and the processes it forked, the other clusters on this machine left out.
func ClusterCPU(postmaster int) time.Duration {
	ticks := func(pid int, fields ...int) (n int64, parent string) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, ""
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 15 {
			return 0, ""
		}
		for _, i := range fields {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
		return n, f[1]
	}
	total, _ := ticks(postmaster, 11, 12, 13, 14) // utime stime cutime cstime
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if n, parent := ticks(pid, 11, 12); parent == strconv.Itoa(postmaster) {
			total += n
		}
	}
	return time.Duration(total) * time.Second / 100 // USER_HZ
}

// Server is a running Switchboard server.
type Server struct {
	URL  string // base URL
	PID  int    // process id (this process when in-process)
	Stop func() error
}

// StartInProcess runs a server in this process on a loopback port.
func StartInProcess(ctx context.Context, dbURL string, cfg server.Config) (*Server, error) {
	pool, err := store.Open(ctx, dbURL, cfg.DBMaxConns)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return nil, err
	}
	cfg.Addr = ln.Addr().String()
	srv, err := server.New(cfg, pool, nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	<-srv.Doorbell().Listening()
	return &Server{URL: srv.BaseURL(), PID: os.Getpid(), Stop: func() error {
		cancel()
		err := <-done
		pool.Close()
		return err
	}}, nil
}

// StartProcess runs `bin serve` (switchboard, or the shim) on a free loopback port, with
// extra environment entries (KEY=VALUE), and waits until it is ready.
func StartProcess(ctx context.Context, bin, dbURL string, env ...string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // never outlive the harness
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+dbURL, "SWITCHBOARD_ADDR="+addr,
		"SWITCHBOARD_LOG_LEVEL=warn", "SWITCHBOARD_TOOL_RATE=100000/s", "SWITCHBOARD_TOOL_BURST=100000"), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var tail []string
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			tail = append(tail, sc.Text())
			if len(tail) > 20 {
				tail = tail[1:]
			}
			mu.Unlock()
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s := &Server{URL: "http://" + addr, PID: cmd.Process.Pid, Stop: func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			return errors.New("server did not stop on SIGTERM")
		}
	}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		select {
		case err := <-exited:
			mu.Lock()
			defer mu.Unlock()
			return nil, fmt.Errorf("serve exited: %v\n%s", err, strings.Join(tail, "\n"))
		default:
		}
		if time.Now().After(deadline) {
			_ = s.Stop()
			return nil, errors.New("serve did not become ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Build compiles cmd/switchboard into dir and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "switchboard/cmd/switchboard")
}

// BuildShim compiles the HTTP shim (./shim) into dir and returns the binary's path; start it
// with StartProcess like the server.
func BuildShim(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "switchboard/tests/e2e/mcpbench/shim")
}

// BuildCeiling compiles ./ceiling (the go-sdk transport with canned answers) into dir.
func BuildCeiling(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "switchboard/tests/e2e/mcpbench/ceiling")
}

func build(ctx context.Context, dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}
