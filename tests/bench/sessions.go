package main

// Sessions at scale (issue 16): many live MCP sessions with their GET streams open on one
// `switchboard serve`, idle, then rung by a steady trickle of todos for random endpoints. The
// clients are minimal (initialize, notifications/initialized, one GET stream read line by line),
// so the bench process stays small beside the server it measures.
//
// Per configuration (2,000 sessions over 1,000 endpoints, beside 100 over 50, same run): server
// RSS and goroutines per session when idle and at the peak of the ring load, the doorbell's
// latency from create_todo's commit to the notification, and the server's and PostgreSQL's CPU
// per doorbell signal (the NOTIFYs the bench hears on switchboard_doorbell).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/server/store"
	"switchboard/tests/e2e/mcpbench"
)

// serverEnv is -server-env: KEY=VALUE entries (comma-separated) for the sessions section's
// server only, e.g. GOMEMLIMIT=100MiB (the harness keeps its own settings).
var serverEnv = flag.String("server-env", "", "sessions: extra KEY=VALUE,... environment for the server process only (e.g. GOMEMLIMIT=100MiB)")

func init() {
	register(Section{Name: "sessions", Order: 38, Run: sessionsSection,
		Doc: "2,000 sessions with GET streams over 1,000 endpoints (beside 100 over 50): RSS and goroutines per session, doorbell latency and CPU per signal at 25 todos/s"})
}

const (
	sessionsRate = 25 // todos per second, each for a random endpoint
	mcpVersion   = "2025-06-18"
)

type sessionsConfig struct {
	sessions, endpoints int
	ring                time.Duration
	listen              bool // MCP 2026-07-28 subscriptions/listen streams (claude/channel) instead of sessions
}

// scaleResult is one configuration's measurements.
type scaleResult struct {
	cfg                     sessionsConfig
	rssBase, rssIdle        int64 // bytes: before the sessions, with them idle
	rssPeak, rssEnd         int64 // under the ring load: highest sample, last sample
	grBase, grIdle          float64
	p50, p99                time.Duration
	rung, todos, missed     int
	signals                 int
	serverCPU, pgCPU        time.Duration
	idleServerCPU, idleSpan time.Duration
}

func (r scaleResult) perSession(v int64) float64 {
	return float64(v-r.rssBase) / float64(r.cfg.sessions) / 1024
}

