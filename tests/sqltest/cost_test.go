package sqltest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A claimer skips the row another open transaction holds: with the first claim uncommitted, a
// second connection that will not wait for locks (lock_timeout) gets the next todo at once.
// Without SKIP LOCKED in claim_next it would block on the first row and fail with 55P03.
func TestClaimNextSkipsLockedRow(t *testing.T) {
	d := fresh(t)
	ep := d.vend("ann", "a1", "q")
	first := d.create(ep, "q", "first")
	second := d.create(ep, "q", "second")

	c := d.conns(2)
	tx, err := c[0].Begin(ctx())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx())
	held, err := claimNext(tx, ep)
	if err != nil || held["todo"].(map[string]any)["id"] != first {
		t.Fatalf("first claim = %v, %v; want %s", held, err, first)
	}

	if _, err := c[1].Exec(ctx(), "SET lock_timeout = '200ms'"); err != nil {
		t.Fatal(err)
	}
	// The first row stays locked until the test ends, so a claim that waited for it could only
	// end in 55P03: the lock timeout tells waiting from skipping, however slow the machine.
	got, err := claimNext(c[1], ep)
	if err != nil {
		t.Fatalf("second claimer: %v (it waited on the held row instead of skipping it)", err)
	}
	if id := got["todo"].(map[string]any)["id"]; id != second {
		t.Fatalf("second claimer got %v, want %s", id, second)
	}
}

// plans collects the plans auto_explain logs for every statement (nested ones included) run
// on c while f runs.
func plans(t *testing.T, url string, f func(c *pgx.Conn)) []string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "plan:") {
			mu.Lock()
			out = append(out, n.Message)
			mu.Unlock()
		}
	}
	cctx, cancel := context.WithTimeout(ctx(), 30*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx())
	for _, s := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on", "SET client_min_messages = log"} {
		if _, err := c.Exec(ctx(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	f(c)
	if _, err := c.Exec(ctx(), "SET client_min_messages = notice"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

// The hot statements plan as index walks on a table PostgreSQL has no statistics for: 100,000
// pending todos inserted into a fresh database (autovacuum off, so it stays that way), then
// claim_next and complete, past the custom plans into the generic one; then the same after a
// VACUUM, which counts the rows but gathers no column statistics (what a restored dump looks
// like: pg_restore builds the indexes after the data). No plan sorts, the claim walks
// todos_claimable, complete finds its row by primary key.
func TestColdTableClaimPlans(t *testing.T) {
	d := fresh(t)
	ep := d.vend("ann", "a1", "q")
	d.exec("ALTER TABLE switchboard.todos SET (autovacuum_enabled = off)")
	d.exec(`INSERT INTO switchboard.todos (endpoint_id, queue, title, payload, payload_size, max_attempts, created_at, ready_at)
		SELECT $1, 'q', 'cold', '{}', 2, 5, now() - interval '1 hour' + g * interval '1 millisecond', now() - interval '1 hour'
		  FROM generate_series(1, 100000) g`, ep)
	stats := func() (reltuples float64, columns int) {
		if err := d.QueryRow(ctx(), `SELECT reltuples, (SELECT count(*) FROM pg_stats WHERE schemaname = 'switchboard' AND tablename = 'todos')
			  FROM pg_class WHERE oid = 'switchboard.todos'::regclass`).Scan(&reltuples, &columns); err != nil {
			t.Fatal(err)
		}
		return
	}
	if rt, cols := stats(); rt != -1 || cols != 0 {
		t.Fatalf("reltuples = %v, %d column statistics: the table was analyzed, the test proves nothing", rt, cols)
	}
	checkColdPlans(t, d, ep, "never analyzed")
	d.exec("VACUUM switchboard.todos")
	if rt, cols := stats(); rt < 90000 || cols != 0 {
		t.Fatalf("after VACUUM: reltuples = %v, %d column statistics", rt, cols)
	}
	checkColdPlans(t, d, ep, "vacuumed, not analyzed")
}

func checkColdPlans(t *testing.T, d *DB, ep, state string) {
	t.Helper()
	logged := plans(t, d.URL, func(c *pgx.Conn) {
		for i := 0; i < 8; i++ { // PL/pgSQL switches to a generic plan after five custom ones
			var id string
			if err := c.QueryRow(ctx(), "SELECT switchboard.claim_next($1)->'todo'->>'id'", ep).Scan(&id); err != nil {
				t.Fatalf("claim_next: %v", err)
			}
			if _, err := c.Exec(ctx(), "SELECT switchboard.complete($1, $2)", ep, id); err != nil {
				t.Fatalf("complete: %v", err)
			}
		}
	})
	claims, completes := 0, 0
	for _, p := range logged {
		if strings.Contains(p, "Sort") {
			t.Errorf("%s: a hot statement sorts:\n%s", state, p)
		}
		if strings.Contains(p, "todos_recent") {
			t.Errorf("%s: a hot statement walks the endpoint's history (todos_recent):\n%s", state, p)
		}
		if strings.Contains(p, "FOR UPDATE SKIP LOCKED") {
			claims++
			if !strings.Contains(p, "Index Scan using todos_claimable") {
				t.Errorf("%s: the claim does not walk todos_claimable:\n%s", state, p)
			}
		}
		if strings.Contains(p, "SET state = 'done'") {
			completes++
			if !strings.Contains(p, "Index Scan using todos_pkey") {
				t.Errorf("%s: complete does not find its row by primary key:\n%s", state, p)
			}
		}
	}
	if claims != 8 || completes != 8 {
		t.Fatalf("%s: saw %d claim and %d complete plans, want 8 each (auto_explain output changed?)", state, claims, completes)
	}
}
