package main

// The cost curve (issue 16): how the price of the hot path changes with what the tables hold.
//
//   cold     claim_next+complete on a 100k backlog PostgreSQL has never analyzed (and one
//            analyzed while nearly empty), beside the same backlog after ANALYZE
//   history  claim_next+complete with 1M done todos and 1M events beside empty tables;
//            list_todos p99 and reap() of 100k expired leases on the full tables; the claim
//            index's size after a million rows passed through it
//   wal      WAL bytes per delivery (pg_current_wal_lsn) for 1 and for 10 targets

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"switchboard/server/store"
)

func init() {
	register(Section{Name: "cold", Order: 25, Run: coldSection,
		Doc: "claim_next+complete on a never-analyzed 100k backlog (and one analyzed when nearly empty) beside the same after ANALYZE"})
	register(Section{Name: "history", Order: 27, Run: historySection,
		Doc: "claim_next+complete with 1M done todos and 1M events beside empty tables; list_todos p99, reap() and index size there"})
	register(Section{Name: "wal", Order: 42, Run: walSection,
		Doc: "WAL bytes per delivery (64 KiB payload) for 1 and for 10 targets"})
}

const coldBacklog = 100000

// fillPending inserts n pending todos for ep straight into the table (no function: the fill is
// not what is measured), oldest first.
func fillPending(ctx context.Context, c *pgx.Conn, ep pgtype.UUID, n int) error {
	_, err := c.Exec(ctx, `INSERT INTO switchboard.todos (endpoint_id, queue, title, payload, payload_size, max_attempts,
			created_at, ready_at)
		SELECT $1, 'bench', 'bench todo', `+benchPayload+`, 23, 5,
		       now() - interval '1 hour' + g * interval '1 millisecond', now() - interval '1 hour'
		  FROM generate_series(1, $2::int) g`, ep, n)
	return err
}

// cycleOp is one claim_next+complete through the functions, as the server calls them.
func cycleOp(ep pgtype.UUID) Op {
	return func(ctx context.Context, _ int, c *pgx.Conn) (bool, error) {
		var id pgtype.UUID
		if err := c.QueryRow(ctx, "SELECT (switchboard.claim_next($1)->'todo'->>'id')::uuid", ep).Scan(&id); err != nil {
			return false, fmt.Errorf("claim_next: %w", err)
		}
		if !id.Valid {
			return false, nil
		}
		if _, err := c.Exec(ctx, "SELECT switchboard.complete($1, $2)", ep, id); err != nil {
			return false, fmt.Errorf("complete: %w", err)
		}
		return true, nil
	}
}

// batchCycleOp is one claim_next {max} + complete {items} through the functions, as the server
// calls them (the ids read from the claim's answer, the items sent back as one JSON array); todos
// counts the todos it finished, for the cost per todo.
func batchCycleOp(ep pgtype.UUID, max int, todos *atomic.Int64) Op {
	return func(ctx context.Context, _ int, c *pgx.Conn) (bool, error) {
		var claimed struct {
			Todos []struct {
				ID string `json:"id"`
			} `json:"todos"`
		}
		if err := c.QueryRow(ctx, "SELECT switchboard.claim_next_many($1, $2)", ep, max).Scan(&claimed); err != nil {
			return false, fmt.Errorf("claim_next_many: %w", err)
		}
		if len(claimed.Todos) == 0 {
			return false, nil
		}
		items, _ := json.Marshal(claimed.Todos)
		if _, err := c.Exec(ctx, "SELECT switchboard.complete_many($1, $2)", ep, string(items)); err != nil {
			return false, fmt.Errorf("complete_many: %w", err)
		}
		todos.Add(int64(len(claimed.Todos)))
		return true, nil
	}
}

// alternate runs the named ops over rounds rounds (forward, then reversed) on one connection
// each, and sums each one's results.
func alternate(ctx context.Context, b *Bench, rounds int, names []string, run func(name string) (Result, error)) (map[string]Result, error) {
	out := map[string]Result{}
	for round := 0; round < rounds; round++ {
		order := slices.Clone(names)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range order {
			r, err := run(n)
			if err != nil {
				return out, fmt.Errorf("%s: %w", n, err)
			}
			b.Logf("%-24s round %d: %.0f/s (%d misses)", n, round, r.Rate(), r.Misses)
			out[n] = out[n].Add(r)
		}
	}
	return out, nil
}

