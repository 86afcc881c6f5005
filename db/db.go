// Package db holds the schema: tern migrations that create the tables (db/migrations) and the
// code package that holds Switchboard's logic, its PL/pgSQL functions, views and triggers
// (db/code). Both are embedded so the one binary can apply them; the same files work with the
// tern CLI (see tern.conf).
package db

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

//go:embed code/*.sql
var code embed.FS

// VersionTable records the applied migration version (shared with tern.conf).
const VersionTable = "public.switchboard_schema_version"

// ternLock is the advisory lock tern takes around migrations and code installs; holding it for
// the whole transaction serializes this migrate with other migrates and with the tern CLI.
const ternLock = 9628173550095224

// Code is the code package (install.sql and the files it includes).
func Code() fs.FS {
	sub, err := fs.Sub(code, "code")
	if err != nil {
		panic(err)
	}
	return sub
}

// Migrate applies every pending migration and then installs the code package, in one
// transaction: a failure anywhere leaves the database as it was. It reports how many migrations
// ran and the resulting version. Running it again applies nothing and installs the same code.
func Migrate(ctx context.Context, conn *pgx.Conn) (applied int, version int32, err error) {
	pkg, err := migrate.LoadCodePackage(Code())
	if err != nil {
		return 0, 0, fmt.Errorf("load code package: %w", err)
	}
	install, err := pkg.Eval(map[string]any{})
	if err != nil {
		return 0, 0, fmt.Errorf("code package: %w", err)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(ternLock)); err != nil {
		return 0, 0, fmt.Errorf("migration lock: %w", err)
	}
	// The migrator runs on the same connection, inside this transaction (DisableTx: it must not
	// commit each migration on its own).
	m, err := migrate.NewMigratorEx(ctx, conn, VersionTable, &migrate.MigratorOptions{DisableTx: true})
	if err != nil {
		return 0, 0, fmt.Errorf("migrator: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return 0, 0, err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return 0, 0, fmt.Errorf("load migrations: %w", err)
	}
	before, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("current version: %w", err)
	}
	if int(before) > len(m.Migrations) {
		return 0, 0, fmt.Errorf("schema version %d is newer than this binary's %d migrations: "+
			"a database made before the migrations were squashed must be created again "+
			"(drop it, or `make clean-db` for the private cluster)", before, len(m.Migrations))
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, 0, fmt.Errorf("migrate: %w", err)
	}
	after, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("current version: %w", err)
	}
	if _, err := tx.Exec(ctx, install); err != nil {
		return 0, 0, fmt.Errorf("install code package: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	return int(after - before), after, nil
}

// Fingerprint identifies the embedded migrations and code package (a hash of their names and
// contents), so test templates built from an older schema are never reused.
func Fingerprint() string {
	h := sha256.New()
	for _, dir := range []struct {
		fsys embed.FS
		name string
	}{{migrations, "migrations"}, {code, "code"}} {
		entries, _ := fs.ReadDir(dir.fsys, dir.name)
		for _, e := range entries {
			b, _ := dir.fsys.ReadFile(path.Join(dir.name, e.Name()))
			fmt.Fprintf(h, "%s/%s\x00%d\x00", dir.name, e.Name(), len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