func sessionsSection(ctx context.Context, b *Bench) ([]Row, error) {
	bin, err := b.ServerBin(ctx)
	if err != nil {
		return nil, err
	}
	small, err := runScale(ctx, b, bin, sessionsConfig{sessions: 100, endpoints: 50, ring: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("100 sessions: %w", err)
	}
	big, err := runScale(ctx, b, bin, sessionsConfig{sessions: 2000, endpoints: 1000, ring: 60 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("2000 sessions: %w", err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	perSig := func(r scaleResult, d time.Duration) float64 {
		if r.signals == 0 {
			return 0
		}
		return ms(d) / float64(r.signals)
	}
	// The same 2,000 as MCP 2026-07-28 listen streams of claude/channel clients.
	listens, err := runScale(ctx, b, bin, sessionsConfig{sessions: 2000, endpoints: 1000, ring: 20 * time.Second, listen: true})
	if err != nil {
		return nil, fmt.Errorf("2000 listen streams: %w", err)
	}
	name := func(r scaleResult, what string) string {
		return fmt.Sprintf("%s, %d sessions / %d endpoints", what, r.cfg.sessions, r.cfg.endpoints)
	}
	rows := []Row{
		{Section: "sessions", Name: name(big, "RSS per idle session"), Value: big.perSession(big.rssIdle), Unit: "KiB",
			Baseline: small.perSession(small.rssIdle), Target: "<= 40 KB", Pass: Below(big.perSession(big.rssIdle), 40000.0/1024+1e-9),
			Note: fmt.Sprintf("server RSS %d MiB before the sessions, %d MiB with them idle (baseline: the 100-session figure)%s",
				big.rssBase>>20, big.rssIdle>>20, envNote())},
		{Section: "sessions", Name: name(big, "goroutines per idle session"), Value: (big.grIdle - big.grBase) / float64(big.cfg.sessions),
			Unit: "goroutines", Baseline: (small.grIdle - small.grBase) / float64(small.cfg.sessions), Target: "<= 2",
			Pass: func() *bool { p := (big.grIdle-big.grBase)/float64(big.cfg.sessions) <= 2; return &p }()},
		{Section: "sessions", Name: name(big, fmt.Sprintf("RSS under %d todos/s, peak", sessionsRate)), Value: float64(big.rssPeak >> 20), Unit: "MiB",
			Baseline: float64(big.rssIdle >> 20), Ratio: Ratio(float64(big.rssIdle), float64(big.rssPeak)), Target: "<= 1.5 x idle",
			Pass: func() *bool { p := float64(big.rssPeak) <= 1.5*float64(big.rssIdle); return &p }(),
			Note: fmt.Sprintf("baseline: the idle RSS; ratio = idle / peak; at the end of %s: %d MiB; 100 sessions: idle %d, peak %d MiB",
				big.cfg.ring, big.rssEnd>>20, small.rssIdle>>20, small.rssPeak>>20)},
		{Section: "sessions", Name: name(big, "doorbell p50"), Value: ms(big.p50), Unit: "ms", Baseline: ms(small.p50)},
		{Section: "sessions", Name: name(big, "doorbell p99"), Value: ms(big.p99), Unit: "ms", Baseline: ms(small.p99),
			Target: "< 20 ms", Pass: Below(ms(big.p99), 20),
			Note: fmt.Sprintf("%d todos, %d rung, %d not rung within 2 s; 100 sessions: %d todos, %d missed",
				big.todos, big.rung, big.missed, small.todos, small.missed)},
		{Section: "sessions", Name: name(big, "server CPU per signal"), Value: perSig(big, big.serverCPU), Unit: "ms",
			Baseline: perSig(small, small.serverCPU), Ratio: Ratio(perSig(small, small.serverCPU), perSig(big, big.serverCPU)),
			Target: "<= 1.5 x 100 sessions", Pass: func() *bool { p := perSig(big, big.serverCPU) <= 1.5*perSig(small, small.serverCPU); return &p }(),
			Note: fmt.Sprintf("signals (NOTIFYs heard): %d in %s, 100 sessions: %d in %s; ratio = 100 sessions / 2,000",
				big.signals, big.cfg.ring, small.signals, small.cfg.ring)},
		{Section: "sessions", Name: name(big, "PostgreSQL CPU per signal"), Value: perSig(big, big.pgCPU), Unit: "ms",
			Baseline: perSig(small, small.pgCPU), Ratio: Ratio(perSig(small, small.pgCPU), perSig(big, big.pgCPU)),
			Target: "<= 1.5 x 100 sessions", Pass: func() *bool { p := perSig(big, big.pgCPU) <= 1.5*perSig(small, small.pgCPU); return &p }(),
			Note: "all postgres processes, the producer's create_todo calls included (the same 25/s in both)"},
	}
	lgr := (listens.grIdle - listens.grBase) / float64(listens.cfg.sessions)
	rows = append(rows,
		Row{Section: "sessions", Name: "RSS per idle listen stream (2026-07-28), 2000 / 1000 endpoints", Value: listens.perSession(listens.rssIdle),
			Unit: "KiB", Baseline: big.perSession(big.rssIdle), Target: "<= 40 KB", Pass: Below(listens.perSession(listens.rssIdle), 40000.0/1024+1e-9),
			Note: fmt.Sprintf("baseline: an idle session with its GET stream; server RSS %d MiB before, %d MiB idle", listens.rssBase>>20, listens.rssIdle>>20)},
		Row{Section: "sessions", Name: "goroutines per idle listen stream (2026-07-28)", Value: lgr, Unit: "goroutines",
			Baseline: (big.grIdle - big.grBase) / float64(big.cfg.sessions), Target: "<= 2", Pass: func() *bool { p := lgr <= 2; return &p }()},
		Row{Section: "sessions", Name: "doorbell p99, 2000 listen streams", Value: ms(listens.p99), Unit: "ms", Baseline: ms(big.p99),
			Note: fmt.Sprintf("p50 %.1f ms; %d todos, %d rung, %d not rung within 2 s", ms(listens.p50), listens.todos, listens.rung, listens.missed)})
	if big.idleSpan > 0 {
		rows = append(rows, Row{Section: "sessions", Name: name(big, "server CPU while idle"),
			Value: 100 * big.idleServerCPU.Seconds() / big.idleSpan.Seconds(), Unit: "% of a core"})
	}
	return rows, nil
}

func envNote() string {
	if *serverEnv == "" {
		return ""
	}
	return "; server environment " + *serverEnv
}

// runScale starts a server, vends the endpoints, opens the sessions and measures.
func runScale(ctx context.Context, b *Bench, bin string, sc sessionsConfig) (scaleResult, error) {
	res := scaleResult{cfg: sc}
	dbURL, err := b.NewDB(ctx)
	if err != nil {
		return res, err
	}
	var env []string
	if *serverEnv != "" {
		env = strings.Split(*serverEnv, ",")
	}
	srv, err := mcpbench.StartProcess(ctx, bin, dbURL, env...)
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return res, err
	}
	defer admin.Close(context.Background())
	postmaster, err := postmasterOf(ctx, admin)
	if err != nil {
		return res, err
	}

	eps, err := vendMany(ctx, admin, sc.endpoints, srv.URL)
	if err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second)
	res.rssBase, _ = processRSS(srv.PID)
	if res.grBase, err = metricValue(ctx, srv.URL, "go_goroutines"); err != nil {
		return res, err
	}

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 0, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	col := newCollector()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Open the sessions 16 at a time: session i belongs to endpoint i % endpoints.
	sem := make(chan struct{}, 16)
	errc := make(chan error, 1)
	var opened atomic.Int64
	for i := 0; i < sc.sessions; i++ {
		ep := eps[i%sc.endpoints]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			open := openSession
			if sc.listen {
				open = openListen
			}
			err := open(sctx, hc, ep, col, func() { opened.Add(1); <-sem })
			if err != nil && sctx.Err() == nil {
				select {
				case errc <- err:
				default:
				}
				<-sem
			}
		}()
		select {
		case err := <-errc:
			return res, err
		default:
		}
	}
	for opened.Load() < int64(sc.sessions) {
		select {
		case err := <-errc:
			return res, err
		case <-time.After(20 * time.Millisecond):
		}
	}
	b.Logf("sessions %d/%d: all open", sc.sessions, sc.endpoints)
	// The setup's keep-alive connections hold server goroutines and buffers that belong to no
	// session: closed before the idle figures.
	hc.CloseIdleConnections()
	// Idle: the attach rings done, nothing to say. Then the idle figures.
	time.Sleep(5 * time.Second)
	cpu0, _ := mcpbench.ProcessCPU(srv.PID)
	idleStart := time.Now()
	time.Sleep(5 * time.Second)
	cpu1, _ := mcpbench.ProcessCPU(srv.PID)
	res.idleServerCPU, res.idleSpan = cpu1-cpu0, time.Since(idleStart)
	res.rssIdle, _ = processRSS(srv.PID)
	if res.grIdle, err = metricValue(ctx, srv.URL, "go_goroutines"); err != nil {
		return res, err
	}
	b.Logf("sessions %d/%d: idle RSS %d MiB (base %d), goroutines %.0f (base %.0f)",
		sc.sessions, sc.endpoints, res.rssIdle>>20, res.rssBase>>20, res.grIdle, res.grBase)
	if b.Cfg.Verbose {
		for _, m := range []string{"go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes",
			"go_memstats_next_gc_bytes", "go_memstats_sys_bytes"} {
			v, _ := metricValue(ctx, srv.URL, m)
			b.Logf("  %s %.1f MiB", m, v/(1<<20))
		}
	}

	// The NOTIFYs the server hears, heard here too.
	lis, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return res, err
	}
	defer lis.Close(context.Background())
	if _, err := lis.Exec(ctx, "LISTEN switchboard_doorbell"); err != nil {
		return res, err
	}
	var signals atomic.Int64
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	ldone := make(chan struct{})
	go func() {
		defer close(ldone)
		for {
			if _, err := lis.WaitForNotification(lctx); err != nil {
				return
			}
			signals.Add(1)
		}
	}()

	// The ring load: sessionsRate todos a second at random endpoints, rows sampled each second.
	srvCPU0, _ := mcpbench.ProcessCPU(srv.PID)
	pgCPU0 := clusterCPU(postmaster)
	start := time.Now()
	tick := time.NewTicker(time.Second / sessionsRate)
	sample := time.NewTicker(time.Second)
	var created []string
	createdAt := map[string]time.Time{}
	for time.Since(start) < sc.ring {
		select {
		case <-ctx.Done():
			tick.Stop()
			sample.Stop()
			lcancel()
			return res, ctx.Err()
		case <-sample.C:
			if rss, err := processRSS(srv.PID); err == nil {
				res.rssPeak = max(res.rssPeak, rss)
			}
		case <-tick.C:
			ep := eps[rand.IntN(len(eps))]
			t0 := time.Now()
			var id string
			if err := admin.QueryRow(ctx, `SELECT todo_id FROM switchboard.create_todo($1, 'bench', 'scale probe')`, ep.ID).Scan(&id); err != nil {
				return res, err
			}
			created = append(created, id)
			createdAt[id] = t0
		}
	}
	tick.Stop()
	sample.Stop()
	time.Sleep(2 * time.Second) // the last rings
	res.serverCPU, _ = mcpbench.ProcessCPU(srv.PID)
	res.serverCPU -= srvCPU0
	res.pgCPU = clusterCPU(postmaster) - pgCPU0
	res.rssEnd, _ = processRSS(srv.PID)
	res.rssPeak = max(res.rssPeak, res.rssEnd)
	lcancel()
	<-ldone
	res.signals = int(signals.Load())
	res.todos = len(created)
	var lat []time.Duration
	for _, id := range created {
		at, ok := col.first(id)
		if !ok || at.Sub(createdAt[id]) > 2*time.Second {
			res.missed++
			continue
		}
		lat = append(lat, at.Sub(createdAt[id]))
	}
	res.rung = len(lat)
	if len(lat) == 0 {
		return res, errors.New("no todo was rung")
	}
	slices.Sort(lat)
	res.p50, res.p99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	b.Logf("sessions %d/%d: %d todos, %d signals, p50 %s p99 %s, RSS peak %d MiB end %d MiB, server CPU %s, postgres CPU %s",
		sc.sessions, sc.endpoints, res.todos, res.signals, res.p50, res.p99, res.rssPeak>>20, res.rssEnd>>20,
		res.serverCPU.Round(time.Millisecond), res.pgCPU.Round(time.Millisecond))
	return res, nil
}

