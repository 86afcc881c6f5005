// The webhook receiver sections. "ingest" (issue 4): signed github deliveries per second through
// the real HTTP receiver, run in-process (server.New + Serve on a loopback port, keep-alive
// client), beside switchboard.ingest called directly with the arguments the receiver passes, at
// the same concurrency. "rules" (issue 6): the same receiver with a 32-rule list whose last rule
// matches, beside the same webhook with no rules.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"switchboard/server"
	"switchboard/server/receiver/provider"
	"switchboard/server/rules"
	"switchboard/server/store"
)

func init() {
	register(Section{Name: "ingest", Order: 40, Run: ingestSection,
		Doc: "signed github deliveries/s through the HTTP receiver at 1, 8, 32 senders, beside switchboard.ingest called directly"})
	register(Section{Name: "rules", Order: 45, Run: rulesSection,
		Doc: "deliveries/s through a webhook with 32 rules (the last matches), beside the same webhook with no rules"})
}

// ingestSenders are the concurrencies of issue 4; rulesSenders the one of the rules comparison.
var ingestSenders = []int{1, 8, 32}

const rulesSenders = 8

// bodySize is the size of every benchmark delivery (issue 4: 1 KiB of JSON).
const bodySize = 1024

// ingestFixture is a fresh database with one endpoint owning one github webhook on inbox, and a
// real server (its own pool, as in production) listening on a loopback port.
type ingestFixture struct {
	url      string
	admin    *pgx.Conn
	pool     *pgxpool.Pool
	endpoint string
	hookID   string
	token    string
	secret   []byte
	ingest   string // POST URL of the webhook
	client   *http.Client
	shutdown func()
	tag      string // makes delivery ids unique across runs and processes
	seq      atomic.Int64
}

