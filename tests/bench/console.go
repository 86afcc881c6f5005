package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/server"
	"switchboard/server/store"
)

// The console's pages with a big history (issue 36): 1,000,000 done todos over the last day and
// 100,000 stored deliveries of one webhook. What is timed is each page as the server answers it
// (the console's handler called in-process with alice's session: its SQL as the runtime role
// and the rendering, no network): home (endpoints, queues, the chart), the queue page (newest
// first, filtered by queue and state, and a title search that matches one todo), the dead
// letters and the delivery log. The chart reads the rollup, which is first caught up (the figure
// reported: the time a new server spends counting a day of history).

func init() {
	register(Section{Name: "console", Order: 95, Run: consoleSection,
		Doc: "console pages (home, queues, delivery log), server time, with 1,000,000 done todos and 100,000 deliveries: p95 of one page"})
}

const consoleSeed = `
SELECT switchboard.human_add('alice');
SELECT switchboard.human_add('bob');
`

func consoleSection(ctx context.Context, b *Bench) ([]Row, error) {
	url, err := b.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, consoleSeed); err != nil {
		return nil, err
	}
	vend := func(human, agent string) (string, error) {
		sum := sha256.Sum256([]byte(agent + human))
		var id string
		err := admin.QueryRow(ctx, "SELECT switchboard.endpoint_vend($1, $2, $3, 'sbk_bench', ARRAY['inbox', 'other'])->>'endpoint_id'",
			human, agent, sum[:]).Scan(&id)
		return id, err
	}
	ep, err := vend("alice", "worker")
	if err != nil {
		return nil, err
	}
	if _, err := vend("bob", "worker"); err != nil {
		return nil, err
	}
	token := make([]byte, 24)
	_, _ = rand.Read(token)
	var hook, alice string
	if err := admin.QueryRow(ctx, `INSERT INTO switchboard.webhooks (endpoint_id, source_type, trust_mode, target_queue, ingest_token, signing_secret)
		VALUES ($1, 'stripe', 'signed', 'inbox', $2, 'whsec_bench') RETURNING id`, ep, hex.EncodeToString(token)).Scan(&hook); err != nil {
		return nil, err
	}
	if err := admin.QueryRow(ctx, "SELECT id FROM switchboard.humans WHERE name = 'alice'").Scan(&alice); err != nil {
		return nil, err
	}
	b.Logf("console: filling 100,000 deliveries and 1,000,000 done todos")
	start := time.Now()
	fill := []string{
		`INSERT INTO switchboard.webhook_events (webhook_id, source, event_type, trust_mode, verified, verify_detail,
		        payload_size, payload, delivery_key, disposition, received_at)
		 SELECT $1, 'stripe', 'payment_intent.succeeded', 'signed', true, 'ok', 40,
		        jsonb_build_object('id', 'evt_' || g, 'amount', g), 'evt_' || g, 'delivered',
		        now() - (100000 - g) * interval '800 ms'
		   FROM generate_series(1, 100000) g`,
		// The first 100,000 todos came from the deliveries (one each), the rest were pushed.
		`INSERT INTO switchboard.todos (endpoint_id, queue, title, source, state, attempt, max_attempts, result,
		        created_at, ready_at, updated_at, completed_at, event_id, payload, payload_size)
		 SELECT $1, CASE WHEN g % 2 = 0 THEN 'inbox' ELSE 'other' END, 'job ' || g, 'bench', 'done', 1, 5,
		        '{"ok": true}', c - interval '2 s', c - interval '2 s', c, c,
		        CASE WHEN g <= 100000 THEN e.first + g - 1 END,
		        CASE WHEN g > 100000 THEN jsonb_build_object('n', g) END, 12
		   FROM generate_series(1, 1000000) g,
		        LATERAL (SELECT now() - (1000000 - g) * interval '80 ms' AS c) t,
		        (SELECT min(id) AS first FROM switchboard.webhook_events) e`,
		// A live queue beside the history: pending work and a few dead letters.
		`INSERT INTO switchboard.todos (endpoint_id, queue, title, source, max_attempts, payload)
		 SELECT $1, 'inbox', 'waiting ' || g, 'bench', 5, '{}' FROM generate_series(1, 1000) g`,
		`INSERT INTO switchboard.todos (endpoint_id, queue, title, source, state, owner, attempt, max_attempts, result, completed_at)
		 SELECT $1, 'inbox', 'broken ' || g, 'bench', 'failed', 'agent:x', 5, 5, '{"error": "boom"}', now() FROM generate_series(1, 50) g`,
	}
	for i, q := range fill {
		arg := ep
		if i == 0 {
			arg = hook
		}
		if _, err := admin.Exec(ctx, q, arg); err != nil {
			return nil, fmt.Errorf("fill %d: %w", i, err)
		}
	}
	if _, err := admin.Exec(ctx, "VACUUM (ANALYZE) switchboard.todos, switchboard.webhook_events"); err != nil {
		return nil, err
	}
	b.Logf("console: filled in %s", time.Since(start).Round(time.Second))

	pool, err := store.Open(ctx, url, 4)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	st := store.New(pool)
	start = time.Now()
	counted, err := st.ConsoleRollup(ctx, 10*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	catchUp := time.Since(start)
	start = time.Now()
	if _, err := st.ConsoleRollup(ctx, time.Minute); err != nil {
		return nil, err
	}
	tick := time.Since(start)

	// The console as the server mounts it, called in-process: server time, no network.
	cfg := server.DefaultConfig()
	cfg.ReaperInterval = 0
	srv, err := server.New(cfg, pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	console := srv.Console().Handler()
	session := make([]byte, 32)
	_, _ = rand.Read(session)
	cookie := hex.EncodeToString(session)
	sum := sha256.Sum256([]byte(cookie))
	if err := st.ConsoleSessionStart(ctx, alice, sum[:], time.Hour, 12*time.Hour); err != nil {
		return nil, err
	}
	get := func(path string) func() error {
		return func() error {
			req := httptest.NewRequest("GET", path, nil).WithContext(ctx)
			req.AddCookie(&http.Cookie{Name: "__Host-sb_session", Value: cookie})
			rec := httptest.NewRecorder()
			console.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				return fmt.Errorf("GET %s: %d", path, rec.Code)
			}
			return nil
		}
	}
	pages := []struct {
		name string
		page func() error
	}{
		{"home", get("/console/")},
		{"queues", get("/console/queues")},
		{"queues, inbox done", get("/console/queues?queue=inbox&state=done")},
		{"queues, title search", get("/console/queues?q=job+99999")},
		{"dead letters", get("/console/deadletters")},
		{"delivery log", get("/console/webhooks/" + hook)},
	}
	rows := []Row{{Section: "console", Name: "rollup catch-up, a day", Value: catchUp.Seconds() * 1000, Unit: "ms",
		Note: fmt.Sprintf("%d finished todos counted once; a tick after: %.1f ms", counted, tick.Seconds()*1000)}}
	n := 200
	for _, p := range pages {
		var ds []time.Duration
		for i := 0; i < n+10; i++ {
			t0 := time.Now()
			if err := p.page(); err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			if i >= 10 { // the first calls prepare the statements
				ds = append(ds, time.Since(t0))
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		p95 := ds[len(ds)*95/100].Seconds() * 1000
		rows = append(rows, Row{Section: "console", Name: p.name + " p95", Value: p95, Unit: "ms",
			Target: "< 50 ms", Pass: Below(p95, 50),
			Note: fmt.Sprintf("median %.1f ms, %d pages", ds[len(ds)/2].Seconds()*1000, n)})
	}
	return rows, nil
}
