// Package store is the one SQL boundary: every query the server and the CLI send to PostgreSQL
// is written once here, as a method with typed arguments and results, over the PL/pgSQL
// functions of the schema switchboard (db/code). Store, over the server's pool (running as
// RuntimeRole), serves the agent's tools (todos.go, webhooks.go, resources.go), the webhook
// receiver (ingest.go), OAuth (oauth.go), the doorbell (doorbell.go, listen.go) and the
// maintenance loop and metrics (maintenance.go, depth.go); Operator, one connection as the
// URL's login, serves the operator CLI (operator.go). Each method is one SQL call (or one
// pipelined batch) made with the caller's context; every value travels as a query parameter.
// The functions already return the wire shapes as jsonb, so results pass through as raw JSON.
// Every error a Store method returns is a *Error (see Classify): a domain refusal with its wire
// code, or internal with the cause kept. Operator's errors are the driver's (the CLI maps them).
package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store calls the switchboard functions over a connection pool.
type Store struct {
	pool *pgxpool.Pool
}

// New wraps a pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool is the underlying pool, for tests that look under the methods (the role it runs as,
// its statistics); server code calls the methods.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// PoolConfig parses a database URL into a pool configuration with the server's defaults:
// maxConns connections (0: 4 × GOMAXPROCS, at least 16 — pgx's own default of 4 starves
// concurrent sessions: complete+next holds a connection for its pipelined transaction).
// Statements are prepared once per connection and cached (pgx's default exec mode, the
// fastest measured); behind a pooler that cannot keep prepared statements, add
// default_query_exec_mode=exec (or simple_protocol) to the URL.
func PoolConfig(url string, maxConns int32) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if maxConns <= 0 {
		maxConns = int32(max(16, 4*runtime.GOMAXPROCS(0)))
	}
	cfg.MaxConns = maxConns
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.HealthCheckPeriod = 30 * time.Second
	return cfg, nil
}

// RuntimeRole is the PostgreSQL role the server's SQL runs as (created by `switchboard migrate`):
// it may only execute the functions the server calls. See docs/sql.md.
const RuntimeRole = "switchboard_runtime"

// Open connects a pool for the server (see PoolConfig) whose every connection runs as
// RuntimeRole, whatever login the URL names (SET ROLE right after connecting, as PostgREST does;
// the login must be a member of the role or a superuser), and checks that the database answers.
// Connections copied from its ConnConfig (the doorbell's LISTEN connection) do the same.
//
// When the database ends a session for good (SQLSTATE 57P0x: it is shutting down or restarting
// after a crash, a DBA terminated the backend, the database was dropped), the pool's other idle
// connections are most likely gone as well, each with the same error waiting in its socket.
// The pool then drops them all at once (pgxpool.Reset): only the calls that were using a
// connection fail (internal, nothing committed), not one more call per dead connection.
func Open(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return open(ctx, url, maxConns, RuntimeRole)
}

// OpenAdmin is Open without the role change: the pool runs as the URL's login. For tools and
// test fixtures that read or write tables directly, never for the server.
func OpenAdmin(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return open(ctx, url, maxConns, "")
}

func open(ctx context.Context, url string, maxConns int32, role string) (*pgxpool.Pool, error) {
	cfg, err := PoolConfig(url, maxConns)
	if err != nil {
		return nil, err
	}
	if role != "" {
		setRole := "SET ROLE " + pgx.Identifier{role}.Sanitize()
		cfg.ConnConfig.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
			if _, err := c.Exec(ctx, setRole).ReadAll(); err != nil {
				return fmt.Errorf("%s (has `switchboard migrate` run, and is the login a member of %s?): %w",
					setRole, role, err)
			}
			return nil
		}
	}
	var opened atomic.Pointer[pgxpool.Pool]
	cfg.ConnConfig.OnPgError = func(_ *pgconn.PgConn, e *pgconn.PgError) bool {
		if strings.HasPrefix(e.Code, "57P0") {
			if pool := opened.Load(); pool != nil {
				pool.Reset()
			}
		}
		return !strings.EqualFold(e.Severity, "FATAL") // pgx's default: close the connection on FATAL
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	opened.Store(pool)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return Internal(err)
	}
	return nil
}

// Endpoint is an active endpoint and its immutable scope, as resolved from a credential.
type Endpoint struct {
	ID      string
	Slug    string
	AgentID string
	HumanID string
	Queues  []string
	Verbs   []string
	// OAuth: the credential was an OAuth access token (server/oauth), bound to this endpoint,
	// that expires at Expires (zero for an sbk_ credential).
	OAuth   bool
	Expires time.Time
}

// CredentialHash is what switchboard.endpoints stores for a bearer credential.
func CredentialHash(credential string) []byte {
	h := sha256.Sum256([]byte(credential))
	return h[:]
}

// ResolveCredential finds the active endpoint whose credential hashes to hash (one call of
// switchboard.credential_resolve). ok is false for an unknown or revoked credential.
func (s *Store) ResolveCredential(ctx context.Context, hash []byte) (ep Endpoint, ok bool, err error) {
	row := s.pool.QueryRow(ctx,
		`SELECT endpoint_id, slug, agent_id, human_id, queues, verbs, oauth, expires_at FROM switchboard.credential_resolve($1)`, hash)
	var expires *time.Time
	err = row.Scan(&ep.ID, &ep.Slug, &ep.AgentID, &ep.HumanID, &ep.Queues, &ep.Verbs, &ep.OAuth, &expires)
	if expires != nil {
		ep.Expires = *expires
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, false, nil
	}
	if err != nil {
		return Endpoint{}, false, Classify(err)
	}
	return ep, true, nil
}

// jsonCall runs one SQL statement that returns a single jsonb value.
func (s *Store) jsonCall(ctx context.Context, sql string, args ...any) ([]byte, error) {
	var out []byte
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&out); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}