func newIngestFixture(ctx context.Context, b *Bench) (*ingestFixture, error) {
	url, err := b.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	f := &ingestFixture{url: url, admin: c, tag: hexToken(6)}
	fail := func(what string, err error) (*ingestFixture, error) {
		f.close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := c.Exec(ctx, "SELECT switchboard.human_add('bench')"); err != nil {
		return fail("human_add", err)
	}
	cred := "sbk_" + hexToken(32)
	err = c.QueryRow(ctx,
		`SELECT switchboard.endpoint_vend('bench', 'bench-ingest', $1, $2, '{inbox}', NULL, 1, '{github}', '{inbox}', NULL)->>'endpoint_id'`,
		store.CredentialHash(cred), cred[:8]).Scan(&f.endpoint)
	if err != nil {
		return fail("endpoint_vend", err)
	}
	f.token = hexToken(32)
	secret := "whsec_" + hexToken(32)
	f.secret = []byte(secret)
	err = c.QueryRow(ctx, `SELECT switchboard.webhook_create($1, 'github', 'inbox', $2, $3)->>'webhook_id'`,
		f.endpoint, f.token, secret).Scan(&f.hookID)
	if err != nil {
		return fail("webhook_create", err)
	}

	// The server as cmd/switchboard runs it: store.Open sizes the pool; no reaper in a benchmark.
	f.pool, err = store.Open(ctx, url, 0)
	if err != nil {
		return fail("pool", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail("listen", err)
	}
	cfg := server.DefaultConfig()
	cfg.Addr = ln.Addr().String()
	cfg.ReaperInterval = 0
	srv, err := server.New(cfg, f.pool, slog.New(slog.DiscardHandler))
	if err != nil {
		_ = ln.Close()
		return fail("server", err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	f.shutdown = func() { stop(); <-done }
	select {
	case <-srv.Doorbell().Listening():
	case err := <-done:
		stop()
		f.shutdown = nil
		return fail("serve", fmt.Errorf("server stopped before listening: %v", err))
	case <-time.After(10 * time.Second):
		return fail("serve", errors.New("doorbell not listening after 10s"))
	case <-ctx.Done():
		return fail("serve", ctx.Err())
	}
	f.ingest = "http://" + cfg.Addr + "/webhooks/w/" + f.token
	f.client = &http.Client{Transport: &http.Transport{
		MaxIdleConns: 128, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute, // keep-alive for every sender
	}}
	return f, nil
}

func (f *ingestFixture) close() {
	if f.client != nil {
		f.client.CloseIdleConnections()
	}
	if f.shutdown != nil {
		f.shutdown()
	}
	if f.pool != nil {
		f.pool.Close()
	}
	_ = f.admin.Close(context.Background())
}

// vacuum before a run: the stored deliveries are insert-only, so the tables only need it once per
// comparison (full=true); the doorbell row is updated by every ring, so before every run. Then a
// CHECKPOINT, as in the other sections, so no run carries another's.
func (f *ingestFixture) vacuum(ctx context.Context, full bool) error {
	q := "VACUUM switchboard.doorbell"
	if full {
		q = "VACUUM (ANALYZE) switchboard.webhook_events, switchboard.todos, switchboard.doorbell"
	}
	_, err := f.admin.Exec(ctx, q)
	if err == nil {
		_, err = f.admin.Exec(ctx, "CHECKPOINT")
	}
	return err
}

// delivery is the next unique 1 KiB github push: its body and the headers GitHub would send.
func (f *ingestFixture) delivery() ([]byte, http.Header) {
	n := f.seq.Add(1)
	id := fmt.Sprintf("%s-%08d", f.tag, n)
	head := fmt.Sprintf(`{"n":%d,"delivery":%q,"ref":"refs/heads/main","before":"%040d","after":"%040d",`+
		`"repository":{"full_name":"bench/switchboard","private":false},"pusher":{"name":"bench"},"pad":"`, n, id, n-1, n)
	body := make([]byte, 0, bodySize)
	body = append(body, head...)
	for len(body) < bodySize-2 {
		body = append(body, 'x')
	}
	body = append(body, '"', '}')
	h := provider.Sign("github", f.secret, body, time.Now(), id, "push")
	return body, h
}

// post sends one delivery through the receiver and expects 202.
func (f *ingestFixture) post(ctx context.Context) error {
	body, h := f.delivery()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.ingest, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "GitHub-Hookshot/bench")
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	reply, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("receiver answered %d: %s", resp.StatusCode, bytes.TrimSpace(reply))
	}
	return nil
}

// ingestSQL is switchboard.ingest as ingest_if_current calls it for the receiver (server/receiver).
const ingestSQL = `SELECT switchboard.ingest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

// rawIngest calls switchboard.ingest on c with the arguments the receiver would pass for the next
// delivery of a webhook without rules: the same verification, header sanitising and trace, and
// the headers the receiver sees (the client's plus Content-Length and Accept-Encoding).
func (f *ingestFixture) rawIngest(ctx context.Context, c *pgx.Conn, trace []byte) error {
	body, h := f.delivery()
	h.Set("User-Agent", "GitHub-Hookshot/bench")
	h.Set("Accept-Encoding", "gzip")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	v, err := provider.Verify("github", f.secret, provider.Request{Header: h, Body: body, Now: time.Now()})
	if err != nil {
		return err
	}
	headers, err := json.Marshal(provider.SanitizeHeaders(h))
	if err != nil {
		return err
	}
	var raw []byte
	var queue *string
	var endpoints []string
	err = c.QueryRow(ctx, ingestSQL,
		f.hookID, provider.IdempotencyKey(f.hookID, v, body), nullText(v.EventType), v.Verified, v.VerifyDetail,
		nullText(h.Get("Content-Type")), len(body), body, headers, v.Title, "delivered", trace,
		queue, endpoints).Scan(&raw)
	if err != nil {
		return fmt.Errorf("switchboard.ingest: %w", err)
	}
	// Decoded as the receiver decodes it.
	var out struct {
		Created int `json:"created"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return err
	}
	if out.Created != 1 {
		return fmt.Errorf("switchboard.ingest created %d todos: %s", out.Created, raw)
	}
	return nil
}

