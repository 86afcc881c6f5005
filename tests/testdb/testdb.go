// Package testdb gives each test (or test package) a fresh, migrated database of its own, cloned
// from a template database that is built once per schema version. It needs a PostgreSQL server:
// SWITCHBOARD_TEST_DATABASE_URL (or DATABASE_URL) names a database on it whose user may CREATE
// DATABASE; `make test` starts the private cluster and sets it.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/db"
)

// AdminURL is the server the test databases are created on.
func AdminURL() (string, error) {
	for _, k := range []string{"SWITCHBOARD_TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL for tests: run `make test`, or set SWITCHBOARD_TEST_DATABASE_URL")
}

// WithDatabase returns the URL with its database name replaced.
func WithDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Create makes a fresh migrated database and returns its URL and a drop function.
func Create(ctx context.Context) (string, func(), error) {
	admin, err := AdminURL()
	if err != nil {
		return "", nil, err
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect admin: %w", err)
	}
	defer conn.Close(ctx)
	tpl, err := ensureTemplate(ctx, conn, admin)
	if err != nil {
		return "", nil, err
	}
	name := "sbtest_" + randomHex(6)
	// Cloning needs the template idle; another package may be cloning it right now.
	for i := 0; ; i++ {
		_, err = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tpl))
		if err == nil || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return "", nil, fmt.Errorf("create test database: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
	}
	return WithDatabase(admin, name), drop, nil
}

// New is Create for one test: the database is dropped when the test ends.
func New(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn, drop, err := Create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	return dsn
}

// ensureTemplate builds switchboard_tpl_<fingerprint> once, under an advisory lock so parallel
// test packages do not race to build it.
func ensureTemplate(ctx context.Context, conn *pgx.Conn, admin string) (string, error) {
	tpl := "switchboard_tpl_" + db.Fingerprint()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(727274)"); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(727274)")
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tpl).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return tpl, nil
	}
	building := tpl + "_build"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	c, err := pgx.Connect(ctx, WithDatabase(admin, building))
	if err != nil {
		return "", err
	}
	if _, _, err := db.Migrate(ctx, c); err != nil {
		c.Close(ctx)
		return "", fmt.Errorf("migrate template: %w", err)
	}
	c.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, tpl)); err != nil {
		return "", err
	}
	return tpl, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