// collector records when each todo id was first announced to any session.
type collector struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newCollector() *collector { return &collector{at: map[string]time.Time{}} }

func (c *collector) saw(id string, t time.Time) {
	c.mu.Lock()
	if _, ok := c.at[id]; !ok {
		c.at[id] = t
	}
	c.mu.Unlock()
}

func (c *collector) first(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[id]
	return t, ok
}

// openSession initializes a session on ep, opens its GET stream, calls ready once the stream's
// header arrived, and reads notifications until ctx ends.
func openSession(ctx context.Context, hc *http.Client, ep mcpbench.Endpoint, col *collector, ready func()) error {
	post := func(sid string, body string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+ep.Credential)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", mcpVersion)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return "", fmt.Errorf("POST answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		}
		return resp.Header.Get("Mcp-Session-Id"), nil
	}
	sid, err := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+mcpVersion+
		`","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
	if err != nil {
		return err
	}
	if sid == "" {
		return errors.New("initialize: no session id")
	}
	if _, err := post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+ep.Credential)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", mcpVersion)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET answered %d", resp.StatusCode)
	}
	ready()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var n struct {
			Method string `json:"method"`
			Params struct {
				Meta map[string]string `json:"meta"`
			} `json:"params"`
		}
		if json.Unmarshal(data, &n) == nil && n.Params.Meta["todo_id"] != "" {
			col.saw(n.Params.Meta["todo_id"], time.Now())
		}
	}
	return nil
}

// openListen opens a 2026-07-28 subscriptions/listen stream of a claude/channel client and
// reads it like openSession's GET stream.
func openListen(ctx context.Context, hc *http.Client, ep mcpbench.Endpoint, col *collector, ready func()) error {
	body := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{"experimental":{"claude/channel":{}}}},"notifications":{}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+ep.Credential)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("listen answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	ready()
	return readEvents(resp.Body, col)
}

// readEvents records the doorbell's notifications on an event stream until it ends.
func readEvents(r io.Reader, col *collector) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		var n struct {
			Params struct {
				Meta map[string]string `json:"meta"`
			} `json:"params"`
		}
		if json.Unmarshal(data, &n) == nil && n.Params.Meta["todo_id"] != "" {
			col.saw(n.Params.Meta["todo_id"], time.Now())
		}
	}
	return nil
}

// processRSS is a process's resident set (Linux /proc).
func processRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// metricValue reads one unlabelled sample from the server's /metrics page.
func metricValue(ctx context.Context, base, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// postmasterOf is the postmaster of the cluster conn is connected to: the parent of its backend
// (Linux /proc), so that a section counts this cluster's CPU when other clusters share the machine.
func postmasterOf(ctx context.Context, conn *pgx.Conn) (int, error) {
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, err
	}
	return parentPID(backend)
}

// parentPID is a process's parent (Linux /proc).
func parentPID(pid int) (int, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}

// procStat is /proc/pid/stat split after the command: f[0] is the state, f[1] the parent.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return nil, errors.New("short /proc stat")
	}
	return f, nil
}

// clusterCPU is the CPU time of one PostgreSQL cluster (mcpbench.ClusterCPU).
func clusterCPU(postmaster int) time.Duration { return mcpbench.ClusterCPU(postmaster) }

// vendMany is mcpbench.Vend n times over one connection (a connection each is slow at 1,000).
func vendMany(ctx context.Context, c *pgx.Conn, n int, base string) ([]mcpbench.Endpoint, error) {
	if _, err := c.Exec(ctx, `INSERT INTO switchboard.humans (name) VALUES ('bench') ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	out := make([]mcpbench.Endpoint, n)
	for i := range out {
		cred := "sbk_" + hexToken(32)
		var id, slug string
		if err := c.QueryRow(ctx, `SELECT v->>'endpoint_id', v->>'slug'
			  FROM switchboard.endpoint_vend('bench', $1, $2, 'sbk_', ARRAY['bench']) v`,
			fmt.Sprintf("scale-%d-%s", i, hexToken(4)), store.CredentialHash(cred)).Scan(&id, &slug); err != nil {
			return nil, err
		}
		out[i] = mcpbench.Endpoint{ID: id, Slug: slug, Credential: cred, URL: strings.TrimRight(base, "/") + "/mcp/" + slug}
	}
	return out, nil
}