func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// cpuUsage is process CPU (the bench process: senders, receiver, pgx) and the machine's CPU counters.
type cpuUsage struct {
	proc       time.Duration
	busy, all  uint64 // /proc/stat jiffies
	haveSystem bool
}

func cpuSample() cpuUsage {
	var u cpuUsage
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.proc = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); len(f) >= 8 && f[0] == "cpu" {
			for i, s := range f[1:] {
				v, _ := strconv.ParseUint(s, 10, 64)
				u.all += v
				if i != 3 && i != 4 { // idle, iowait
					u.busy += v
				}
			}
			u.haveSystem = true
		}
	}
	return u
}

// runCost is what timed runs used: bench-process CPU per operation and the machine's busy share.
type runCost struct {
	procPerOp time.Duration
	busy      float64 // 0..1 of all CPUs, mean over the runs
	ops, runs int64
	proc      time.Duration
	busySum   float64
}

func (c runCost) add(o runCost) runCost {
	t := runCost{ops: c.ops + o.ops, runs: c.runs + o.runs, proc: c.proc + o.proc, busySum: c.busySum + o.busySum}
	if t.ops > 0 {
		t.procPerOp = t.proc / time.Duration(t.ops)
	}
	if t.runs > 0 {
		t.busy = t.busySum / float64(t.runs)
	}
	return t
}

// measureRun runs op on n clients (no database sessions: op brings its own) and returns the result
// with its CPU cost over the whole run, warm-up included (the per-op figure uses Total).
func measureRun(ctx context.Context, b *Bench, clients []*pgx.Conn, op Op) (Result, runCost, error) {
	before := cpuSample()
	r, err := b.Run(ctx, clients, op)
	after := cpuSample()
	c := runCost{ops: r.Total, runs: 1, proc: after.proc - before.proc}
	if after.haveSystem && after.all > before.all {
		c.busySum = float64(after.busy-before.busy) / float64(after.all-before.all)
	}
	return r, runCost{}.add(c), err
}

func fmtMicros(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + " µs"
}

// noRulesTrace is the trace the receiver stores for a webhook without rules.
func noRulesTrace() []byte {
	b, _ := json.Marshal(rules.Trace{Stage: "default", Action: &rules.Action{Queue: "inbox"}})
	return b
}

// --- ingest ------------------------------------------------------------------------------------

