package e2e

// Change it while it runs: agents drain a queue and a sender delivers signed webhooks while
// the schema is migrated (here) or the replicas are restarted one by one (rolling_test.go).

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/db"
	"switchboard/server"
	"switchboard/tests/e2e/agentclient"
	"switchboard/tests/testdb"
	"switchboard/tests/testproc"
)

// liveLoad is agents draining one endpoint's inbox through mcpURL and a sender posting signed
// GitHub deliveries to hookURL, until stop.
type liveLoad struct {
	t         *testing.T
	mcpURL    string
	cred      string
	hookURL   string
	secret    string
	reconnect bool // a transport error is retried on a new session (rolling restarts)
	wait      int  // claim_next's wait_seconds (0: poll)

	stopSend  chan struct{}  // the sender stops
	stop      chan struct{}  // the agents stop
	wg        sync.WaitGroup // the agents
	sent      sync.WaitGroup // the sender
	delivered atomic.Int64
	retried   atomic.Int64 // calls retried after a transport error, on a new session

	mu      sync.Mutex
	samples []sample       // tool call latencies
	done    map[string]int // todo id → completions
	failed  []string       // tool calls that failed
	refused []string       // deliveries not accepted
}

type sample struct {
	at time.Time
	d  time.Duration
}

func startLoad(t *testing.T, l *liveLoad, agents int, every time.Duration) {
	l.t, l.stop, l.stopSend, l.done = t, make(chan struct{}), make(chan struct{}), map[string]int{}
	for i := range agents {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.agent(i) }()
	}
	l.sent.Add(1)
	go func() { defer l.sent.Done(); l.sender(every) }()
}

func (l *liveLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *liveLoad) fail(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed = append(l.failed, fmt.Sprintf(format, a...))
}

// call makes one tool call, timed; with reconnect, a transport error (the session's replica
// went away) is retried on a new session.
func (l *liveLoad) call(c **agentclient.Client, i int, verb string, args map[string]any, out any) error {
	for {
		if *c == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// Odd agents hold a GET stream too.
			nc, err := agentclient.Connect(ctx, l.mcpURL, l.cred, &agentclient.Options{NoStream: i%2 == 0})
			cancel()
			if err != nil {
				if !l.reconnect || l.stopped() {
					return fmt.Errorf("agent %d connect: %w", i, err)
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			*c = nc
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		raw, err := (*c).Call(ctx, verb, args)
		d := time.Since(start)
		cancel()
		var te *agentclient.ToolError
		if err != nil && !errors.As(err, &te) && l.reconnect {
			l.retried.Add(1)
			_ = (*c).Close()
			*c = nil
			continue
		}
		if err != nil {
			return fmt.Errorf("agent %d %s: %w", i, verb, err)
		}
		l.mu.Lock()
		l.samples = append(l.samples, sample{at: start, d: d})
		l.mu.Unlock()
		return json.Unmarshal(raw, out)
	}
}

// agent claims and completes until stop; an empty queue is polled every 100 ms (no waiting
// claim_next, so every latency is a call's own).
func (l *liveLoad) agent(i int) {
	var c *agentclient.Client
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	for !l.stopped() {
		var got claimNext
		args := map[string]any{}
		if l.wait > 0 {
			args["wait_seconds"] = l.wait
		}
		if err := l.call(&c, i, "claim_next", args, &got); err != nil {
			l.fail("%v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if got.Empty {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var out todo
		if err := l.call(&c, i, "complete", map[string]any{"id": got.Todo.ID, "result": map[string]any{"by": i}}, &out); err != nil {
			l.fail("%v", err)
			continue
		}
		l.mu.Lock()
		l.done[got.Todo.ID]++
		l.mu.Unlock()
	}
}

// sender posts one signed GitHub delivery every `every` until stop.
func (l *liveLoad) sender(every time.Duration) {
	hc := &http.Client{Timeout: 30 * time.Second}
	for n := 0; ; n++ {
		select {
		case <-l.stopSend:
			return
		default:
		}
		body := fmt.Appendf(nil, `{"action":"opened","number":%d}`, n)
		m := hmac.New(sha256.New, []byte(l.secret))
		m.Write(body)
		req, _ := http.NewRequest(http.MethodPost, l.hookURL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "issues")
		req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("live-%d-%d", time.Now().UnixNano(), n))
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
		resp, err := hc.Do(req)
		switch {
		case err != nil:
			l.mu.Lock()
			l.refused = append(l.refused, err.Error())
			l.mu.Unlock()
		case resp.StatusCode/100 != 2:
			l.mu.Lock()
			l.refused = append(l.refused, resp.Status)
			l.mu.Unlock()
		default:
			l.delivered.Add(1)
		}
		if resp != nil {
			resp.Body.Close()
		}
		time.Sleep(every)
	}
}

// finish stops the sender, lets the agents drain what was delivered, stops them and checks that
// every delivery became one todo completed exactly once, and that nothing failed.
func (l *liveLoad) finish(e *env, ep endpoint) {
	t := l.t
	t.Helper()
	close(l.stopSend)
	l.sent.Wait() // its last delivery is in before the queue is checked
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var open int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM switchboard.todos
		    WHERE endpoint_id = $1 AND state IN ('pending', 'claimed')`, ep.ID).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var todos, done int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE state = 'done')
	    FROM switchboard.todos WHERE endpoint_id = $1`, ep.ID).Scan(&todos, &done); err != nil {
		t.Fatal(err)
	}
	doubled := 0
	for _, n := range l.done {
		if n > 1 {
			doubled++
		}
	}
	t.Logf("%d deliveries accepted, %d todos, %d done, %d completions by agents (%d doubled); %d calls retried on a new session",
		l.delivered.Load(), todos, done, len(l.done), doubled, l.retried.Load())
	if len(l.failed) > 0 {
		t.Errorf("%d tool calls failed, e.g. %v", len(l.failed), l.failed[:min(5, len(l.failed))])
	}
	if len(l.refused) > 0 {
		t.Errorf("%d deliveries refused, e.g. %v", len(l.refused), l.refused[:min(5, len(l.refused))])
	}
	if int64(todos) != l.delivered.Load() || done != todos || len(l.done) != todos || doubled > 0 {
		t.Errorf("lost or doubled work: %d deliveries, %d todos, %d done, %d completed by agents, %d doubled",
			l.delivered.Load(), todos, done, len(l.done), doubled)
	}
}

// p99 is the 99th percentile of the latencies sampled in [from, to), and how many there were.
func (l *liveLoad) p99(from, to time.Time) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for _, s := range l.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			ds = append(ds, s.d)
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*99/100)], len(ds)
}

