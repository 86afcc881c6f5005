// Package sqltest exercises the queue's PL/pgSQL functions directly, the way a DBA would from
// psql: every test gets a fresh migrated database (testdb.New), calls switchboard.* with plain
// SQL over pgx, and checks rows and SQLSTATEs. Nothing here goes through the Go server.
//
// Each test holds a pgxpool.Pool on its database; concurrency tests acquire one pooled session
// per worker so that the workers really are separate connections. LISTEN uses its own pgx.Conn.

package sqltest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"switchboard/tests/testdb"
)

// SQLSTATEs of switchboard.error_codes.
const (
	invalidArgument = "SB400"
	forbidden       = "SB403"
	notFound        = "SB404"
	conflict        = "SB409"
)

func ctx() context.Context { return context.Background() }

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// querier is what the helpers need: a pool, a pooled session, or a plain connection.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is a fresh test database plus a pool on it.
type DB struct {
	t   testing.TB
	URL string
	*pgxpool.Pool
}

// fresh creates a migrated database for this test (dropped at the end) and a pool on it.
func fresh(t testing.TB) *DB {
	t.Helper()
	url := testdb.New(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 24 // the widest test uses 20 workers plus the pool's own queries
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(c, cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close) // before the database is dropped (cleanups run last-in first-out)
	return &DB{t: t, URL: url, Pool: pool}
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(c, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// conns acquires n distinct pooled sessions, released when the test ends.
func (d *DB) conns(n int) []*pgxpool.Conn {
	d.t.Helper()
	out := make([]*pgxpool.Conn, n)
	for i := range out {
		c, err := d.Acquire(ctx())
		if err != nil {
			d.t.Fatalf("acquire: %v", err)
		}
		out[i] = c
		d.t.Cleanup(c.Release)
	}
	return out
}

func (d *DB) exec(sql string, args ...any) {
	d.t.Helper()
	if _, err := d.Exec(ctx(), sql, args...); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
}

// set changes a tunable the way a DBA does.
func (d *DB) set(key string, value float64) {
	d.t.Helper()
	tag, err := d.Exec(ctx(), "UPDATE switchboard.settings SET value = $2 WHERE key = $1", key, value)
	if err != nil || tag.RowsAffected() != 1 {
		d.t.Fatalf("set %s=%v: %v (%d rows)", key, value, err, tag.RowsAffected())
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// vendCred vends an endpoint for an agent of a human (both created when new) with every verb and
// returns the endpoint id and the credential hash stored for it.
func (d *DB) vendCred(human, agent string, queues ...string) (string, []byte) {
	d.t.Helper()
	if _, err := d.Exec(ctx(), "SELECT switchboard.human_add($1)", human); err != nil && sqlstate(err) != conflict {
		d.t.Fatalf("human_add %s: %v", human, err)
	}
	cred := "sbk_" + randomHex(32)
	sum := sha256.Sum256([]byte(cred))
	var id string
	err := d.QueryRow(ctx(),
		"SELECT switchboard.endpoint_vend($1, $2, $3, $4, $5)->>'endpoint_id'",
		human, agent, sum[:], cred[:10], queues).Scan(&id)
	if err != nil {
		d.t.Fatalf("endpoint_vend %s/%s: %v", human, agent, err)
	}
	return id, sum[:]
}

// vend returns the id of a new endpoint granted the queues.
func (d *DB) vend(human, agent string, queues ...string) string {
	d.t.Helper()
	id, _ := d.vendCred(human, agent, queues...)
	return id
}

// create inserts a todo without an idempotency key and returns its id.
func (d *DB) create(ep, queue, title string) string {
	d.t.Helper()
	id, created, err := createKey(d.Pool, ep, queue, title, nil)
	if err != nil || !created {
		d.t.Fatalf("create_todo %s/%s: created=%v err=%v", queue, title, created, err)
	}
	return id
}

// createKey calls create_todo with an idempotency key (nil: none).
func createKey(c querier, ep, queue, title string, key *string) (id string, created bool, err error) {
	err = c.QueryRow(ctx(),
		"SELECT todo_id, created FROM switchboard.create_todo($1, $2, $3, '{\"n\": 1}', $4)",
		ep, queue, title, key).Scan(&id, &created)
	return
}

// call runs one function returning jsonb and decodes it.
func call(c querier, sql string, args ...any) (map[string]any, error) {
	var out map[string]any
	err := c.QueryRow(ctx(), sql, args...).Scan(&out)
	return out, err
}

// callNow evaluates a jsonb expression (e.g. "switchboard.fail($1, $2)") and returns it with the
// transaction's now(), so deadlines computed from now() can be compared exactly.
func callNow(c querier, expr string, args ...any) (map[string]any, time.Time, error) {
	var out map[string]any
	var now time.Time
	err := c.QueryRow(ctx(), "SELECT "+expr+", now()", args...).Scan(&out, &now)
	return out, now, err
}

func claim(c querier, ep, id string) (map[string]any, error) {
	return call(c, "SELECT switchboard.claim($1, $2)", ep, id)
}

func claimNext(c querier, ep string) (map[string]any, error) {
	return call(c, "SELECT switchboard.claim_next($1)", ep)
}

// mustClaim claims a todo by id and returns the JSON.
func (d *DB) mustClaim(ep, id string) map[string]any {
	d.t.Helper()
	out, err := claim(d.Pool, ep, id)
	if err != nil {
		d.t.Fatalf("claim %s: %v", id, err)
	}
	return out
}

func (d *DB) mustCall(sql string, args ...any) map[string]any {
	d.t.Helper()
	out, err := call(d.Pool, sql, args...)
	if err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// reap runs switchboard.reap() and returns its counts.
func reap(t testing.TB, c querier) (requeued, deadLettered, retriesReleased int) {
	t.Helper()
	if err := c.QueryRow(ctx(), "SELECT requeued, dead_lettered, retries_released FROM switchboard.reap()").
		Scan(&requeued, &deadLettered, &retriesReleased); err != nil {
		t.Fatalf("reap: %v", err)
	}
	return
}

// todoRow is a todo as stored.
type todoRow struct {
	State          string
	Owner          *string
	Attempt        int
	MaxAttempts    int
	LeaseExpiresAt *time.Time
	LeaseTokenHash []byte
	NextRetryAt    *time.Time
	Result         map[string]any
	CompletedAt    *time.Time
	UpdatedAt      time.Time
}

func (d *DB) row(id string) todoRow {
	d.t.Helper()
	var r todoRow
	err := d.QueryRow(ctx(), `
		SELECT state, owner, attempt, max_attempts, lease_expires_at, lease_token_hash,
		       next_retry_at, result, completed_at, updated_at
		  FROM switchboard.todos WHERE id = $1`, id).
		Scan(&r.State, &r.Owner, &r.Attempt, &r.MaxAttempts, &r.LeaseExpiresAt, &r.LeaseTokenHash,
			&r.NextRetryAt, &r.Result, &r.CompletedAt, &r.UpdatedAt)
	if err != nil {
		d.t.Fatalf("read todo %s: %v", id, err)
	}
	return r
}

// expireLease moves a claimed todo's lease into the past, as if its TTL had run out.
func (d *DB) expireLease(id string) {
	d.t.Helper()
	d.exec("UPDATE switchboard.todos SET lease_expires_at = now() - interval '1 second' WHERE id = $1 AND state = 'claimed'", id)
}

// dueRetry moves a parked retry's window into the past.
func (d *DB) dueRetry(id string) {
	d.t.Helper()
	d.exec("UPDATE switchboard.todos SET next_retry_at = now() - interval '1 second' WHERE id = $1 AND next_retry_at IS NOT NULL", id)
}

func (d *DB) ownerOf(ep string) string {
	d.t.Helper()
	var agent string
	if err := d.QueryRow(ctx(), "SELECT agent_id FROM switchboard.endpoints WHERE id = $1", ep).Scan(&agent); err != nil {
		d.t.Fatal(err)
	}
	return "agent:" + agent
}

// sqlstate is the SQLSTATE of a PostgreSQL error, or "" for anything else (nil included).
func sqlstate(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

func pgMessage(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Message
	}
	return fmt.Sprint(err)
}

// wantCode fails unless err carries the SQLSTATE.
func wantCode(t testing.TB, err error, code, what string) {
	t.Helper()
	if got := sqlstate(err); got != code {
		t.Fatalf("%s: want SQLSTATE %s, got %q (err %v)", what, code, got, err)
	}
}

// near fails unless got is within tol of want.
func near(t testing.TB, what string, got, want time.Time, tol time.Duration) {
	t.Helper()
	if d := got.Sub(want); math.Abs(float64(d)) > float64(tol) {
		t.Fatalf("%s: got %s, want %s (off by %s, tolerance %s)", what, got.UTC().Format(time.RFC3339Nano),
			want.UTC().Format(time.RFC3339Nano), d, tol)
	}
}

// parseTS reads an RFC 3339 time out of a todo JSON field.
func parseTS(t testing.TB, v any) time.Time {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("want an RFC 3339 string, got %#v", v)
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return ts
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// barrier starts n goroutines together and waits for them all.
func together(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}