func ingestSection(ctx context.Context, b *Bench) ([]Row, error) {
	cfg := b.Cfg
	t0 := time.Now()
	f, err := newIngestFixture(ctx, b)
	if err != nil {
		return nil, err
	}
	defer f.close()
	b.Logf("ingest: database and server ready in %s", time.Since(t0).Round(time.Millisecond))
	maxN := 0
	for _, n := range ingestSenders {
		maxN = max(maxN, n)
	}
	conns, err := b.Connect(ctx, f.url, maxN)
	if err != nil {
		return nil, err
	}
	defer CloseAll(conns)
	senders := make([]*pgx.Conn, maxN) // HTTP senders need no session: nil placeholders
	trace := noRulesTrace()

	httpOp := func(ctx context.Context, _ int, _ *pgx.Conn) (bool, error) { return true, f.post(ctx) }
	sqlOp := func(ctx context.Context, _ int, c *pgx.Conn) (bool, error) { return true, f.rawIngest(ctx, c, trace) }

	type variant struct {
		name  string
		conns []*pgx.Conn
		op    Op
	}
	var rows []Row
	for _, n := range ingestSenders {
		res, costs := map[string]Result{}, map[string]runCost{}
		for round := 0; round < cfg.Rounds; round++ {
			order := []variant{{"http", senders, httpOp}, {"sql", conns, sqlOp}}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, v := range order {
				t0 := time.Now()
				if err := f.vacuum(ctx, round == 0 && v.name == order[0].name); err != nil {
					return rows, err
				}
				vac := time.Since(t0)
				r, c, err := measureRun(ctx, b, v.conns[:n], v.op)
				if err != nil {
					return rows, fmt.Errorf("ingest %s at %d: %w", v.name, n, err)
				}
				b.Logf("ingest %-4s %2d senders round %d: %.0f deliveries/s, %s CPU/delivery in process, machine %.0f%% busy (vacuum %s)",
					v.name, n, round, r.Rate(), fmtMicros(c.procPerOp), 100*c.busy, vac.Round(time.Millisecond))
				res[v.name] = res[v.name].Add(r)
				costs[v.name] = costs[v.name].add(c)
			}
		}
		rh, rs := res["http"].Rate(), res["sql"].Rate()
		row := Row{Section: "ingest", Name: fmt.Sprintf("receiver, %d sender(s), signed github 1 KiB", n),
			Value: rh, Unit: "deliveries/s", Baseline: rs, Ratio: Ratio(rh, rs),
			Target: ">= 0.50 x SQL", Pass: AtLeast(Ratio(rh, rs), 0.5),
			Note: fmt.Sprintf("bench-process CPU per delivery %s over HTTP (senders + receiver + pool) vs %s calling SQL directly; machine CPU busy %.0f%% / %.0f%%",
				fmtMicros(costs["http"].procPerOp), fmtMicros(costs["sql"].procPerOp), 100*costs["http"].busy, 100*costs["sql"].busy)}
		rows = append(rows, row)
	}
	if len(rows) > 0 {
		rows[0].BaseName = fmt.Sprintf("switchboard.ingest(...) called directly with the receiver's arguments (same signing, verification and header JSON in the client), one session per sender; the receiver uses store.Open's pool (%d connections)",
			f.pool.Config().MaxConns)
	}
	return rows, nil
}

// --- rules -------------------------------------------------------------------------------------

// benchRules is 31 rules that never match a benchmark delivery, then one that matches every one.
func benchRules() []rules.Rule {
	out := make([]rules.Rule, 0, 32)
	for i := 1; i <= 31; i++ {
		out = append(out, rules.Rule{ID: fmt.Sprintf("r%d", i), Expr: fmt.Sprintf(".payload.n == -%d", i),
			Action: rules.Action{Queue: "inbox"}})
	}
	return append(out, rules.Rule{ID: "r32", Expr: `.kind == "push" and .payload.n >= 0`, Action: rules.Action{Queue: "inbox"}})
}