// unlimited lifts the per-endpoint tool rate limit: 16 agents of one endpoint polling an empty
// queue exceed the default 50 calls/s.
func unlimited(c *server.Config) { c.Limits.ToolRate, c.Limits.ToolBurst = 100000, 100000 }

// liveEndpoint vends the agents' endpoint with a GitHub webhook into its inbox.
func liveEndpoint(t *testing.T, e *env, base string) (endpoint, string, string) {
	t.Helper()
	ep := e.vend("live", []string{"inbox"}, nil)
	e.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{github}', webhook_queues = '{inbox}' WHERE id = $1`, ep.ID)
	c := (&instance{base: base}).connect(t, ep, &agentclient.Options{NoStream: true})
	var w struct {
		IngestURL     string `json:"ingest_url"`
		SigningSecret string `json:"signing_secret"`
	}
	if err := c.CallInto(ctxT(t), "create_webhook", map[string]any{"source_type": "github", "target_queue": "inbox"}, &w); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	return ep, w.IngestURL, w.SigningSecret
}

// The acceptance test of the in-place install: 16 agents drain and a sender delivers signed
// webhooks while `switchboard migrate` runs 20 times with nothing to apply, then a package
// whose claim_next body differs is installed and the real one again. No tool call fails, no
// delivery is refused, nothing is lost or doubled; the p99 tool latency while migrating is
// logged beside the p99 before.
func TestMigrateUnderLoad(t *testing.T) {
	bin := testproc.Switchboard(t)
	e := newEnv(t, unlimited)
	ep, hook, secret := liveEndpoint(t, e, e.base)
	l := &liveLoad{mcpURL: e.url(ep), cred: ep.Cred, hookURL: hook, secret: secret}
	startLoad(t, l, 16, 20*time.Millisecond)

	quietFrom := time.Now()
	time.Sleep(4 * time.Second)
	migFrom := time.Now()
	for i := range 20 {
		cmd := exec.Command(bin, "migrate", "--json")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+e.dsn)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"code": "unchanged"`) {
			t.Fatalf("migrate %d: %v\n%s", i+1, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, pkg := range []fs.FS{testdb.ChangedCode(t, "queue.sql", // claim_next's body, changed by a comment
		"    -- The grant, and whether this endpoint has expired leases",
		"    -- (a changed copy)\n    -- The grant, and whether this endpoint has expired leases"), nil} {
		res, err := db.MigrateWith(context.Background(), conn, db.Options{Code: pkg})
		if err != nil || res.Code != db.CodeInstalled {
			t.Fatalf("install: %+v %v", res, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	migTo := time.Now()
	quiet, nq := l.p99(quietFrom, migFrom)
	busy, nb := l.p99(migFrom, migTo)
	t.Logf("p99 tool latency: %v without migrates (%d calls), %v while 20 no-op migrates and 2 installs ran (%d calls, %v)",
		quiet, nq, busy, nb, migTo.Sub(migFrom).Round(time.Millisecond))
	l.finish(e, ep)
}

// A migration that needs ACCESS EXCLUSIVE on switchboard.todos while another transaction holds
// ACCESS SHARE on it times out under its lock_timeout and retries, and the tool calls queued
// behind its request wait at most that long each time: they keep answering. The control run
// first, with a lock timeout longer than the reader's transaction (what a migrate without one
// does), shows the calls all waiting behind it for as long as the reader holds its lock.
func TestMigrateLockQueue(t *testing.T) {
	e := newEnv(t, unlimited)
	ep, hook, secret := liveEndpoint(t, e, e.base)
	l := &liveLoad{mcpURL: e.url(ep), cred: ep.Cred, hookURL: hook, secret: secret}
	startLoad(t, l, 4, 20*time.Millisecond)
	time.Sleep(time.Second)

	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	migs := fstest.MapFS{}
	entries, _ := fs.ReadDir(db.Migrations(), ".")
	for _, en := range entries {
		b, _ := fs.ReadFile(db.Migrations(), en.Name())
		migs[en.Name()] = &fstest.MapFile{Data: b}
	}
	const hold = 3 * time.Second
	// run holds ACCESS SHARE on todos for 3 s in another transaction and migrates one more
	// ALTER TABLE meanwhile; it returns the slowest tool call while the lock was held.
	run := func(column string, timeout time.Duration) (db.Result, time.Duration, time.Duration, int) {
		reader, err := pgx.Connect(context.Background(), e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Close(context.Background())
		tx, err := reader.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(context.Background(), `LOCK TABLE switchboard.todos IN ACCESS SHARE MODE`); err != nil {
			t.Fatal(err)
		}
		held := time.Now()
		go func() {
			time.Sleep(hold)
			_ = tx.Commit(context.Background())
		}()
		migs[fmt.Sprintf("%03d_test.sql", len(migs)+1)] = &fstest.MapFile{
			Data: []byte(`ALTER TABLE switchboard.todos ADD COLUMN ` + column + ` int;`)}
		res, err := db.MigrateWith(context.Background(), conn, db.Options{Migrations: migs, LockTimeout: timeout})
		took := time.Since(held)
		if err != nil || res.Applied != 1 {
			t.Fatalf("migrate behind a reader: %+v %v", res, err)
		}
		if took < hold {
			t.Fatalf("migrated %v after the reader took its lock, before it let go", took)
		}
		time.Sleep(500 * time.Millisecond) // the calls that waited have answered
		l.mu.Lock()
		defer l.mu.Unlock()
		var worst time.Duration
		calls := 0
		for _, s := range l.samples {
			if !s.at.Before(held) && s.at.Before(held.Add(hold)) {
				calls++
				worst = max(worst, s.d)
			}
		}
		return res, took, worst, calls
	}

	res, took, worst, calls := run("lock_probe_a", 10*time.Second)
	t.Logf("control, lock_timeout 10 s: %d attempt(s) over %v; %d tool calls started while the reader held its lock, the slowest took %v",
		res.Attempts, took.Round(time.Millisecond), calls, worst.Round(time.Millisecond))
	if worst < hold/2 {
		t.Errorf("control: the calls did not queue behind the migrate (slowest %v)", worst)
	}

	const timeout = 200 * time.Millisecond
	res, took, worst, calls = run("lock_probe_b", timeout)
	t.Logf("lock_timeout %v: %d attempts over %v; %d tool calls started while the reader held its lock, the slowest took %v",
		timeout, res.Attempts, took.Round(time.Millisecond), calls, worst.Round(time.Millisecond))
	if res.Attempts < 2 || calls < 20 || worst > hold/2 {
		t.Errorf("tool calls queued behind the migrate: %d attempts, %d answered, slowest %v", res.Attempts, calls, worst)
	}
	l.finish(e, ep)
}