func coldSection(ctx context.Context, b *Bench) ([]Row, error) {
	// Four databases with the same backlog: never analyzed, vacuumed but not analyzed (rows
	// counted, no column statistics), analyzed when it held 10 rows, and analyzed with it. Autovacuum is off on their todos so the cold ones stay cold.
	kinds := []string{"never analyzed", "vacuumed, not analyzed", "analyzed at 10 rows", "after ANALYZE"}
	type db struct {
		f    *sqlFixture
		conn []*pgx.Conn
	}
	dbs := map[string]*db{}
	defer func() {
		for _, d := range dbs {
			CloseAll(d.conn)
			d.f.close()
		}
	}()
	for _, k := range kinds {
		f, err := newSQLFixture(ctx, b, 1)
		if err != nil {
			return nil, err
		}
		d := &db{f: f}
		dbs[k] = d
		ep := f.endpoints[0]
		if _, err := f.admin.Exec(ctx, "ALTER TABLE switchboard.todos SET (autovacuum_enabled = off)"); err != nil {
			return nil, err
		}
		if k == "analyzed at 10 rows" {
			if err := fillPending(ctx, f.admin, ep, 10); err != nil {
				return nil, err
			}
			if _, err := f.admin.Exec(ctx, "ANALYZE switchboard.todos"); err != nil {
				return nil, err
			}
		}
		if err := fillPending(ctx, f.admin, ep, coldBacklog); err != nil {
			return nil, err
		}
		switch k {
		case "after ANALYZE":
			if _, err := f.admin.Exec(ctx, "ANALYZE switchboard.todos"); err != nil {
				return nil, err
			}
		case "vacuumed, not analyzed": // rows counted, no column statistics: a restored dump
			if _, err := f.admin.Exec(ctx, "VACUUM switchboard.todos"); err != nil {
				return nil, err
			}
		}
		if _, err := f.admin.Exec(ctx, "CHECKPOINT"); err != nil {
			return nil, err
		}
		if d.conn, err = b.Connect(ctx, f.url, 1); err != nil {
			return nil, err
		}
	}
	var never float64
	if err := dbs["never analyzed"].f.admin.QueryRow(ctx,
		"SELECT reltuples FROM pg_class WHERE oid = 'switchboard.todos'::regclass").Scan(&never); err != nil {
		return nil, err
	}
	// Twice the rounds: single short runs at one worker swing by a third on a shared machine.
	res, err := alternate(ctx, b, 2*b.Cfg.Rounds, kinds, func(k string) (Result, error) {
		d := dbs[k]
		return b.Run(ctx, d.conn, cycleOp(d.f.endpoints[0]))
	})
	if err != nil {
		return nil, err
	}
	base := res["after ANALYZE"].Rate()
	var rows []Row
	for _, k := range kinds[:3] {
		r := Row{Section: "cold", Name: fmt.Sprintf("claim_next+complete, 100k backlog %s, 1 worker", k),
			Value: res[k].Rate(), Unit: "cycles/s", Baseline: base, Ratio: Ratio(res[k].Rate(), base),
			Target: ">= 0.80 x analyzed", Pass: AtLeast(Ratio(res[k].Rate(), base), 0.8)}
		if k == "never analyzed" {
			r.BaseName = "the same backlog after ANALYZE, same run"
			r.Note = fmt.Sprintf("pg_class.reltuples of the never-analyzed todos: %.0f; autovacuum off on all four", never)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// --- history ------------------------------------------------------------------------------------

const historyRows = 1000000

func historySection(ctx context.Context, b *Bench) ([]Row, error) {
	empty, err := newSQLFixture(ctx, b, 1)
	if err != nil {
		return nil, err
	}
	defer empty.close()
	full, err := newWebhookFixture(ctx, b, 0)
	if err != nil {
		return nil, err
	}
	defer full.close()
	ep := full.endpoints[0]
	t0 := time.Now()
	// 1M events, and 1M done todos pointing at them (their payload is the event's), spread over
	// the past 30 days.
	if _, err := full.admin.Exec(ctx, `INSERT INTO switchboard.webhook_events (webhook_id, source, trust_mode, verified,
			verify_detail, payload_size, payload, delivery_key, disposition, received_at)
		SELECT $1, 'generic', 'signed', true, 'bench', 23, `+benchPayload+`, 'hist-' || g, 'delivered',
		       now() - interval '30 days' + g * interval '2 seconds'
		  FROM generate_series(1, $2::int) g`, full.hook, historyRows); err != nil {
		return nil, fmt.Errorf("fill events: %w", err)
	}
	if _, err := full.admin.Exec(ctx, `INSERT INTO switchboard.todos (endpoint_id, queue, title, source, payload, payload_size,
			event_id, state, attempt, max_attempts, result, created_at, ready_at, updated_at, completed_at)
		SELECT $1, 'bench', 'done todo', 'generic', NULL, 23, ev.id, 'done', 1, 5, '{"ok": true}',
		       ev.received_at, ev.received_at, ev.received_at, ev.received_at + interval '1 second'
		  FROM switchboard.webhook_events ev`, ep); err != nil {
		return nil, fmt.Errorf("fill done todos: %w", err)
	}
	if _, err := full.admin.Exec(ctx, "VACUUM (ANALYZE) switchboard.todos, switchboard.webhook_events"); err != nil {
		return nil, err
	}
	b.Logf("history: %d events and done todos in %s", historyRows, time.Since(t0).Round(time.Second))

	prep := func(f *sqlFixture) error {
		if err := topUp(ctx, f, "switchboard.todos", f.endpoints[0], 40000); err != nil {
			return err
		}
		return f.vacuum(ctx)
	}
	conns := map[string][]*pgx.Conn{}
	fixtures := map[string]*sqlFixture{"1M done todos + 1M events": &full.sqlFixture, "empty tables": empty}
	for k, f := range fixtures {
		c, err := b.Connect(ctx, f.url, 1)
		if err != nil {
			return nil, err
		}
		defer CloseAll(c)
		conns[k] = c
	}
	names := []string{"1M done todos + 1M events", "empty tables"}
	res, err := alternate(ctx, b, 2*b.Cfg.Rounds, names, func(k string) (Result, error) {
		f := fixtures[k]
		if err := prep(f); err != nil {
			return Result{}, err
		}
		return b.Run(ctx, conns[k], cycleOp(f.endpoints[0]))
	})
	if err != nil {
		return nil, err
	}
	hist, base := res[names[0]].Rate(), res[names[1]].Rate()
	rows := []Row{{Section: "history", Name: "claim_next+complete, 1M done todos + 1M events, 1 worker",
		Value: hist, Unit: "cycles/s", Baseline: base, BaseName: "the same on empty tables, same run",
		Ratio: Ratio(hist, base), Target: ">= 0.90 x empty", Pass: AtLeast(Ratio(hist, base), 0.9)}}

	// list_todos (newest first, no filter: the done rows are the newest ones too) on the full table.
	var lat []time.Duration
	c := conns[names[0]][0]
	for i := 0; i < 500; i++ {
		start := time.Now()
		if _, err := c.Exec(ctx, "SELECT switchboard.list_todos($1)", ep); err != nil {
			return rows, fmt.Errorf("list_todos: %w", err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	p99 := lat[len(lat)*99/100]
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rows = append(rows, Row{Section: "history", Name: "list_todos p99 (50 newest), 1M done todos", Value: ms(p99), Unit: "ms",
		Target: "< 5 ms", Pass: Below(ms(p99), 5), Note: fmt.Sprintf("500 calls, p50 %.2f ms", ms(lat[len(lat)/2]))})

	// reap() of 100k expired leases beside the million done rows.
	if _, err := full.admin.Exec(ctx, "DELETE FROM switchboard.todos WHERE state <> 'done'"); err != nil {
		return rows, err
	}
	if _, err := full.admin.Exec(ctx, `INSERT INTO switchboard.todos (endpoint_id, queue, title, payload, payload_size, max_attempts,
			state, owner, lease_expires_at, attempt, created_at, ready_at)
		SELECT $1, 'bench', 'bench todo', `+benchPayload+`, 23, 5, 'claimed', 'agent:bench', now() - interval '1 minute', 1,
		       now() - interval '1 hour' + g * interval '1 millisecond', now() - interval '1 hour'
		  FROM generate_series(1, 100000) g`, ep); err != nil {
		return rows, err
	}
	if err := full.vacuum(ctx); err != nil {
		return rows, err
	}
	start := time.Now()
	var requeued int
	if err := full.admin.QueryRow(ctx, "SELECT requeued FROM switchboard.reap()").Scan(&requeued); err != nil {
		return rows, fmt.Errorf("reap: %w", err)
	}
	took := time.Since(start).Seconds()
	if requeued != 100000 {
		return rows, fmt.Errorf("reap requeued %d of 100000", requeued)
	}
	rows = append(rows, Row{Section: "history", Name: "reap() of 100000 expired leases, 1M done todos", Value: took, Unit: "s",
		Target: "< 5 s", Pass: Below(took, 5)})

	// The claim index after a million todos passed through it (claimed and completed one by one
	// would take too long here: a set-based pass makes the same dead entries), before and after
	// VACUUM, and what REINDEX CONCURRENTLY gives back.
	size := func() (int64, int64, error) {
		var pages, deleted int64
		err := full.admin.QueryRow(ctx, `SELECT pg_relation_size('switchboard.todos_claimable') / 8192,
			       (SELECT count(*) FROM generate_series(1, pg_relation_size('switchboard.todos_claimable') / 8192 - 1) p
			         WHERE (SELECT btpo_flags & 4 FROM bt_page_stats('switchboard.todos_claimable', p::int)) <> 0)`).
			Scan(&pages, &deleted)
		return pages, deleted, err
	}
	if _, err := full.admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pageinspect"); err != nil {
		return rows, err
	}
	if _, err := full.admin.Exec(ctx, "DELETE FROM switchboard.todos WHERE state <> 'done'"); err != nil {
		return rows, err
	}
	if err := fillPending(ctx, full.admin, ep, historyRows); err != nil {
		return rows, err
	}
	if _, err := full.admin.Exec(ctx, "UPDATE switchboard.todos SET state = 'done', completed_at = now() WHERE state = 'pending'"); err != nil {
		return rows, err
	}
	peak, _, err := size()
	if err != nil {
		return rows, err
	}
	if _, err := full.admin.Exec(ctx, "VACUUM switchboard.todos"); err != nil {
		return rows, err
	}
	after, deleted, err := size()
	if err != nil {
		return rows, err
	}
	if _, err := full.admin.Exec(ctx, "REINDEX INDEX CONCURRENTLY switchboard.todos_claimable"); err != nil {
		return rows, err
	}
	reindexed, _, err := size()
	if err != nil {
		return rows, err
	}
	rows = append(rows, Row{Section: "history", Name: "todos_claimable after 1M todos passed, then VACUUM", Value: float64(after),
		Unit: "pages", Note: fmt.Sprintf("%d pages at the peak; after VACUUM %d of %d pages deleted (reusable by later splits); "+
			"after REINDEX CONCURRENTLY %d pages", peak, deleted, after, reindexed)})
	return rows, nil
}

// --- wal ----------------------------------------------------------------------------------------

// webhookFixture is a sqlFixture whose first endpoint owns a generic webhook routed to the others.
type webhookFixture struct {
	sqlFixture
	hook string
}

// newWebhookFixture vends 1+routes endpoints of one human; the first owns a generic webhook on
// queue bench, routed to the other routes endpoints.
func newWebhookFixture(ctx context.Context, b *Bench, routes int) (*webhookFixture, error) {
	url, err := b.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	f := &webhookFixture{sqlFixture: sqlFixture{url: url, admin: c}}
	// bench_bare only because sqlFixture.vacuum names it.
	if _, err := c.Exec(ctx, bareDDL+"; SELECT switchboard.human_add('bench')"); err != nil {
		f.close()
		return nil, err
	}
	for i := 0; i <= routes; i++ {
		cred := "sbk_" + hexToken(32)
		var id pgtype.UUID
		err := c.QueryRow(ctx,
			`SELECT (switchboard.endpoint_vend('bench', $1, $2, 'sbk_', '{bench}', NULL, 1, '{generic}', '{bench}', NULL)->>'endpoint_id')::uuid`,
			fmt.Sprintf("bench-hook-%d", i), store.CredentialHash(cred)).Scan(&id)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("endpoint_vend: %w", err)
		}
		f.endpoints = append(f.endpoints, id)
	}
	err = c.QueryRow(ctx, `SELECT switchboard.webhook_create($1, 'generic', 'bench', $2, $3)->>'webhook_id'`,
		f.endpoints[0], hexToken(32), "whsec_"+hexToken(32)).Scan(&f.hook)
	if err != nil {
		f.close()
		return nil, fmt.Errorf("webhook_create: %w", err)
	}
	for _, t := range f.endpoints[1:] {
		if _, err := c.Exec(ctx, "SELECT switchboard.route_add($1, $2, $3::text)", f.endpoints[0], f.hook, t); err != nil {
			f.close()
			return nil, fmt.Errorf("route_add: %w", err)
		}
	}
	return f, nil
}

const (
	walPayload    = 64 << 10 // bytes of JSON per delivery, barely compressible (random base64)
	walDeliveries = 200
)

func walSection(ctx context.Context, b *Bench) ([]Row, error) {
	// WAL per delivery: pg_current_wal_lsn() before and after walDeliveries ingest() calls on an
	// otherwise idle cluster (right after a CHECKPOINT, with the full-page images that follow it
	// spread over as many deliveries in both cases).
	perDelivery := func(routes int) (float64, error) {
		f, err := newWebhookFixture(ctx, b, routes)
		if err != nil {
			return 0, err
		}
		defer f.close()
		// Doorbell off: its one row's update is the same for any fan-out, and not payload.
		if err := f.setting(ctx, "doorbell_enabled", 0); err != nil {
			return 0, err
		}
		payloads := make([][]byte, walDeliveries)
		for i := range payloads {
			raw := make([]byte, walPayload*3/4)
			_, _ = rand.Read(raw)
			payloads[i], _ = json.Marshal(map[string]any{"n": i, "blob": base64.StdEncoding.EncodeToString(raw)})
		}
		run := func(tag string) (int64, error) {
			if _, err := f.admin.Exec(ctx, "CHECKPOINT"); err != nil {
				return 0, err
			}
			var start string
			if err := f.admin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&start); err != nil {
				return 0, err
			}
			for i, p := range payloads {
				var raw []byte
				if err := f.admin.QueryRow(ctx, ingestSQL, f.hook, fmt.Sprintf("%s-%d", tag, i), "bench", true, "bench",
					"application/json", len(p), p, "{}", "bench delivery", "delivered", nil, nil, nil).Scan(&raw); err != nil {
					return 0, fmt.Errorf("ingest: %w", err)
				}
			}
			var bytes int64
			err := f.admin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - $1::pg_lsn", start).Scan(&bytes)
			return bytes, err
		}
		if _, err := run("warm"); err != nil { // plans, catalog caches, the first pages
			return 0, err
		}
		var total int64
		for round := 0; round < b.Cfg.Rounds; round++ {
			n, err := run(fmt.Sprintf("r%d", round))
			if err != nil {
				return 0, err
			}
			total += n
		}
		return float64(total) / float64(b.Cfg.Rounds*walDeliveries), nil
	}
	one, err := perDelivery(0)
	if err != nil {
		return nil, err
	}
	ten, err := perDelivery(9)
	if err != nil {
		return nil, err
	}
	kib := func(v float64) float64 { return v / 1024 }
	return []Row{
		{Section: "wal", Name: "WAL per delivery, 64 KiB payload, 1 target", Value: kib(one), Unit: "KiB"},
		{Section: "wal", Name: "WAL per delivery, 64 KiB payload, 10 targets", Value: kib(ten), Unit: "KiB",
			Baseline: kib(one), BaseName: "the same delivery to 1 target; ratio here = 1 target / 10 targets",
			Ratio: Ratio(one, ten), Target: "10 <= 1.3 x 1", Pass: func() *bool { p := ten <= 1.3*one; return &p }()},
	}, nil
}