func rulesSection(ctx context.Context, b *Bench) ([]Row, error) {
	cfg := b.Cfg
	f, err := newIngestFixture(ctx, b)
	if err != nil {
		return nil, err
	}
	defer f.close()
	list := benchRules()
	listJSON, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	save := func(rulesJSON []byte) error {
		_, err := f.admin.Exec(ctx, "SELECT switchboard.rules_save($1, $2, $3, NULL, NULL)", f.endpoint, f.hookID, rulesJSON)
		return err
	}
	// The last stored event must have been routed by the rule the mode expects.
	check := func(mode string) error {
		var disposition, ruleID string
		err := f.admin.QueryRow(ctx, `SELECT disposition, coalesce(routing->>'rule_id', '') FROM switchboard.webhook_events
			WHERE webhook_id = $1 ORDER BY id DESC LIMIT 1`, f.hookID).Scan(&disposition, &ruleID)
		if err != nil {
			return err
		}
		if want := map[string]string{"rules": "r32", "none": ""}[mode]; ruleID != want || disposition != "delivered" {
			return fmt.Errorf("rules %s: last event %s by rule %q, want delivered by %q", mode, disposition, ruleID, want)
		}
		return nil
	}
	senders := make([]*pgx.Conn, rulesSenders)
	op := func(ctx context.Context, _ int, _ *pgx.Conn) (bool, error) { return true, f.post(ctx) }

	res, costs := map[string]Result{}, map[string]runCost{}
	for round := 0; round < cfg.Rounds; round++ {
		order := []string{"rules", "none"}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, mode := range order {
			doc := []byte("[]")
			if mode == "rules" {
				doc = listJSON
			}
			if err := save(doc); err != nil {
				return nil, fmt.Errorf("rules_save: %w", err)
			}
			if err := f.vacuum(ctx, round == 0 && mode == order[0]); err != nil {
				return nil, err
			}
			r, c, err := measureRun(ctx, b, senders, op)
			if err != nil {
				return nil, fmt.Errorf("rules %s: %w", mode, err)
			}
			if err := check(mode); err != nil {
				return nil, err
			}
			b.Logf("rules %-5s round %d: %.0f deliveries/s, %s CPU/delivery in process, machine %.0f%% busy",
				mode, round, r.Rate(), fmtMicros(c.procPerOp), 100*c.busy)
			res[mode] = res[mode].Add(r)
			costs[mode] = costs[mode].add(c)
		}
	}

	// The evaluation alone, in this process, on one delivery's envelope: what the rows should
	// differ by when the machine is not saturated.
	alone, err := evaluateAlone(ctx, f, list)
	if err != nil {
		return nil, err
	}

	rr, rn := res["rules"].Rate(), res["none"].Rate()
	perDelivery := time.Duration(0)
	if rr > 0 && rn > 0 {
		perDelivery = time.Duration((1/rr - 1/rn) * float64(time.Second))
	}
	cpuDiff := costs["rules"].procPerOp - costs["none"].procPerOp
	return []Row{
		{Section: "rules", Name: fmt.Sprintf("receiver, 32 rules (last matches), %d senders", rulesSenders),
			Value: rr, Unit: "deliveries/s", Baseline: rn, Ratio: Ratio(rr, rn),
			BaseName: "the same webhook and senders with an empty rule list (rules_save '[]' between runs)",
			Note: fmt.Sprintf("evaluation cost per delivery ≈ (1/rate_rules − 1/rate_none) = %s of throughput time; bench-process CPU per delivery %s with rules vs %s without (+%s)",
				fmtMicros(perDelivery), fmtMicros(costs["rules"].procPerOp), fmtMicros(costs["none"].procPerOp), fmtMicros(cpuDiff))},
		{Section: "rules", Name: "  Envelope + Program.Evaluate alone, 32 rules, 1 goroutine", Value: float64(alone) / 1e3, Unit: "µs/delivery",
			Note: "rules.Compile once, then rules.Envelope + Evaluate of one benchmark delivery per call (no HTTP, no SQL)"},
	}, nil
}

// evaluateAlone times rules.Envelope + Program.Evaluate of the list (what the receiver does per
// delivery once the program is cached) on one benchmark delivery for about a second.
func evaluateAlone(ctx context.Context, f *ingestFixture, list []rules.Rule) (time.Duration, error) {
	prog, err := rules.Compile(list, nil, map[string]any{})
	if err != nil {
		return 0, fmt.Errorf("compile: %w", err)
	}
	body, h := f.delivery()
	h.Set("User-Agent", "GitHub-Hookshot/bench")
	v, err := provider.Verify("github", f.secret, provider.Request{Header: h, Body: body, Now: time.Now()})
	if err != nil {
		return 0, err
	}
	headers := provider.SanitizeHeaders(h)
	eval := func() rules.Decision {
		env := rules.Envelope("github", v.EventType, f.hookID, provider.ModeSigned, v.Verified, h.Get("Content-Type"),
			len(body), headers, body)
		return prog.Evaluate(ctx, env)
	}
	if d := eval(); d.Trace.RuleID != "r32" {
		return 0, fmt.Errorf("evaluate: matched %q, want r32 (%+v)", d.Trace.RuleID, d.Trace)
	}
	n, start := 0, time.Now()
	for time.Since(start) < time.Second && ctx.Err() == nil {
		for i := 0; i < 100; i++ {
			eval()
		}
		n += 100
	}
	return time.Since(start) / time.Duration(n), nil
}

func hexToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
